"""What runs a decided call: a CUDA GPU through CuPy, or the host (NumPy) for tests.

:class:`CupyDevice` loads each tuned kernel once (the cubin its table comes with,
or one compiled through NVRTC into the disk cache, also where the driver refuses
the table's: :func:`load_table_kernel`), raises its shared-memory limit,
encodes its TMA tensor maps for the call's operands (again only when they
change) and launches it on the current stream; cuBLAS runs the fallbacks.
:class:`HostDevice` computes every call with NumPy and records what a GPU
would have launched, so the runtime's dispatch can be tested with no GPU.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import numpy

from autotune.errors import AutotuneError
from autotune.export.compile import compile_table_kernel
from autotune.gpu.launch import KernelLaunch, WorkspacePool, load_kernel
from autotune.runtime.operands import Operand, as_cupy, describe, is_torch, refuse_unscaled, torch_operand
from autotune.select.kernel_table import TableError, TableKernel


class CupyDevice:
    """One CUDA device, driven through CuPy in the calling process."""

    array_type: type | None = None  # cupy.ndarray: the arrays of CuPy routes (autotune.runtime.routes)

    def __init__(self, index: int):
        import cupy

        self.cupy = cupy
        self.array_type = cupy.ndarray
        self.index = index
        props = cupy.cuda.runtime.getDeviceProperties(index)
        name = props["name"]
        self.name = name.decode() if isinstance(name, bytes) else str(name)
        self.arch = f"sm_{props['major']}{props['minor']}"
        self._functions: dict[str, Any] = {}  # kernel name -> loaded function
        self._launches: dict[tuple, KernelLaunch] = {}  # (kernel name, m, n, k) -> prepared launch
        self._streams: dict[int, Any] = {}
        self._workspaces = WorkspacePool(cupy)  # one per stream, shared by the kernels that take a workspace

    # -- operands ----------------------------------------------------------------------

    def operand(self, value: Any, what: str) -> Operand:
        if is_torch(value):
            return torch_operand(value, what)
        array = as_cupy(value, what)
        return describe(array, array.data.device_id, array.data.ptr)

    def empty(self, m: int, n: int, like: Operand, original: Any) -> tuple[Any, Any]:
        """``(what the caller gets, what the device computes on)``: a torch tensor for torch inputs, else a
        CuPy array."""
        if is_torch(original):
            import torch

            tensor = torch.empty((m, n), dtype=original.dtype, device=original.device)
            return tensor, tensor
        with self.cupy.cuda.Device(like.device):
            array = self.cupy.empty((m, n), dtype=like.array.dtype)
        return array, array

    def stream(self, original: Any):
        """The stream to launch on: PyTorch's current stream for torch tensors, else CuPy's."""
        if is_torch(original):
            pointer = self.torch_stream(original.device)
            stream = self._streams.get(pointer)
            if stream is None:
                stream = self._streams[pointer] = self.cupy.cuda.ExternalStream(pointer, self.index)
            return stream
        return self.cupy.cuda.get_current_stream()

    # -- launches ----------------------------------------------------------------------

    def launch(self, kernel: TableKernel, arch: str, a: Operand, b: Operand, c: Operand,
               alpha: float, beta: float, stream) -> None:
        """Launch a tuned kernel (loading it first if needed) on ``stream``."""
        m, k = a.shape
        self.launch_pointers(kernel, arch, (m, b.shape[1], k), stream.ptr, a.pointer, b.pointer, c.pointer,
                             a.itemsize, alpha, beta)

    def launch_pointers(self, kernel: TableKernel, arch: str, shape: tuple[int, int, int], stream_ptr: int,
                        a: int, b: int, c: int, itemsize: int, alpha: float, beta: float) -> None:
        """Launch a tuned kernel on ``m x n x k`` operands at device addresses ``a``, ``b``, ``c``."""
        launch = self._launches.get((kernel.name, *shape)) or self._prepare(kernel, arch, *shape)
        if self.cupy.cuda.runtime.getDevice() != self.index:
            with self.cupy.cuda.Device(self.index):
                launch(stream_ptr, a, b, c, itemsize, alpha, beta)
            return
        launch(stream_ptr, a, b, c, itemsize, alpha, beta)

    def torch_stream(self, device) -> int:
        """The handle of PyTorch's current stream on ``device``."""
        import torch

        return torch.cuda.current_stream(device).cuda_stream

    def warm(self, kernel: TableKernel, arch: str) -> None:
        """Load ``kernel`` now (compiling it if its table has no cubin), so that no call waits for it."""
        if kernel.name not in self._functions:
            self._load(kernel, arch)

    def cublas(self, a: Operand, b: Operand, c: Operand, alpha: float, beta: float, stream) -> None:
        """``c = alpha * a @ b + beta * c`` by cuBLAS, or by CuPy where cuBLAS cannot take the operands."""
        if self.cupy.cuda.runtime.getDevice() == self.index and stream.ptr == self.cupy.cuda.get_current_stream().ptr:
            self._cublas(a, b, c, alpha, beta)
            return
        with self.cupy.cuda.Device(self.index), stream:
            self._cublas(a, b, c, alpha, beta)

    def _cublas(self, a: Operand, b: Operand, c: Operand, alpha: float, beta: float) -> None:
        if all(is_torch(operand.array) for operand in (a, b, c)):
            _torch_gemm(a, b, c, alpha, beta)
            return
        a, b, c = (self._as_cupy(operand) for operand in (a, b, c))
        if alpha == 1 and beta == 0:
            self.cupy.matmul(a.array, b.array, out=c.array)
            return
        if a.dtype is not None and a.element == b.element == c.element and a.row_major and b.row_major and c.row_major:
            from autotune.gpu.measure import CublasGemm

            CublasGemm(a.array, b.array, c.array, alpha, beta)()
            return
        product = self.cupy.matmul(a.array, b.array)
        if beta == 0:
            c.array[...] = alpha * product
        else:
            c.array[...] = alpha * product + beta * c.array

    def _as_cupy(self, operand: Operand) -> Operand:
        """A torch operand as a CuPy view (a call mixing torch tensors with other arrays); others as they are."""
        if not is_torch(operand.array):
            return operand
        refuse_unscaled(operand.dtype_name)
        return operand._replace(array=self.cupy.asarray(operand.array.detach()))

    def _prepare(self, kernel: TableKernel, arch: str, m: int, n: int, k: int) -> KernelLaunch:
        """The kernel loaded (once per kernel) and its launch on ``m x n x k`` prepared (once per size)."""
        function = self._functions.get(kernel.name) or self._load(kernel, arch)
        launch = KernelLaunch(self.cupy, function, kernel.launch.grid_for(m, n, k), kernel.launch.block,
                              kernel.launch.dynamic_smem, (m, n, k), kernel.launch.tensor_maps, kernel.layout == "nt",
                              kernel.launch.workspace, self._workspaces)
        self._launches[(kernel.name, m, n, k)] = launch
        return launch

    def _load(self, kernel: TableKernel, arch: str):
        def load(cubin: bytes):
            with self.cupy.cuda.Device(self.index):
                return load_kernel(self.cupy, cubin, kernel.launch.entry, kernel.launch.dynamic_smem,
                                   kernel.launch.opt_in)

        function = load_table_kernel(kernel, arch, load, self.cupy.cuda.driver.CUDADriverError)
        self._functions[kernel.name] = function
        return function


