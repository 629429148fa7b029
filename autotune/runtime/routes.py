"""A repeated call's way to what it runs, kept per layout of its operands.

:meth:`Runtime.gemm <autotune.runtime.Runtime.gemm>` describes and checks every operand of a call and asks the
table. A later call whose operands have the same layout (:func:`layout_key`: the arrays' kind, shapes, strides,
dtypes, devices and alignment, and ``out``'s) takes the :class:`Route` kept for it instead: only the checks that
depend on the call's own memory (autograd, ``out`` overlapping an input, the current device), then the tuned
kernel's launch or cuBLAS. Routes are made for 2-D CuPy arrays and PyTorch tensors, each stored row-major (``b``
also column-major: ``W.T``); other calls take the full path every time.
"""

from __future__ import annotations

from typing import Any

from autotune.runtime.dispatch import ALIGNMENT, Decision
from autotune.runtime.operands import Operand, is_torch, refuse_autograd


def layout_key(a: Any, b: Any, out: Any, cupy_array: type | None, beta: float = 0.0) -> tuple | None:
    """What a call's route is kept under: the layout of two CuPy arrays (``cupy_array``, the device's array
    type) or two PyTorch tensors, and ``out``'s (None: a new array), and whether beta is 0 (a kernel that reads
    C slowly gives way to cuBLAS where it is not); None for any other operands."""
    kind = type(a)
    if kind is cupy_array:
        if type(b) is not kind or (out is not None and type(out) is not kind):
            return None
        return ("cupy", beta != 0, a.shape, b.shape, a.strides, b.strides, a.dtype, b.dtype, a.data.ptr % ALIGNMENT,
                b.data.ptr % ALIGNMENT, a.data.device_id, b.data.device_id,
                None if out is None else (out.shape, out.strides, out.dtype, out.data.ptr % ALIGNMENT,
                                          out.data.device_id))
    if is_torch(a) and is_torch(b) and (out is None or is_torch(out)) and hasattr(a, "data_ptr"):
        return ("torch", beta != 0, a.shape, b.shape, a.stride(), b.stride(), a.dtype, b.dtype, a.device, b.device,
                a.data_ptr() % ALIGNMENT, b.data_ptr() % ALIGNMENT,
                None if out is None else (out.shape, out.stride(), out.dtype, out.device, out.data_ptr() % ALIGNMENT))
    return None


class Route:
    """One layout's call, minus the work that its first call did: ``route(a, b, out, alpha, beta)`` returns
    ``out`` (or the new result), or None where this call needs the full path (its ``out`` overlaps an input,
    another device is current): the full path then runs it, or says what is wrong."""

    def __init__(self, a: Operand, decision: Decision):
        m, n, k = self.shape = decision.shape
        self.itemsize = a.itemsize
        self._bytes = tuple(size * self.itemsize for size in (m * k, k * n, m * n))  # each operand one dense block

    def overlapping(self, a: int, b: int, out: int) -> bool:
        """Whether ``out``'s block overlaps ``a``'s or ``b``'s (device addresses)."""
        a_bytes, b_bytes, out_bytes = self._bytes
        return (a < out + out_bytes and out < a + a_bytes) or (b < out + out_bytes and out < b + b_bytes)


class TorchKernel(Route):
    """PyTorch tensors to a tuned kernel, launched on PyTorch's current stream."""

    def __init__(self, device, arch: str, a: Operand, decision: Decision):
        super().__init__(a, decision)
        self.device, self.arch, self.kernel = device, arch, decision.kernel

    def __call__(self, a: Any, b: Any, out: Any, alpha: float, beta: float) -> Any:
        refuse_autograd(a, b)
        if out is None:
            out = a.new_empty((self.shape[0], self.shape[1]))
        elif self.overlapping(a.data_ptr(), b.data_ptr(), out.data_ptr()):
            return None
        self.device.launch_pointers(self.kernel, self.arch, self.shape, self.device.torch_stream(a.device),
                                    a.data_ptr(), b.data_ptr(), out.data_ptr(), self.itemsize, alpha, beta)
        return out


