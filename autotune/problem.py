"""The GEMM problem: C = alpha * A @ B + beta * C, row-major."""

from __future__ import annotations

import dataclasses
import re

from autotune.errors import InputError

DTYPES = ("f32", "f16")
LAYOUTS = ("row",)
INT32_MAX = 2**31 - 1  # kernels index A (M*K), B (K*N) and C (M*N) with 32-bit integers
SHAPE_HELP = "a positive size like 4096 or MxNxK like 4096x4096x1024"
SIZE_HELP = f"a shape whose M*K, K*N and M*N are at most {INT32_MAX} elements (32-bit indexing)"
_SHAPE = re.compile(r"^\s*(\d{1,30})(?:\s*[xX]\s*(\d{1,30})\s*[xX]\s*(\d{1,30}))?\s*$")


@dataclasses.dataclass(frozen=True)
class GemmProblem:
    """One GEMM: sizes, element type, layout and scalars.

    A is m x k, B is k x n and C is m x n, all row-major (``layout="row"``).
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
            raise InputError("--dtype", self.dtype, " or ".join(DTYPES))
        if self.layout not in LAYOUTS:
            raise InputError("layout", self.layout, " or ".join(LAYOUTS))

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


def make_problem(shape: str, dtype: str, alpha: float = 1.0, beta: float = 0.0) -> GemmProblem:
    """Build a problem from CLI text, with errors that name the bad value."""
    if dtype not in DTYPES:
        raise InputError("--dtype", dtype, " or ".join(DTYPES))
    m, n, k = parse_shape(shape)
    return GemmProblem(m, n, k, dtype=dtype, alpha=alpha, beta=beta)
