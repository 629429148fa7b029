"""Launching a compiled GEMM kernel: the one launcher that the GPU worker and the runtime share.

:func:`load_kernel` loads a kernel from its cubin on the current device and raises its dynamic
shared-memory limit where it needs more than the default 48 KB; :class:`KernelLaunch` launches it on one
problem size through ``cuLaunchKernel``, with the arguments of the kernel ABI (:mod:`autotune.kernel_abi`):
the GEMM arguments, the kernel's workspace if it takes one (from a :class:`WorkspacePool`), then its tensor
maps encoded for the operands of the launch.

CuPy is passed in (the module, or a stand-in with the same names): importing this module imports no CUDA.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy

from autotune.kernel_abi import TENSOR_MAP_BYTES, TensorMapSpec, argument

SMEM_DEFAULT_LIMIT = 48 * 1024  # above this a kernel must opt in to dynamic shared memory
_MAP_ALIGNMENT = 64  # CUtensorMap is 64-byte aligned


def load_kernel(cupy, cubin: bytes, entry: str, dynamic_smem: int, opt_in: bool = True):
    """The kernel ``entry`` of ``cubin``, loaded on the current device (the function keeps its module loaded).

    With ``opt_in``, a kernel launched with more than SMEM_DEFAULT_LIMIT bytes of dynamic shared memory is
    allowed ``dynamic_smem`` bytes. Raises CuPy's CUDADriverError where the driver refuses.
    """
    module = cupy.cuda.function.Module()
    module.load(cubin)
    function = module.get_function(entry)
    if opt_in and dynamic_smem > SMEM_DEFAULT_LIMIT:
        driver = cupy.cuda.driver
        driver.funcSetAttribute(function.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, dynamic_smem)
    return function


class WorkspacePool:
    """Workspaces for kernels that take one: zeroed device memory, one buffer per (device, stream).

    Kernels launched on one stream run one after the other, and each leaves its workspace zeroed
    (:mod:`autotune.kernel_abi`), so every kernel launched on a stream shares that stream's buffer; a
    kernel that needs more than it holds gets a larger one (the smaller one is kept: launches still
    queued, and launches that took its address before, use it). A buffer is device memory of its own
    (``cudaMalloc``, not CuPy's pool, so no other allocation reuses it while a launch may; freeing it
    waits for the device), zeroed on its stream in order with the launches; the current stream is left
    as it is.
    """

    def __init__(self, cupy):
        self._cupy = cupy
        self._buffers: dict[tuple[int, int], Any] = {}
        self._kept: list[Any] = []
        self._lock = threading.Lock()

    def address(self, stream_ptr: int, nbytes: int) -> int:
        """The device address of at least ``nbytes`` of zeroed workspace for launches on ``stream_ptr``
        (on the current device)."""
        key = (self._cupy.cuda.runtime.getDevice(), stream_ptr)
        buffer = self._buffers.get(key)
        if buffer is None or buffer.size < nbytes:
            with self._lock:
                buffer = self._buffers.get(key)
                if buffer is None or buffer.size < nbytes:
                    if buffer is not None:
                        self._kept.append(buffer)
                    buffer = self._cupy.cuda.memory.Memory(nbytes)
                    self._cupy.cuda.runtime.memsetAsync(buffer.ptr, 0, nbytes, stream_ptr)
                    self._buffers[key] = buffer
        return buffer.ptr


class KernelLaunch:
    """``launch(stream_ptr, a, b, c, element_bytes, alpha, beta)``: one loaded kernel on one problem size.

    ``a``, ``b`` and ``c`` are device addresses of row-major operands of ``element_bytes`` each (B stored
    N x K where ``b_transposed``: the layout the kernel is built for, which its tensor maps describe). The
    arguments live in NumPy buffers whose addresses form the kernel-parameter array, so a launch only
    rewrites what changed (the operand addresses and their tensor maps, alpha and beta) and calls
    ``cuLaunchKernel``: no per-launch argument conversion. A tensor map is encoded for each operand TMA
    can address and is zeros for the others (the kernel then copies element-wise). A kernel that takes a
    workspace (``workspace`` bytes) gets its stream's buffer of ``workspaces`` (by default a pool of its
    own). Launches from several threads take turns.
    """

    def __init__(self, cupy, function, grid: tuple[int, int, int], block: tuple[int, int, int], dynamic_smem: int,
                 sizes: tuple[int, int, int], tensor_maps: tuple[TensorMapSpec, ...] = (), b_transposed: bool = False,
                 workspace: int = 0, workspaces: WorkspacePool | None = None):
        self.function, self.grid, self.block, self.dynamic_smem = function, grid, block, dynamic_smem
        self.sizes, self.tensor_maps, self.b_transposed = sizes, tensor_maps, b_transposed
        self.workspace = workspace
        self._workspaces = (workspaces or WorkspacePool(cupy)) if workspace else None
        self._launch_kernel = cupy.cuda.driver.launchKernel
        self._pointers = numpy.zeros(3, numpy.uint64)
        self._workspace_pointer = numpy.zeros(1, numpy.uint64)
        self._workspace_stream: int | None = None  # the stream whose buffer the pointer holds
        self._sizes = numpy.array(sizes, numpy.int32)
        self._scalars = numpy.zeros(2, numpy.float32)
        count = len(tensor_maps)
        raw = numpy.zeros(count * TENSOR_MAP_BYTES + _MAP_ALIGNMENT, numpy.uint8)
        offset = -raw.ctypes.data % _MAP_ALIGNMENT
        self._maps = raw[offset:offset + count * TENSOR_MAP_BYTES]
        addresses = [self._pointers.ctypes.data + 8 * i for i in range(3)]
        addresses += [self._sizes.ctypes.data + 4 * i for i in range(3)]
        addresses += [self._scalars.ctypes.data + 4 * i for i in range(2)]
        addresses += [self._workspace_pointer.ctypes.data] if workspace else []
        addresses += [self._maps.ctypes.data + TENSOR_MAP_BYTES * i for i in range(count)]
        self.parameters = numpy.array(addresses, dtype=numpy.uint64)  # what cuLaunchKernel reads: one address each
        self._parameters_address = self.parameters.ctypes.data
        self._placed: tuple | None = None  # (a, b, c, element_bytes) the buffers describe
        self._scaled: tuple[float, float] | None = None
        self._lock = threading.Lock()

    def __call__(self, stream_ptr: int, a: int, b: int, c: int, element_bytes: int, alpha: float, beta: float) -> None:
        with self._lock:
            placed = (a, b, c, element_bytes)
            if placed != self._placed:
                self._pointers[:] = (a, b, c)
                if self.tensor_maps:
                    self._maps[:] = numpy.frombuffer(self._encode_maps(a, b, c, element_bytes), numpy.uint8)
                self._placed = placed
            if self._workspaces is not None and stream_ptr != self._workspace_stream:
                # the pool keeps every buffer it handed out, so a stream's stays valid for this launch's kernel
                self._workspace_pointer[0] = self._workspaces.address(stream_ptr, self.workspace)
                self._workspace_stream = stream_ptr
            if (alpha, beta) != self._scaled:
                self._scalars[:] = (alpha, beta)
                self._scaled = (alpha, beta)
            (gx, gy, gz), (bx, by, bz) = self.grid, self.block
            self._launch_kernel(self.function.ptr, gx, gy, gz, bx, by, bz, self.dynamic_smem, stream_ptr,
                                self._parameters_address, 0)

    def _encode_maps(self, a: int, b: int, c: int, element_bytes: int) -> bytes:
        operands = {"A": a, "B": b, "C": c}
        m, n, k = self.sizes
        return b"".join(argument(spec, operands[spec.operand], m, n, k, element_bytes, self.b_transposed)
                        for spec in self.tensor_maps)