class TorchMatmul(Route):
    """PyTorch tensors the table leaves to cuBLAS: PyTorch's own matmul (alpha and beta inside the GEMM)."""

    def __call__(self, a: Any, b: Any, out: Any, alpha: float, beta: float) -> Any:
        refuse_autograd(a, b)
        if out is None:
            return a.mm(b) if alpha == 1.0 else a.new_empty((self.shape[0], self.shape[1])).addmm_(
                a, b, beta=0.0, alpha=alpha)
        if self.overlapping(a.data_ptr(), b.data_ptr(), out.data_ptr()):
            return None
        if not out.requires_grad:  # a and b record nothing either (refuse_autograd)
            return out.addmm_(a, b, beta=beta, alpha=alpha)
        import torch

        with torch.no_grad():
            out.addmm_(a, b, beta=beta, alpha=alpha)
        return out


class _CupyRoute(Route):
    """CuPy arrays on the device that is current (where CuPy allocates and cuBLAS runs)."""

    def __init__(self, device, a: Operand, decision: Decision):
        super().__init__(a, decision)
        self.device, self.dtype = device, a.element

    def target(self, a: Any, b: Any, out: Any) -> Any:
        """``out``, or a new array where it is None; None where this call needs the full path."""
        cupy = self.device.cupy
        if cupy.cuda.runtime.getDevice() != self.device.index:
            return None
        if out is None:
            return cupy.empty((self.shape[0], self.shape[1]), dtype=self.dtype)
        return None if self.overlapping(a.data.ptr, b.data.ptr, out.data.ptr) else out


class CupyKernel(_CupyRoute):
    """CuPy arrays to a tuned kernel, launched on CuPy's current stream."""

    def __init__(self, device, arch: str, a: Operand, decision: Decision):
        super().__init__(device, a, decision)
        self.arch, self.kernel = arch, decision.kernel

    def __call__(self, a: Any, b: Any, out: Any, alpha: float, beta: float) -> Any:
        out = self.target(a, b, out)
        if out is not None:
            self.device.launch_pointers(self.kernel, self.arch, self.shape,
                                        self.device.cupy.cuda.get_current_stream().ptr, a.data.ptr, b.data.ptr,
                                        out.data.ptr, self.itemsize, alpha, beta)
        return out


class CupyCublas(_CupyRoute):
    """CuPy arrays (float32 or float16) the table leaves to cuBLAS: one prepared ``gemmEx`` call (fp32
    compute), as the table's cuBLAS times were measured."""

    def __init__(self, device, a: Operand, b: Operand, decision: Decision):
        super().__init__(device, a, decision)
        from autotune.gpu.measure import CUDA_TYPES, CublasCall

        m, n, k = decision.shape
        self.call = CublasCall(m, n, k, CUDA_TYPES[a.element], transpose_b=not b.row_major)

    def __call__(self, a: Any, b: Any, out: Any, alpha: float, beta: float) -> Any:
        out = self.target(a, b, out)
        if out is not None:
            self.call(a.data.ptr, b.data.ptr, out.data.ptr, alpha, beta)
        return out


def route_for(device, arch: str | None, a: Operand, b: Operand, c: Operand, decision: Decision) -> Route | None:
    """The route of later calls like this one (its matrices ``a``, ``b``, ``c`` as described for the decision),
    or None where they take the full path: operands not stored as one dense block (row-major; ``b``
    column-major too), on several devices, or cuBLAS calls of a dtype the prepared call does not take."""
    dense = a.row_major and (b.row_major or b.column_major) and c.row_major
    if not dense or not a.device == b.device == c.device:
        return None
    if is_torch(a.array):
        return TorchMatmul(a, decision) if decision.kernel is None else TorchKernel(device, arch, a, decision)
    if decision.kernel is not None:
        return CupyKernel(device, arch, a, decision)
    from autotune.gpu.measure import CUDA_TYPES

    if a.element == b.element == c.element and a.element in CUDA_TYPES:
        return CupyCublas(device, a, b, decision)
    return None
