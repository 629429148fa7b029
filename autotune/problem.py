"""The GEMM problem: C = alpha * A @ B + beta * C, row-major."""

from __future__ import annotations

import dataclasses
import re

from autotune.errors import InputError


@dataclasses.dataclass(frozen=True)
class ElementType:
    """What a dtype is, everywhere it matters: the one table that maps a dtype name to its storage,
    CUDA names, cuBLAS type and verification tolerance.

    A dtype without a NumPy type (bf16) is stored as the bit patterns of its elements in an unsigned
    integer type of its width (``storage``), made by rounding fp32 to nearest even.
    """

    name: str  # "f32", "f16", "bf16"
    array_dtype: str  # the dtype of arrays (NumPy, PyTorch) holding it: "float32", "float16", "bfloat16"
    storage: str  # the NumPy/CuPy dtype its device arrays have: "float32", "float16", "uint16" (bf16 bits)
    itemsize: int  # bytes per element
    c_type: str  # the CUDA C element type: float, half, __nv_bfloat16
    c_pair: str  # two elements in one 32-bit word: float2, half2, __nv_bfloat162
    ptx: str  # the PTX type name of mma.sync and wgmma operands: f32, f16, bf16
    header: str  # the CUDA header declaring c_type and its conversions ("" for float)
    to_float: str  # element -> float
    from_float: str  # float -> element, rounding to nearest even
    pair_to_float2: str  # c_pair -> float2
    floats_to_pair: str  # (float, float) -> c_pair, rounding to nearest even
    cuda_data_type: int  # cudaDataType of cuBLAS's gemmEx (library_types.h): CUDA_R_32F 0, CUDA_R_16F 2, CUDA_R_16BF 14
    unit_roundoff: float  # one rounding of a result to this type; 0 for f32, whose results are not rounded again
    subnormal_step: float  # the spacing of its subnormals, where a rounding step is absolute (0 for f32)
    min_arch: int  # the oldest compute capability whose tensor cores and conversions take it (sm_XY as XY)


ELEMENTS = {
    "f32": ElementType("f32", "float32", "float32", 4, "float", "float2", "f32", "", "", "", "", "", 0,
                       0.0, 0.0, 0),
    "f16": ElementType("f16", "float16", "float16", 2, "half", "half2", "f16", "cuda_fp16.h", "__half2float",
                       "__float2half", "__half22float2", "__floats2half2_rn", 2, 2.0**-11, 2.0**-24, 0),
    # bf16 has fp32's exponent range and 8 significand bits: unit roundoff 2^-8, subnormals 2^-133 apart.
    "bf16": ElementType("bf16", "bfloat16", "uint16", 2, "__nv_bfloat16", "__nv_bfloat162", "bf16", "cuda_bf16.h",
                        "__bfloat162float", "__float2bfloat16", "__bfloat1622float2", "__floats2bfloat162_rn", 14,
                        2.0**-8, 2.0**-133, 80),
}
DTYPES = tuple(ELEMENTS)
DTYPE_CHOICES = ", ".join(DTYPES)
# How A and B are stored, both row-major: "row" A (m x k) and B (k x n); "nt" A (m x k) and B transposed,
# stored n x k (``x @ W.T`` with nn.Linear's weight W, out x in). C is m x n row-major in both.
LAYOUTS = ("row", "nt")
LAYOUT_CHOICES = ", ".join(LAYOUTS)
INT32_MAX = 2**31 - 1  # kernels index A (M*K), B (K*N) and C (M*N) with 32-bit integers
SHAPE_HELP = "a positive size like 4096 or MxNxK like 4096x4096x1024"
SIZE_HELP = f"a shape whose M*K, K*N and M*N are at most {INT32_MAX} elements (32-bit indexing)"
_SHAPE = re.compile(r"^\s*(\d{1,30})(?:\s*[xX]\s*(\d{1,30})\s*[xX]\s*(\d{1,30}))?\s*$")


