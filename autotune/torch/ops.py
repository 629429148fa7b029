"""The ``autotune::gemm`` operator: ``alpha * a @ b + beta * c`` for PyTorch tensors.

Registered with ``torch.library.custom_op``, with a fake implementation (shapes only, for
``torch.compile`` and meta tensors) and an autograd formula (whose products run on PyTorch's
matmul). A CUDA call goes to :mod:`autotune.runtime`, which launches the table's tuned kernel
or runs PyTorch's matmul; other devices run PyTorch's matmul.
"""

from __future__ import annotations

import warnings
from typing import Optional

import torch
from torch import Tensor

from autotune.errors import InputError
from autotune.runtime.dispatch import Decision, HostCost
from autotune.runtime.operands import refuse_unscaled

__all__ = ["gemm", "explain"]


def gemm(a: Tensor, b: Tensor, c: Optional[Tensor] = None, alpha: float = 1.0, beta: float = 0.0,
         cuda_graphs: bool = False) -> Tensor:
    """``alpha * a @ b + beta * c``, a new tensor of shape ``(*a.shape[:-1], b.shape[1])``.

    ``a`` is ``... x k``, ``b`` is ``k x n``; ``c`` (optional) broadcasts to the result like
    ``torch.addmm``'s ``input``. Without ``c``, beta is not used.

    ``cuda_graphs=True`` says the call is captured in a CUDA graph and replayed (``torch.compile(...,
    mode="reduce-overhead")``, ``torch.cuda.graph``): a replay pays no host time per call, so the table picks by
    the kernels' times alone (otherwise the operator's host time counts, :data:`OPERATOR_HOST`).

    Raises:
        InputError: the shapes do not chain, the dtypes differ, or the dtype is fp8 (which needs scales).
    """
    return torch.ops.autotune.gemm(a, b, c, float(alpha), float(beta), bool(cuda_graphs))


def explain(a: Tensor, b: Tensor, cuda_graphs: bool = False) -> Decision:
    """What :func:`gemm` runs for ``a @ b`` (with the same ``cuda_graphs``) and why: a tuned kernel, or
    PyTorch's matmul (the table picks cuBLAS, no kernel is faster once the operator's host time counts, or the
    tensors are not on a GPU)."""
    rows, n = _check(a, b, None)
    shape = (rows.shape[0], n, rows.shape[1])
    runtime = device_runtime(rows.device) if rows.is_cuda else None
    if runtime is None:
        where = "CuPy, which loads the kernels, is not installed" if rows.is_cuda else f"the tensors are on {a.device}"
        return Decision(_name(a.dtype), shape, None, None, f"{where}: PyTorch's matmul runs it", "no table")
    return runtime.tensor_decision(rows.detach(), b.detach(), host_cost(cuda_graphs))


@torch.library.custom_op("autotune::gemm", mutates_args=())
def _gemm(a: Tensor, b: Tensor, c: Optional[Tensor], alpha: float, beta: float, cuda_graphs: bool = False) -> Tensor:
    rows, n = _check(a, b, c)
    out = rows.new_empty((rows.shape[0], n))
    if c is None:
        beta = 0.0
    else:
        out.copy_(c.expand(*a.shape[:-1], n).reshape(-1, n))
    if rows.is_cuda and out.numel() and rows.shape[1]:
        _on_gpu(rows, b, out, alpha, beta, host_cost(cuda_graphs))
    else:
        out.addmm_(rows, b, beta=beta, alpha=alpha)
    return out.reshape(*a.shape[:-1], n)


@_gemm.register_fake
def _(a: Tensor, b: Tensor, c: Optional[Tensor], alpha: float, beta: float, cuda_graphs: bool = False) -> Tensor:
    _, n = _check(a, b, c)
    return a.new_empty((*a.shape[:-1], n))


def _setup_context(ctx, inputs, output) -> None:
    a, b, c, alpha, beta, _ = inputs
    ctx.save_for_backward(a, b)
    ctx.alpha, ctx.beta, ctx.c_shape = alpha, beta, None if c is None else c.shape


