"""The kernel ABI: the arguments every GEMM kernel takes, and its TMA tensor maps (what a kernel asks
for, and their encoding by the CUDA driver).

Every kernel takes ``(const T* A, const T* B, T* C, int M, int N, int K, float alpha, float beta)``
(KERNEL_ARGUMENTS), then a workspace pointer if it takes one, and then its tensor maps, if any.

A family whose kernels need global scratch memory (stream-K's partial sums and flags) declares its size
in bytes in its space file (``[launch] workspace``). The launcher passes the address of that much device
memory, zeroed before the first launch; every launch leaves it zeroed again, so launches in one stream
may share it (launches that may run at once, on different streams, each need their own).

A family whose kernels load tiles with TMA (``cp.async.bulk.tensor``) declares
the maps in its space file (``[[launch.tensor_maps]]``); its kernels take them
by value (``const __grid_constant__``) after the GEMM arguments, in that order.
The launcher encodes each map for the operands of a launch
(``cuTensorMapEncodeTiled``). A map is only encoded for an operand TMA can
address (16-byte aligned start and rows; zeros are passed otherwise); kernels
check the same condition and copy element-wise where it fails.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools

from autotune.errors import AutotuneError

TENSOR_MAP_BYTES = 128
OPERANDS = ("A", "B", "C")  # A: M x K, B: K x N (N x K stored transposed, layout "nt"), C: M x N, all row-major
SWIZZLES = {0: 0, 32: 1, 64: 2, 128: 3}  # bytes -> CUtensorMapSwizzle
_DATA_TYPES = {2: 6, 4: 7}  # element bytes -> CU_TENSOR_MAP_DATA_TYPE_FLOAT16 / FLOAT32
_INTERLEAVE_NONE = 0
_L2_PROMOTION_256B = 3
_OOB_FILL_ZEROS = 0
MAX_BOX = 256
KERNEL_ARGUMENTS = ("(const T* A, const T* B, T* C, int M, int N, int K, float alpha, float beta"
                    "[, void* workspace][, CUtensorMap tensor_maps...]); A: M x K, B: K x N, C: M x N, row-major; "
                    "C = alpha * A @ B + beta * C")
GEMM_ARGUMENT_BYTES = (8, 8, 8, 4, 4, 4, 4, 4)  # A, B, C, M, N, K, alpha, beta: what every kernel takes first


WORKSPACE_POINTER_BYTES = 8


def argument_bytes(tensor_maps: tuple[TensorMapSpec, ...], workspace: bool = False) -> tuple[int, ...]:
    """The size of each argument a kernel with these tensor maps (and a workspace, or not) is launched with."""
    return GEMM_ARGUMENT_BYTES + (WORKSPACE_POINTER_BYTES,) * workspace + (TENSOR_MAP_BYTES,) * len(tensor_maps)


class TensorMapError(AutotuneError):
    """The driver refused to encode a tensor map."""


@dataclasses.dataclass(frozen=True)
class TensorMapSpec:
    """One tensor map a kernel takes: its parameter name, operand, box and swizzle."""

    name: str  # the kernel parameter
    operand: str  # "A", "B" or "C"
    box: tuple[int, int]  # (columns, rows) in elements, copied per TMA load
    swizzle: int  # bytes: 0, 32, 64 or 128

    def __post_init__(self):
        if self.operand not in OPERANDS:
            raise ValueError(f"tensor map operand {self.operand!r}: expected one of {', '.join(OPERANDS)}")
        if self.swizzle not in SWIZZLES:
            raise ValueError(f"tensor map swizzle {self.swizzle}: expected one of {', '.join(map(str, SWIZZLES))}")
        if not all(1 <= b <= MAX_BOX for b in self.box):
            raise ValueError(f"tensor map box {self.box}: each side must be 1..{MAX_BOX}")

    def shape(self, m: int, n: int, k: int, b_transposed: bool = False) -> tuple[int, int]:
        """(rows, columns) of the operand as stored in an M x N x K GEMM (B: N x K where ``b_transposed``)."""
        return {"A": (m, k), "B": (n, k) if b_transposed else (k, n), "C": (m, n)}[self.operand]


def fits_tma(pointer: int, columns: int, element_bytes: int) -> bool:
    """Whether TMA can address a row-major matrix: 16-byte aligned start and row pitch."""
    return pointer % 16 == 0 and (columns * element_bytes) % 16 == 0


def argument(spec: TensorMapSpec, pointer: int, m: int, n: int, k: int, element_bytes: int,
             b_transposed: bool = False) -> bytes:
    """The 128 bytes a kernel takes for ``spec`` in an M x N x K launch whose operand starts at
    ``pointer``: the encoded map, or zeros for an operand TMA cannot address (the kernel checks
    the same condition and copies element-wise)."""
    rows, columns = spec.shape(m, n, k, b_transposed)
    if not fits_tma(pointer, columns, element_bytes):
        return bytes(TENSOR_MAP_BYTES)
    return encode(spec, pointer, rows, columns, element_bytes)


def encode(spec: TensorMapSpec, pointer: int, rows: int, columns: int, element_bytes: int) -> bytes:
    """The 128-byte CUtensorMap of a row-major ``rows x columns`` matrix at device address ``pointer``.

    Boxes past the matrix read zeros. Raises :class:`TensorMapError` where the
    driver refuses (for example a row pitch that is not a multiple of 16 bytes).
    """
    if element_bytes not in _DATA_TYPES:
        raise ValueError(f"element size {element_bytes}: expected one of {', '.join(map(str, _DATA_TYPES))}")
    buffer = (ctypes.c_uint8 * (TENSOR_MAP_BYTES + 64))()
    address = (ctypes.addressof(buffer) + 63) & ~63  # CUtensorMap is 64-byte aligned
    dims = (ctypes.c_uint64 * 2)(columns, rows)
    strides = (ctypes.c_uint64 * 1)(columns * element_bytes)  # bytes between rows
    box = (ctypes.c_uint32 * 2)(*spec.box)
    element_strides = (ctypes.c_uint32 * 2)(1, 1)
    status = _driver().cuTensorMapEncodeTiled(
        ctypes.c_void_p(address), _DATA_TYPES[element_bytes], 2, ctypes.c_void_p(pointer), dims, strides, box,
        element_strides, _INTERLEAVE_NONE, SWIZZLES[spec.swizzle], _L2_PROMOTION_256B, _OOB_FILL_ZEROS,
    )
    if status != 0:
        raise TensorMapError(
            f"cuTensorMapEncodeTiled refused {spec.name} ({spec.operand}: {rows} x {columns}, box {spec.box}, "
            f"swizzle {spec.swizzle} B, address {pointer:#x}): CUresult {status}"
        )
    return ctypes.string_at(address, TENSOR_MAP_BYTES)


@functools.cache
def _driver() -> ctypes.CDLL:
    library = ctypes.CDLL("libcuda.so.1")
    function = library.cuTensorMapEncodeTiled
    function.restype = ctypes.c_int
    function.argtypes = [
        ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
        ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
        ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
    ]  # fmt: skip
    return library
