"""Operands, the cuBLAS reference, verification, timing and NVML readings.

Runs only inside the GPU worker's child (:mod:`autotune.gpu.cupy_backend`): importing
this module imports CuPy. Everything works on CuPy's current device and stream.

Verification is elementwise against a bound that scales with K (see
:func:`error_bound`); timing follows Triton's ``do_bench``: the L2 flush is
enqueued before each start event, so the GPU is busy while the host submits
the timed launch and host launch latency stays out of the measured interval.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

import cupy
import numpy

from autotune.gpu.race import RaceStage, lost_race
from autotune.gpu.storage import fill_nan, narrow, stored_as_bits, widen
from autotune.problem import ELEMENTS, ElementType, GemmProblem
from autotune.records import Timing

MIB = 1 << 20
MIN_FLUSH_BYTES = 256 * MIB
DEFAULT_TOL_FACTOR = 2.0
FP32_EPS = 2.0**-23  # machine epsilon of the fp32 accumulation
TINY = 1e-30  # keeps the bound positive where every term is zero

# cuBLAS / CUDA ABI values (cublas_api.h, library_types.h).
_CUBLAS_OP_N = 0
_CUBLAS_OP_T = 1
_CUBLAS_POINTER_MODE_HOST = 0
_CUBLAS_COMPUTE_32F = 68
_CUBLAS_GEMM_DEFAULT = -1
# Arrays whose numpy dtype says what they hold (not bf16's uint16 bit patterns): their cudaDataType.
CUDA_TYPES = {numpy.dtype(e.storage): e.cuda_data_type for e in ELEMENTS.values() if not stored_as_bits(e)}


@dataclasses.dataclass(frozen=True)
class Operands:
    """Device arrays of one GEMM: inputs, the initial C and the output buffer."""

    a: cupy.ndarray  # m x k, row-major
    b: cupy.ndarray  # k x n, row-major; n x k for layout "nt" (GemmProblem.b_shape)
    c_init: cupy.ndarray  # m x n, the C that beta scales
    out: cupy.ndarray  # m x n, what the kernel writes


@dataclasses.dataclass(frozen=True)
class Check:
    """The worst element of one verification."""

    max_error: float  # |out - ref| / bound at the worst element; inf for NaN/inf
    row: int
    col: int
    got: float
    want: float

    @property
    def passed(self) -> bool:
        return self.max_error <= 1.0

    def describe(self) -> str:
        where = f"at ({self.row}, {self.col}): got {self.got:.6g}, want {self.want:.6g}"
        if math.isinf(self.max_error):
            return f"non-finite or unbounded error {where}"
        return f"max error {self.max_error:.3g}x the bound {where}"


def storage_dtype(problem: GemmProblem) -> numpy.dtype:
    """The NumPy/CuPy element type of A, B and C (uint16 bit patterns for bf16, :mod:`autotune.gpu.storage`)."""
    return numpy.dtype(problem.element.storage)


def make_operands(problem: GemmProblem, seed: int) -> Operands:
    """Random normal A, B and C (fresh values for each seed) and an output buffer."""
    dtype = storage_dtype(problem)
    rng = cupy.random.RandomState(seed)

    def normal(rows: int, cols: int) -> cupy.ndarray:
        return narrow(rng.standard_normal((rows, cols), dtype=cupy.float32), problem.element)

    a, b, c = normal(problem.m, problem.k), normal(*problem.b_shape), normal(problem.m, problem.n)
    return Operands(a, b, c, cupy.empty((problem.m, problem.n), dtype=dtype))


class CublasCall:
    """Row-major ``c = alpha * a @ b + beta * c`` of one shape as a cuBLAS ``gemmEx`` call on device addresses
    (``b`` stored n x k with ``transpose_b``: ``a @ b.T``), fp32 compute (no TF32), enqueued on CuPy's current
    stream and device. Everything but the addresses and scalars is prepared once."""

    def __init__(self, m: int, n: int, k: int, cuda_type: int, transpose_b: bool = False):
        from cupy_backends.cuda.libs import cublas

        self._gemm, self._pointer_mode = cublas.gemmEx, cublas.setPointerMode
        self._ones = numpy.array([1.0, 0.0], dtype=numpy.float32)  # alpha 1, beta 0: the usual call
        self._ones_pointer = self._ones.ctypes.data
        # Row-major C = A B is column-major C^T = B^T A^T: swap the operands, ld = row length. A row-major
        # n x k B (transpose_b) is a column-major k x n matrix, which cuBLAS transposes (ld k).
        self._head = (_CUBLAS_OP_T if transpose_b else _CUBLAS_OP_N, _CUBLAS_OP_N, n, m, k)
        self._b, self._a, self._c = (cuda_type, k if transpose_b else n), (cuda_type, k), (cuda_type, n)

    def __call__(self, a: int, b: int, c: int, alpha: float = 1.0, beta: float = 0.0) -> None:
        if alpha == 1.0 and beta == 0.0:
            self.with_scalars(a, b, c, self._ones_pointer)
            return
        scalars = numpy.array([alpha, beta], dtype=numpy.float32)  # read before gemmEx returns (host mode)
        self.with_scalars(a, b, c, scalars.ctypes.data)

    def with_scalars(self, a: int, b: int, c: int, scalars: int) -> None:
        """The call with alpha and beta read from ``scalars``: the host address of two float32s."""
        handle = cupy.cuda.device.get_cublas_handle()
        self._pointer_mode(handle, _CUBLAS_POINTER_MODE_HOST)
        self._gemm(handle, *self._head, scalars, b, *self._b, a, *self._a, scalars + 4, c, *self._c,
                   _CUBLAS_COMPUTE_32F, _CUBLAS_GEMM_DEFAULT)


class CublasGemm:
    """``c = alpha * a @ b + beta * c`` (row-major) as one cuBLAS ``gemmEx`` call (:class:`CublasCall`); with
    ``transpose_b``, ``b`` is stored n x k and the product is ``a @ b.T`` (layout "nt").

    fp32, fp16 and bf16 storage, fp32 compute (no TF32). Arguments are prepared once so
    a call costs the host little; the call is enqueued on the current stream. ``element``
    says what the arrays hold where their dtype does not (bf16 as uint16 bit patterns).
    """

    def __init__(self, a: cupy.ndarray, b: cupy.ndarray, c: cupy.ndarray, alpha: float, beta: float,
                 element: ElementType | None = None, transpose_b: bool = False):
        m, k = a.shape
        n = b.shape[0] if transpose_b else b.shape[1]
        if b.shape != ((n, k) if transpose_b else (k, n)) or c.shape != (m, n):
            raise ValueError(f"shapes do not chain: {a.shape} @ {b.shape}{'.T' if transpose_b else ''} -> {c.shape}")
        if element is not None and a.dtype == numpy.dtype(element.storage):
            cuda_type = element.cuda_data_type
        elif element is None and a.dtype in CUDA_TYPES:
            cuda_type = CUDA_TYPES[a.dtype]
        else:
            raise ValueError(f"dtypes {a.dtype}, {b.dtype}, {c.dtype}: need one of float32, float16, or bf16 bits "
                             "(uint16) with its element type")
        if not a.dtype == b.dtype == c.dtype:
            raise ValueError(f"dtypes {a.dtype}, {b.dtype}, {c.dtype}: need one dtype for a, b and c")
        if not all(x.flags.c_contiguous for x in (a, b, c)):
            raise ValueError("operands must be C-contiguous")
        self._keep = (a, b, c)
        self._scalars = numpy.array([alpha, beta], dtype=numpy.float32)
        self._call = CublasCall(m, n, k, cuda_type, transpose_b)
        self._arguments = (a.data.ptr, b.data.ptr, c.data.ptr, self._scalars.ctypes.data)

    def __call__(self) -> None:
        self._call.with_scalars(*self._arguments)


def reference(problem: GemmProblem, operands: Operands) -> cupy.ndarray:
    """``alpha * A @ B + beta * C_init`` by cuBLAS in fp32 (fp16 and bf16 inputs widened first, exactly)."""
    a = widen(operands.a, problem.element)
    b = widen(operands.b, problem.element)
    ref = widen(operands.c_init, problem.element).copy()  # always a copy: cuBLAS writes it
    CublasGemm(a, b, ref, problem.alpha, problem.beta, transpose_b=problem.b_transposed)()
    return ref


def error_bound(
    problem: GemmProblem, operands: Operands, ref: cupy.ndarray, tol_factor: float = DEFAULT_TOL_FACTOR
) -> cupy.ndarray:
    """Elementwise tolerance for ``|out - ref|``; scales with K.

    ``tol * K * 2^-23 * (|alpha| (|A| @ |B|) + |beta| |C|)`` covers any fp32
    summation order (worst case), plus ``tol * u * (|ref| + |beta C|)`` for a 16-bit
    output of unit roundoff ``u`` (fp16 2^-11, bf16 2^-8: :data:`~autotune.problem.ELEMENTS`):
    one rounding of the result, or of each epilogue term when the epilogue runs in the
    element type, and ``tol`` times its subnormal spacing for results that round to
    subnormals, where one rounding step is absolute. Accumulation is fp32 for every dtype
    (see :class:`~autotune.problem.GemmProblem`); a kernel accumulating in 16 bits fails.
    """
    element = problem.element
    abs_a = cupy.abs(widen(operands.a, element))
    abs_b = cupy.abs(widen(operands.b, element))
    abs_c = cupy.abs(widen(operands.c_init, element))
    scale = abs(problem.beta) * abs_c
    CublasGemm(abs_a, abs_b, scale, abs(problem.alpha), 1.0, transpose_b=problem.b_transposed)()
    bound = (tol_factor * problem.k * FP32_EPS) * scale
    if element.unit_roundoff:
        bound += (tol_factor * element.unit_roundoff) * (cupy.abs(ref) + abs(problem.beta) * abs_c)
        bound += tol_factor * element.subnormal_step  # among subnormals the rounding step is absolute
    bound += TINY
    return bound


def check(
    launch: Callable[[cupy.ndarray], None],
    problem: GemmProblem,
    operands: Operands,
    ref: cupy.ndarray,
    bound: cupy.ndarray,
) -> Check:
    """Run ``launch(out)`` once on a NaN-poisoned output and find its worst element.

    C_init is copied into the output only when ``problem.beta != 0``; with beta 0
    the output stays NaN, so a kernel that reads C then fails.
    """
    out = operands.out
    fill_nan(out, problem.element)
    if problem.beta != 0:
        cupy.copyto(out, operands.c_init)
    launch(out)
    cupy.cuda.get_current_stream().synchronize()
    values = widen(out, problem.element)
    ratio = cupy.abs(values - ref) / bound
    ratio = cupy.where(cupy.isnan(ratio), cupy.inf, ratio).ravel()
    worst = int(cupy.argmax(ratio))
    row, col = divmod(worst, problem.n)
    return Check(
        max_error=float(ratio[worst]),
        row=row,
        col=col,
        got=float(values.ravel()[worst]),
        want=float(ref.ravel()[worst]),
    )


def verify(
    launch: Callable[[cupy.ndarray], None],
    problem: GemmProblem,
    operands: Operands,
    ref: cupy.ndarray,
    bound: cupy.ndarray,
) -> float:
    """Max over all elements of ``|out - ref| / bound`` (inf for NaN/inf); <= 1 passes."""
    return check(launch, problem, operands, ref, bound).max_error


class OperandCache:
    """Operands, references and bounds of the latest (shape, dtype, seed).

    Consecutive candidates on one problem reuse them; a new problem frees the old.
    """

    def __init__(self, tol_factor: float = DEFAULT_TOL_FACTOR):
        self.tol_factor = tol_factor
        self._key: tuple | None = None
        self._operands: Operands | None = None
        self._references: dict[tuple[float, float], tuple[cupy.ndarray, cupy.ndarray]] = {}

    def operands(self, problem: GemmProblem, seed: int) -> Operands:
        key = (problem.m, problem.n, problem.k, problem.dtype, problem.layout, seed)
        if key != self._key:
            self._operands, self._references, self._key = None, {}, None
            cupy.get_default_memory_pool().free_all_blocks()
            self._operands, self._key = make_operands(problem, seed), key
        return self._operands

    def reference(self, problem: GemmProblem, seed: int) -> tuple[cupy.ndarray, cupy.ndarray]:
        """``(ref, bound)`` for the problem's alpha and beta."""
        operands = self.operands(problem, seed)
        scalars = (problem.alpha, problem.beta)
        if scalars not in self._references:
            ref = reference(problem, operands)
            self._references[scalars] = (ref, error_bound(problem, operands, ref, self.tol_factor))
        return self._references[scalars]