@dataclasses.dataclass(frozen=True)
class GemmProblem:
    """One GEMM: sizes, element type, layout and scalars.

    A is m x k, B is k x n and C is m x n, all row-major (``layout="row"``); with ``layout="nt"`` B is
    stored transposed, n x k row-major (the product ``A @ Bt.T``).
    ``dtype`` names the storage type of A, B and C; accumulation is fp32.
    """

    m: int
    n: int
    k: int
    dtype: str = "f32"
    layout: str = "row"
    alpha: float = 1.0
    beta: float = 0.0

    def __post_init__(self):
        for axis in ("m", "n", "k"):
            value = getattr(self, axis)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InputError(axis, value, "an integer >= 1")
        if not fits_int32(self.m, self.n, self.k):
            raise InputError("shape", self.shape, SIZE_HELP)
        if self.dtype not in DTYPES:
            raise InputError("--dtype", self.dtype, DTYPE_CHOICES)
        if self.layout not in LAYOUTS:
            raise InputError("--layout", self.layout, LAYOUT_CHOICES)

    @property
    def element(self) -> ElementType:
        """What its dtype is: storage, CUDA names, tolerance (:data:`ELEMENTS`)."""
        return ELEMENTS[self.dtype]

    @property
    def b_transposed(self) -> bool:
        """Whether B is stored transposed, n x k (layout "nt")."""
        return self.layout == "nt"

    @property
    def b_shape(self) -> tuple[int, int]:
        """(rows, columns) of B as stored: k x n, or n x k for layout "nt"."""
        return (self.n, self.k) if self.b_transposed else (self.k, self.n)

    @property
    def flops(self) -> int:
        """Floating-point operations of one GEMM (2mnk)."""
        return 2 * self.m * self.n * self.k

    @property
    def shape(self) -> str:
        """``MxNxK``, the form ``parse_shape`` reads back."""
        return f"{self.m}x{self.n}x{self.k}"

    def tflops(self, milliseconds: float) -> float:
        """TFLOP/s for one GEMM that took ``milliseconds``."""
        return self.flops / (milliseconds * 1e-3) / 1e12


def parse_shape(text: str) -> tuple[int, int, int]:
    """Read ``"4096"`` (square) or ``"MxNxK"``; raise InputError otherwise."""
    match = _SHAPE.match(str(text))
    if not match:
        raise InputError("--shape", _clipped(str(text)), SHAPE_HELP)
    m = int(match.group(1))
    n, k = (int(match.group(2)), int(match.group(3))) if match.group(2) else (m, m)
    if min(m, n, k) < 1:
        raise InputError("--shape", text, SHAPE_HELP)
    if not fits_int32(m, n, k):
        raise InputError("--shape", text, SIZE_HELP)
    return m, n, k


def fits_int32(m: int, n: int, k: int) -> bool:
    """Whether every dimension and each operand's element count (M*K, K*N, M*N) fits a signed 32-bit index."""
    return max(m, n, k, m * k, k * n, m * n) <= INT32_MAX


def _clipped(text: str, length: int = 40) -> str:
    return text if len(text) <= length else text[:length] + "..."


def make_problem(shape: str, dtype: str, alpha: float = 1.0, beta: float = 0.0, layout: str = "row") -> GemmProblem:
    """Build a problem from CLI text, with errors that name the bad value."""
    check_dtype(dtype)
    m, n, k = parse_shape(shape)
    return GemmProblem(m, n, k, dtype=dtype, layout=layout, alpha=alpha, beta=beta)


def check_dtype(dtype: object, what: str = "--dtype") -> str:
    """``dtype`` if it is one of DTYPES; InputError naming it and the valid ones otherwise."""
    if not isinstance(dtype, str) or dtype not in ELEMENTS:
        raise InputError(what, dtype, DTYPE_CHOICES)
    return dtype


def dtype_runs_on(dtype: str, arch: int, gpu_key: str) -> None:
    """InputError where GPU ``gpu_key`` (compute capability ``arch``, sm_XY as XY) has no kernels for
    ``dtype`` (bf16 needs sm_80): the message names the dtype and those the GPU takes."""
    if arch < ELEMENTS[dtype].min_arch:
        takes = ", ".join(name for name, element in ELEMENTS.items() if arch >= element.min_arch)
        raise InputError("--dtype", dtype, f"{takes} on {gpu_key} (sm_{arch}; {dtype} needs "
                                           f"sm_{ELEMENTS[dtype].min_arch} or newer)")