def load_table_kernel(kernel: TableKernel, arch: str, load: Callable[[bytes], Any],
                      refused: type[Exception] | tuple[type[Exception], ...]) -> Any:
    """``kernel`` loaded by ``load(cubin)``: from the cubin it comes with (a prebuilt or exported table's), else
    from one compiled by the installed NVRTC (or read from the disk cache). Where the driver refuses the cubin
    it comes with (``refused``: one built by an NVRTC newer than the driver, say), the kernel is compiled by
    the installed NVRTC and that one loaded, with a warning; a cubin it refuses too raises its error, and a
    kernel this autotune cannot build again (another template) a TableError naming both."""
    if kernel.cubin is None:
        return load(compile_table_kernel(kernel, arch).cubin)
    try:
        return load(kernel.cubin)
    except refused as error:
        try:
            rebuilt = compile_table_kernel(dataclasses.replace(kernel, cubin=None), arch).cubin
        except AutotuneError as failed:
            raise TableError(f"the CUDA driver refused the table's cubin of {kernel.name} ({error}), and this "
                             f"autotune cannot build it again: {failed}") from None
        if rebuilt == kernel.cubin:
            raise  # the installed NVRTC builds the very cubin the driver refused
        warnings.warn(f"autotune: the CUDA driver refused the table's cubin of {kernel.name} ({error}); "
                      "using one compiled by the installed NVRTC", RuntimeWarning, stacklevel=2)
        return load(rebuilt)


def _torch_gemm(a: Operand, b: Operand, c: Operand, alpha: float, beta: float) -> None:
    """``c = alpha * a @ b + beta * c`` by PyTorch (cuBLAS underneath) on its current stream; beta 0 ignores c."""
    import torch

    refuse_unscaled(a.dtype_name)
    with torch.no_grad():
        c.array.addmm_(a.array, b.array, beta=beta, alpha=alpha)


class HostDevice:
    """A stand-in GPU on the host: NumPy computes each call; ``calls`` records what would have run."""

    array_type = None  # no routes: every call takes the full path

    def __init__(self, name: str = "NVIDIA H200", arch: str = "sm_90", index: int = 0):
        self.name, self.arch, self.index = name, arch, index
        self.calls: list[tuple] = []  # ("kernel", name, grid) or ("cublas",)

    def operand(self, value: Any, what: str) -> Operand:
        from autotune.errors import InputError

        if not isinstance(value, numpy.ndarray):
            raise InputError(what, type(value).__name__, "a NumPy array (the host device)")
        return describe(value, self.index, value.ctypes.data)

    def empty(self, m: int, n: int, like: Operand, original: Any) -> tuple[Any, Any]:
        array = numpy.empty((m, n), dtype=like.array.dtype)
        return array, array

    def stream(self, original: Any) -> None:
        return None

    def warm(self, kernel: TableKernel, arch: str) -> None:
        self.calls.append(("warm", kernel.name))

    def launch(self, kernel: TableKernel, arch: str, a: Operand, b: Operand, c: Operand,
               alpha: float, beta: float, stream) -> None:
        m, k = a.shape
        self.calls.append(("kernel", kernel.name, kernel.launch.grid_for(m, b.shape[1], k)))
        _host_gemm(a, b, c, alpha, beta)

    def cublas(self, a: Operand, b: Operand, c: Operand, alpha: float, beta: float, stream) -> None:
        self.calls.append(("cublas",))
        _host_gemm(a, b, c, alpha, beta)


def _host_gemm(a: Operand, b: Operand, c: Operand, alpha: float, beta: float) -> None:
    product = a.array.astype(numpy.float32) @ b.array.astype(numpy.float32)
    result = alpha * product if beta == 0 else alpha * product + beta * c.array.astype(numpy.float32)
    c.array[...] = result.astype(c.array.dtype)