@functools.cache
def _flush_bytes_of(device: int) -> int:
    l2 = cupy.cuda.runtime.getDeviceProperties(device).get("l2CacheSize", 0)
    return max(2 * int(l2), MIN_FLUSH_BYTES)


def default_flush_bytes() -> int:
    """max(2 x the current device's L2 size, 256 MiB)."""
    return _flush_bytes_of(cupy.cuda.runtime.getDevice())


_FLUSH_BUFFERS: dict[tuple[int, int], cupy.ndarray] = {}


def flush_buffer(nbytes: int | None = None) -> cupy.ndarray:
    """The L2 flush buffer of the current device, allocated once per size and device."""
    device = cupy.cuda.runtime.getDevice()
    nbytes = nbytes or _flush_bytes_of(device)
    key = (device, nbytes)
    if key not in _FLUSH_BUFFERS:
        _FLUSH_BUFFERS[key] = cupy.empty(nbytes, dtype=cupy.uint8)
    return _FLUSH_BUFFERS[key]


MIN_REPEATS = 5


def time_launches(
    launch: Callable[[], None],
    flush_bytes: int | None = None,
    warmup: int = 5,
    repeats: int = 50,
    budget_ms: float | None = 3000.0,
    race: tuple[RaceStage, ...] = (),
) -> Timing:
    """Time ``launch()`` up to ``repeats`` times, each between its own pair of events.

    Before each start event the flush buffer is zeroed on the stream, which
    evicts L2 and keeps the GPU busy while the host submits the launch. Event
    pairs are read after one synchronisation per group of launches. The warm-up
    is timed as a whole; when ``repeats`` launches would take longer than
    ``budget_ms`` the count drops (to no fewer than 5), so a slow candidate
    costs seconds, not minutes. With ``warmup=0`` the first timed launches give
    that estimate: only for a kernel that has just run (e.g. been verified),
    since a kernel's or library's first launch can take a hundred times longer
    than the next.

    With ``race`` the kernel races: at each stage, in order of launches, timing
    stops if the median so far is above the stage's limit (a clearly slower
    kernel costs a launch or a few); a kernel that passes every stage gets all
    ``repeats`` timed launches, the earlier ones among them.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    stream = cupy.cuda.get_current_stream()
    flush = flush_buffer(flush_bytes)
    if warmup > 0:
        warm_start, warm_end = cupy.cuda.Event(), cupy.cuda.Event()
        warm_start.record(stream)
        for _ in range(warmup):
            launch()
        warm_end.record(stream)
        warm_end.synchronize()
        samples: list[float] = []
        estimate_ms = cupy.cuda.get_elapsed_time(warm_start, warm_end) / warmup
    else:
        samples = _timed_launches(launch, flush, stream, 1)
        estimate_ms = samples[0]
    repeats = _within_budget(repeats, estimate_ms, budget_ms)
    for stage in sorted(race, key=lambda stage: stage.launches):
        if stage.launches >= repeats:
            break
        samples += _timed_launches(launch, flush, stream, stage.launches - len(samples))
        if lost_race(samples, (stage,)):
            return Timing.from_samples(samples)
    samples += _timed_launches(launch, flush, stream, repeats - len(samples))
    return Timing.from_samples(samples)


def time_back_to_back(launch: Callable[[], None], calls: int, warmup: int = 5, repeats: int = 20,
                      budget_ms: float | None = 3000.0) -> Timing:
    """Time ``launch()`` as a model runs its GEMMs: ``repeats`` samples, each ``calls`` launches back to back
    between one pair of events with no L2 flush, per launch. The warm-up sets the count as
    :func:`time_launches`'s does. Flushed timing leaves the GPU idle while the flush runs; back to back, a
    kernel that draws more power runs at the clocks that power allows."""
    if repeats < 1 or calls < 1:
        raise ValueError(f"repeats and calls must be >= 1, got {repeats} and {calls}")
    stream = cupy.cuda.get_current_stream()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record(stream)
    for _ in range(max(1, warmup)):
        launch()
    end.record(stream)
    end.synchronize()
    estimate_ms = cupy.cuda.get_elapsed_time(start, end) / max(1, warmup)
    repeats = _within_budget(repeats, estimate_ms * calls, budget_ms)
    events = [(cupy.cuda.Event(), cupy.cuda.Event()) for _ in range(repeats)]
    for first, last in events:
        first.record(stream)
        for _ in range(calls):
            launch()
        last.record(stream)
    stream.synchronize()
    return Timing.from_samples([cupy.cuda.get_elapsed_time(first, last) / calls for first, last in events])


def _within_budget(repeats: int, estimate_ms: float, budget_ms: float | None) -> int:
    """``repeats``, cut to what fits ``budget_ms`` at ``estimate_ms`` a launch (no fewer than MIN_REPEATS)."""
    if budget_ms is None or estimate_ms <= 0:
        return repeats
    return max(min(repeats, MIN_REPEATS), min(repeats, int(budget_ms / estimate_ms)))


def _timed_launches(launch: Callable[[], None], flush: cupy.ndarray, stream, count: int) -> list[float]:
    """``count`` launches, each after an L2 flush and between its own events; their times in ms."""
    events = [(cupy.cuda.Event(), cupy.cuda.Event()) for _ in range(count)]
    for start, end in events:
        cupy.cuda.runtime.memsetAsync(flush.data.ptr, 0, flush.nbytes, stream.ptr)
        start.record(stream)
        launch()
        end.record(stream)
    stream.synchronize()
    return [cupy.cuda.get_elapsed_time(start, end) for start, end in events]


# -- NVML --------------------------------------------------------------------------

_NO_READING = {"sm_clock_mhz": None, "throttle_reasons": None, "temperature_c": None}


def nvml_snapshot() -> dict:
    """SM clock (MHz), clock-event reason bits and temperature (C) of the current device.

    Keys match :class:`~autotune.records.Measurement`. Each value is None where
    NVML or that reading is unavailable; never raises.
    """
    nvml, handle = _nvml_handle(cupy.cuda.Device().pci_bus_id)
    if handle is None:
        return dict(_NO_READING)
    reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
    )
    return {
        "sm_clock_mhz": _nvml_read(nvml, nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM),
        "throttle_reasons": _nvml_read(nvml, reasons, handle) if reasons else None,
        "temperature_c": _nvml_read(nvml, nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU),
    }


@functools.cache
def _nvml_handle(pci_bus_id: str):
    """``(pynvml, handle)`` for a device, or ``(None, None)`` without NVML."""
    try:
        import pynvml
    except ImportError:
        return None, None
    try:
        pynvml.nvmlInit()
        return pynvml, pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
    except pynvml.NVMLError:
        return None, None


def _nvml_read(nvml, query, *args) -> int | None:
    try:
        return int(query(*args))
    except nvml.NVMLError:
        return None


def nvml_driver_version() -> str | None:
    """The driver release (``"580.159.04"``) from NVML, or None without NVML."""
    nvml, handle = _nvml_handle(cupy.cuda.Device().pci_bus_id)
    if nvml is None:
        return None
    try:
        version = nvml.nvmlSystemGetDriverVersion()
    except nvml.NVMLError:
        return None
    return version.decode() if isinstance(version, bytes) else str(version)
