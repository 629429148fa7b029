"""``nn.Linear`` through the table: ``x @ weight.T`` on a tuned kernel where one serves it, else PyTorch's own.

``nn.Linear`` keeps its weight ``out x in`` row-major, so its product ``x @ weight.T`` reads ``b``
transposed: layout "nt" (B stored N x K), which the table serves with kernels of its own.
:class:`Linear` keeps that weight as it is (state dicts, optimizers and ``load_state_dict`` see an
ordinary ``nn.Linear``) and asks the table, per layer, from how many rows of input an nt kernel beats
PyTorch's matmul with the operator's host time counted (:func:`kernel_rows`); from there it calls
:func:`autotune.torch.gemm` with ``weight.T`` (a view: nothing is copied), below it (and where no kernel
ever does, or off the GPU) ``F.linear`` itself.

A model whose calls are captured in CUDA graphs (``torch.compile(..., mode="reduce-overhead")``,
``torch.cuda.graph``) pays the operator's host time once, at capture: ``use_autotune(model, cuda_graphs=True)``
has its layers pick by the kernels' times alone.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from autotune.torch.ops import device_runtime, gemm, host_cost

__all__ = ["Linear", "use_autotune"]


class Linear(nn.Linear):
    """A drop-in ``nn.Linear`` (same arguments, parameters and state dict) whose product runs
    :func:`autotune.torch.gemm` where a tuned kernel serves it; ``cuda_graphs=True`` for a layer whose calls
    replay in CUDA graphs (no host time per call counted)."""

    cuda_graphs = False

    def __init__(self, *args, cuda_graphs: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.cuda_graphs = cuda_graphs

    @classmethod
    def from_linear(cls, linear: nn.Linear, cuda_graphs: bool = False) -> "Linear":
        """``linear`` turned into a :class:`Linear` in place: the same parameter objects (an optimizer that
        holds them goes on working)."""
        linear.__class__ = cls
        linear.cuda_graphs = cuda_graphs
        return linear

    def forward(self, x: Tensor) -> Tensor:
        weight_t = self.weight.t()
        rows = kernel_rows(self.weight.dtype, self.weight.device, self.out_features, self.in_features,
                           weight_t.is_contiguous(), self.cuda_graphs)
        if rows is None or x.numel() < rows * self.in_features:  # under torch.compile: a guard on the rows
            return nn.functional.linear(x, self.weight, self.bias)  # no detour through the operator
        return gemm(x, weight_t, self.bias, 1.0, 1.0, self.cuda_graphs)


@torch.compiler.assume_constant_result  # one answer per layer while a compiled graph lives
def kernel_rows(dtype: torch.dtype, device: torch.device, out_features: int, in_features: int,
                row_major: bool, cuda_graphs: bool = False) -> int | None:
    """From how many rows of its input a layer's ``x @ weight.T`` (``weight.T`` row-major or not) may run a
    tuned kernel, the operator's host time counted (:data:`~autotune.torch.ops.OPERATOR_HOST`) unless the calls
    replay in ``cuda_graphs``; None where it never does."""
    if device.type != "cuda":
        return None
    runtime = device_runtime(device)
    if runtime is None:
        return None
    return runtime.kernel_rows(dtype, out_features, in_features, host_cost(cuda_graphs), row_major)


def use_autotune(module: nn.Module, cuda_graphs: bool = False) -> nn.Module:
    """Every ``nn.Linear`` in ``module`` (itself included) turned into a :class:`Linear`, in place; returns
    ``module``. The parameters stay the same objects, with the same values and layout. ``cuda_graphs=True``
    where the module's calls are captured in CUDA graphs and replayed (``torch.compile(...,
    mode="reduce-overhead")``): its layers then pick by the kernels' times alone."""
    for layer in module.modules():
        if type(layer) is nn.Linear:
            Linear.from_linear(layer, cuda_graphs)
    return module