def _backward(ctx, grad: Tensor):
    a, b = ctx.saved_tensors
    k, n = b.shape
    rows = grad.reshape(-1, n)
    grad_a = grad_b = grad_c = None
    if ctx.needs_input_grad[0]:
        grad_a = (rows @ b.t()).mul_(ctx.alpha).reshape(a.shape)
    if ctx.needs_input_grad[1]:
        grad_b = (a.reshape(-1, k).t() @ rows).mul_(ctx.alpha)
    if ctx.c_shape is not None and ctx.needs_input_grad[2]:
        grad_c = (grad * ctx.beta).sum_to_size(ctx.c_shape)
    return grad_a, grad_b, grad_c, None, None, None


_gemm.register_autograd(_backward, setup_context=_setup_context)


def _check(a: Tensor, b: Tensor, c: Optional[Tensor]) -> tuple[Tensor, int]:
    """``a`` as one matrix of its rows, and n; InputError where no GEMM library would take the operands."""
    if a.dim() < 2 or b.dim() != 2:
        raise InputError("a.shape, b.shape", f"{tuple(a.shape)}, {tuple(b.shape)}",
                         "a of two or more dimensions (... x k) and b of two (k x n)")
    k, n = b.shape
    if a.shape[-1] != k:
        raise InputError("b.shape", tuple(b.shape), f"{a.shape[-1]} rows to match a's last dimension "
                         f"(a is {tuple(a.shape)})")
    for name, tensor in (("b", b), ("c", c)):
        if tensor is not None and tensor.dtype != a.dtype:
            raise InputError(f"{name}.dtype", _name(tensor.dtype), f"{_name(a.dtype)}, a's dtype")
        if tensor is not None and tensor.device != a.device:
            raise InputError(f"{name}.device", str(tensor.device), f"{a.device}, a's device")
    refuse_unscaled(_name(a.dtype))
    if c is not None:
        try:
            torch.broadcast_shapes(c.shape, (*a.shape[:-1], n))
        except RuntimeError:
            raise InputError("c.shape", tuple(c.shape), f"a shape that broadcasts to {(*a.shape[:-1], n)}") from None
    return a.reshape(-1, k), n


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# The host's time per call through the operator (to a tuned kernel or cuBLAS) and through PyTorch's own matmul:
# medians of 64 us (35-90) and 26 us (15-33) over 20 LLM projections on the H200's host
# (bench/results/h200-operator-2026-12-03/op_profile.log). A tuned kernel runs where it is predicted faster
# with these counted (autotune.runtime.dispatch.net_of_host_cost).
OPERATOR_HOST = HostCost(kernel_ms=0.064, cublas_ms=0.026, caller="autotune.torch's operator")


def host_cost(cuda_graphs: bool) -> HostCost | None:
    """The host's time per call a pick counts: the operator's, or none where calls replay in CUDA graphs."""
    return None if cuda_graphs else OPERATOR_HOST

_without_cupy: list[str] = []  # why the runtime cannot load kernels here (CuPy missing), once known


def _on_gpu(rows: Tensor, b: Tensor, out: Tensor, alpha: float, beta: float, host: HostCost | None) -> None:
    """``out = alpha * rows @ b + beta * out`` by the runtime of the tensors' device (a tuned kernel, or
    PyTorch's matmul, ``host`` time per call counted); PyTorch's matmul alone where CuPy, which loads the
    kernels, is not installed (with a warning, once)."""
    runtime = device_runtime(rows.device)
    if runtime is None:
        out.addmm_(rows, b, beta=beta, alpha=alpha)
    else:
        runtime.gemm_tensors(rows.detach(), b.detach(), out, alpha, beta, host)


def device_runtime(device: torch.device):
    """The process's runtime of a CUDA device (:func:`autotune.load` replaces it), or None where CuPy, which
    loads the kernels, is not installed (with a warning, once)."""
    if _without_cupy:
        return None
    try:
        from autotune.runtime import runtime_for

        return runtime_for(device.index)
    except ImportError as error:
        _without_cupy.append(str(error))
        warnings.warn(f"autotune: no tuned kernels without CuPy ({error}); autotune.torch runs PyTorch's "
                      "matmul. pip install 'autotune[cuda13]' (or [cuda12]) installs it", RuntimeWarning, stacklevel=4)
        return None
