"""What runs a decided call: a CUDA GPU through CuPy, or the host (NumPy) for tests.

:class:`CupyDevice` loads each tuned kernel once (its exported cubin, or one
compiled through NVRTC into the disk cache), raises its shared-memory limit,
encodes its TMA tensor maps for the call's operands (again only when they
change) and launches it on the current stream; cuBLAS runs the fallbacks.
:class:`HostDevice` computes every call with NumPy and records what a GPU
would have launched, so the runtime's dispatch can be tested with no GPU.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy

from autotune.export.table import TableKernel, compile_table_kernel
from autotune.runtime.operands import Operand, as_cupy, describe, is_torch

SMEM_DEFAULT_LIMIT = 48 * 1024


@dataclasses.dataclass
class _Loaded:
    """A kernel ready to launch: its function, grid rule and current tensor maps."""

    function: Any
    grid: Any  # (m, n, k) -> (x, y, z)
    block: tuple[int, int, int]
    shared_mem: int
    kernel: TableKernel
    maps: tuple = ()
    mapped: tuple | None = None  # (a, b, c pointers, m, n, k) the maps describe


class CupyDevice:
    """One CUDA device, driven through CuPy in the calling process."""

    def __init__(self, index: int):
        import cupy

        self.cupy = cupy
        self.index = index
        props = cupy.cuda.runtime.getDeviceProperties(index)
        name = props["name"]
        self.name = name.decode() if isinstance(name, bytes) else str(name)
        self.arch = f"sm_{props['major']}{props['minor']}"
        self._loaded: dict[str, _Loaded] = {}
        self._streams: dict[int, Any] = {}

    # -- operands ----------------------------------------------------------------------

    def operand(self, value: Any, what: str) -> Operand:
        array = as_cupy(value, what)
        return describe(array, array.data.device_id, array.data.ptr)

    def empty(self, m: int, n: int, like: Operand, original: Any) -> tuple[Any, Any]:
        """``(what the caller gets, its CuPy view)``: a torch tensor for torch inputs, else a CuPy array."""
        if is_torch(original):
            import torch

            tensor = torch.empty((m, n), dtype=original.dtype, device=original.device)
            return tensor, self.cupy.asarray(tensor)
        with self.cupy.cuda.Device(like.device):
            array = self.cupy.empty((m, n), dtype=like.array.dtype)
        return array, array

    def stream(self, original: Any):
        """The stream to launch on: PyTorch's current stream for torch tensors, else CuPy's."""
        if is_torch(original):
            import torch

            pointer = torch.cuda.current_stream(original.device).cuda_stream
            stream = self._streams.get(pointer)
            if stream is None:
                stream = self._streams[pointer] = self.cupy.cuda.ExternalStream(pointer, self.index)
            return stream
        return self.cupy.cuda.get_current_stream()

    # -- launches ----------------------------------------------------------------------

    def launch(self, kernel: TableKernel, arch: str, a: Operand, b: Operand, c: Operand,
               alpha: float, beta: float, stream) -> None:
        """Launch a tuned kernel (loading it first if needed) on ``stream``."""
        loaded = self._loaded.get(kernel.name) or self._load(kernel, arch)
        m, k = a.shape
        n = b.shape[1]
        if kernel.launch.tensor_maps:
            key = (a.pointer, b.pointer, c.pointer, m, n, k)
            if key != loaded.mapped:
                loaded.maps = self._encode_maps(kernel, a, b, c, m, n, k)
                loaded.mapped = key
        args = (a.array, b.array, c.array, numpy.int32(m), numpy.int32(n), numpy.int32(k),
                numpy.float32(alpha), numpy.float32(beta), *loaded.maps)
        with self.cupy.cuda.Device(self.index):
            loaded.function(loaded.grid(m, n, k), loaded.block, args, shared_mem=loaded.shared_mem, stream=stream)

    def cublas(self, a: Operand, b: Operand, c: Operand, alpha: float, beta: float, stream) -> None:
        """``c = alpha * a @ b + beta * c`` by cuBLAS, or by CuPy where cuBLAS cannot take the operands."""
        from autotune.measure import CublasGemm

        with self.cupy.cuda.Device(self.index), stream:
            plain = a.dtype is not None and a.dtype_name == b.dtype_name == c.dtype_name
            if plain and a.row_major and b.row_major and c.row_major:
                CublasGemm(a.array, b.array, c.array, alpha, beta)()
                return
            product = self.cupy.matmul(a.array, b.array)
            if beta == 0:
                c.array[...] = alpha * product
            else:
                c.array[...] = alpha * product + beta * c.array

    def _load(self, kernel: TableKernel, arch: str) -> _Loaded:
        compiled = compile_table_kernel(kernel, arch)
        with self.cupy.cuda.Device(self.index):
            module = self.cupy.cuda.function.Module()
            module.load(compiled.cubin)
            function = module.get_function(kernel.launch.entry)  # keeps the module loaded
            shared = kernel.launch.dynamic_smem
            if kernel.launch.opt_in and shared > SMEM_DEFAULT_LIMIT:
                driver = self.cupy.cuda.driver
                driver.funcSetAttribute(function.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared)
        loaded = _Loaded(function, kernel.launch.grid_function(), kernel.launch.block, shared, compiled)
        self._loaded[kernel.name] = loaded
        return loaded

    @staticmethod
    def _encode_maps(kernel: TableKernel, a: Operand, b: Operand, c: Operand, m: int, n: int, k: int) -> tuple:
        from autotune.tensor_map import TENSOR_MAP_BYTES, encode, fits_tma
        from autotune.worker import TENSOR_MAP_DTYPE

        operands = {"A": a, "B": b, "C": c}
        maps = []
        for spec in kernel.launch.tensor_maps:
            operand = operands[spec.operand]
            rows, columns = spec.shape(m, n, k)
            itemsize = operand.array.itemsize
            encoded = (encode(spec, operand.pointer, rows, columns, itemsize)
                       if fits_tma(operand.pointer, columns, itemsize) else bytes(TENSOR_MAP_BYTES))
            maps.append(numpy.frombuffer(encoded, dtype=TENSOR_MAP_DTYPE).copy())
        return tuple(maps)


class HostDevice:
    """A stand-in GPU on the host: NumPy computes each call; ``calls`` records what would have run."""

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
