"""``nn.Linear`` on tuned kernels: a weight stored transposed, so ``x @ weight.T`` is row-major.

``nn.Linear`` keeps its weight ``out x in`` row-major, and its product ``x @ weight.T`` then reads
``b`` transposed, which no tuned kernel takes. :class:`Linear` keeps the same parameter, of the
same shape, with its elements laid out ``in x out`` row-major: ``weight.T`` is then a row-major
matrix, and the product runs :func:`autotune.torch.gemm` with no copy. State dicts, optimizers and
``load_state_dict`` see an ordinary ``out x in`` parameter. Where no kernel can repay the operator's
host time (too few rows, a layer the table serves with cuBLAS at every number of rows, a layer off
the GPU) the layer calls PyTorch's ``linear`` directly.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from autotune.torch.ops import OPERATOR_HOST, device_runtime, gemm

__all__ = ["Linear", "use_autotune"]


class Linear(nn.Linear):
    """A drop-in ``nn.Linear`` (same arguments, parameters and state dict) whose product runs
    :func:`autotune.torch.gemm`."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        relay_weight(self)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "Linear":
        """``linear`` turned into a :class:`Linear` in place: the same parameter objects (an optimizer that
        holds them goes on working), the weight's elements laid out anew."""
        linear.__class__ = cls
        relay_weight(linear)
        return linear

    def forward(self, x: Tensor) -> Tensor:
        if not self.weight.t().is_contiguous():  # a weight assigned since (load_state_dict(assign=True), say)
            relay_weight(self)
        rows = kernel_rows(self.weight.dtype, self.weight.device, self.out_features, self.in_features)
        if rows is None or x.numel() < rows * self.in_features:  # under torch.compile: a guard on the rows
            return nn.functional.linear(x, self.weight, self.bias)  # no detour through the operator
        return gemm(x, self.weight.t(), self.bias, 1.0, 1.0)


@torch.compiler.assume_constant_result  # one answer per layer while a compiled graph lives
def kernel_rows(dtype: torch.dtype, device: torch.device, out_features: int, in_features: int) -> int | None:
    """From how many rows of its input a layer of this weight may run a tuned kernel, the operator's host
    time counted (:data:`~autotune.torch.ops.OPERATOR_HOST`); None where it never does. Below it, the
    layer calls PyTorch's ``linear`` itself."""
    if device.type != "cuda":
        return None
    runtime = device_runtime(device)
    return None if runtime is None else runtime.kernel_rows(dtype, out_features, in_features, OPERATOR_HOST)


def relay_weight(linear: nn.Linear) -> None:
    """Store ``linear.weight``'s elements ``in x out`` row-major, keeping the parameter and its values."""
    with torch.no_grad():
        weight = linear.weight
        if not weight.t().is_contiguous():
            weight.data = weight.data.t().contiguous().t()


def use_autotune(module: nn.Module) -> nn.Module:
    """Every ``nn.Linear`` in ``module`` (itself included) turned into a :class:`Linear`, in place; returns
    ``module``. The parameters stay the same objects, with the same values."""
    for layer in module.modules():
        if type(layer) is nn.Linear:
            Linear.from_linear(layer)
    return module
