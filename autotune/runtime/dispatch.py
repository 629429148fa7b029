"""Which kernel runs a GEMM call, or why cuBLAS does: pure decisions, no CUDA.

A :class:`Decision` names the tuned kernel the table picks for the call's shape
and dtype, or why the call runs on cuBLAS: the table picks cuBLAS (the tuned
kernel is predicted slower than cuBLAS at this shape), or no tuned kernel can
serve it (a dtype or layout none takes, an operand a kernel cannot address,
sizes outside the tuned range, no tuned results for this GPU). Mismatched
shapes or operands on different devices are errors, not fallbacks: no library
could run them.
"""

from __future__ import annotations

import dataclasses

from autotune.errors import InputError
from autotune.runtime.operands import TAKEN, Operand
from autotune.select.kernel_table import DtypeTable, KernelTable, TableKernel, TablePick, TableRule
from autotune.shapes import CARRIED_FACTOR

INT32_MAX = 2**31 - 1
ALIGNMENT = 16  # bytes: tuned kernels need 16-byte-aligned operand starts (vector and TMA loads)


@dataclasses.dataclass(frozen=True)
class TableChoice:
    """The table the runtime uses on a GPU, and how it was found."""

    table: KernelTable | None
    note: str  # "tuned on NVIDIA H200 (h200), from ...", or why there is none


@dataclasses.dataclass(frozen=True)
class Decision:
    """What one call runs: ``kernel`` (with the ``rule`` that picked it), or cuBLAS because of ``reason``.

    Where the table decided, ``pick`` holds its pick with the two predicted times; ``pick.cublas`` is set
    where it chose cuBLAS over its tuned kernel (``pick.kernel``)."""

    dtype: str
    shape: tuple[int, int, int]
    kernel: TableKernel | None
    rule: TableRule | None
    reason: str  # why this kernel, or why cuBLAS
    table_note: str
    pick: TablePick | None = None
    missed: bool = False  # a tuned kernel could serve the call, but the table was not tuned at its shape
    layout: str = "row"  # "nt": b is the transpose of a row-major n x k matrix (x @ W.T)

    @property
    def uses_cublas(self) -> bool:
        return self.kernel is None

    def __str__(self) -> str:
        m, n, k = self.shape
        head = f"{self.dtype} {m}x{n}x{k}{' nt' if self.layout == 'nt' else ''}: "
        if self.kernel is None:
            return head + f"cuBLAS, because {self.reason} ({self.table_note})"
        return head + f"{self.kernel.name}, {self.reason} ({self.table_note})"


def gemm_shape(a: Operand, b: Operand, c: Operand | None) -> tuple[int, int, int]:
    """``(m, n, k)`` of ``C = A @ B``; InputError when the operands do not chain."""
    for name, operand in (("a", a), ("b", b), ("out", c)):
        if operand is not None and len(operand.shape) != 2:
            raise InputError(f"{name}.shape", operand.shape, "a 2-D matrix (m x k, k x n, m x n)")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise InputError("b.shape", b.shape, f"{k} rows to match a's {k} columns (a is {m}x{k})")
    if c is not None and c.shape != (m, n):
        raise InputError("out.shape", c.shape, f"({m}, {n}) for a {m}x{k} @ {k}x{n} product")
    devices = {operand.device for operand in (a, b, c) if operand is not None}
    if len(devices) > 1:
        raise InputError("operand devices", sorted(devices), "a, b and out on one GPU")
    return m, n, k


def decide(choice: TableChoice, a: Operand, b: Operand, c: Operand, beta: float = 0.0) -> Decision:
    """The kernel for ``c = alpha * a @ b + beta * c``, or why cuBLAS runs it."""
    shape = gemm_shape(a, b, c)
    dtype = a.dtype
    layout = "nt" if not b.row_major and b.column_major else "row"  # b = W.T of a row-major W: B stored n x k

    def fallback(reason: str, missed: bool = False) -> Decision:
        return Decision(dtype or a.dtype_name, shape, None, None, reason, choice.note, missed=missed, layout=layout)

    if not (a.element == b.element == c.element):
        return fallback(f"the dtypes differ ({a.dtype_name}, {b.dtype_name}, {c.dtype_name}); tuned kernels take "
                        "one dtype for a, b and out")
    if dtype is None:
        return fallback(f"no tuned kernel takes {a.dtype_name} ({TAKEN} do)")
    for name, operand in (("a", a), ("b", b), ("out", c)):
        if not operand.row_major and not (name == "b" and layout == "nt"):
            return fallback(f"{name} is not C-contiguous (row-major); tuned kernels take row-major matrices, and "
                            "b also as the transpose of one (W.T)")
        if operand.pointer % ALIGNMENT:
            return fallback(f"{name} starts at an address that is not {ALIGNMENT}-byte aligned")
    m, n, k = shape
    if max(m * k, k * n, m * n) > INT32_MAX:
        return fallback(f"{m}x{n}x{k} has a matrix of more than 2^31 - 1 elements (kernels index with int32)")
    table = choice.table
    if table is None:
        return fallback("no tuned results are known for this GPU", missed=True)
    dtype_table = table.for_layout(layout).get(dtype)
    if dtype_table is None or not dtype_table.rules:
        transposed = " for b stored transposed (layout nt)" if layout == "nt" else ""
        return fallback(f"the table for {table.scope} has no {dtype} kernels{transposed}", missed=True)
    outside = dtype_table.outside(m, n, k)
    if outside:
        return fallback(outside, missed=True)
    pick = dtype_table.pick(m, n, k)
    rule, kernel = pick.rule, dtype_table.kernel(pick.kernel)
    missed = rule.shape != shape
    if pick.cublas:
        return Decision(dtype, shape, None, rule, _cublas_reason(dtype_table, pick, shape), choice.note, pick, missed,
                        layout)
    if rule.shape == shape:
        why = f"tuned at this shape ({_quality(rule, pick.measured)})"
    else:
        why = (f"chosen at the nearest tuned shape {rule.m}x{rule.n}x{rule.k} for its work here "
               f"({_quality(rule, pick.measured)}{_predicted(pick)})")
    if pick.measured != pick.kernel:
        why += f"; {pick.measured} is built for whole tiles, this is its build for any shape"
    if beta != 0 and kernel.reads_c_slowly:
        return Decision(dtype, shape, None, rule, f"beta is not 0: {kernel.family} kernels read C far slower than "
                        "cuBLAS, and the table's times are of beta 0 (the table's pick at beta 0: "
                        f"{kernel.name}, {why})", choice.note, pick, missed, layout)
    return Decision(dtype, shape, kernel, rule, why, choice.note, pick, missed, layout)


@dataclasses.dataclass(frozen=True)
class HostCost:
    """What a caller's host spends per call on its way to a tuned kernel and to cuBLAS (milliseconds)."""

    kernel_ms: float
    cublas_ms: float
    caller: str  # for reasons: "autotune.torch's operator"


def net_of_host_cost(decision: Decision, host: HostCost | None) -> Decision:
    """``decision``, or cuBLAS where its tuned kernel is not predicted faster once the host's time is counted.

    Calls queued back to back take the longer of the host's time and the GPU's each: the kernel is kept
    where ``max(host.kernel_ms, kernel) < max(host.cublas_ms, cuBLAS)`` at the predicted times. A GEMM of
    tens of microseconds gains nothing from a kernel a few percent faster when reaching it costs the host
    more than the GEMM takes."""
    pick = decision.pick
    if host is None or decision.kernel is None or pick is None or pick.kernel_ms is None or pick.cublas_ms is None:
        return decision
    with_kernel, with_cublas = max(host.kernel_ms, pick.kernel_ms), max(host.cublas_ms, pick.cublas_ms)
    if with_kernel < with_cublas:
        return decision
    return dataclasses.replace(decision, kernel=None, reason=(
        f"the tuned kernel {decision.kernel.name} is predicted {pick.kernel_ms * 1e3:.1f} us against cuBLAS's "
        f"{pick.cublas_ms * 1e3:.1f} us here, and {host.caller} takes the host {host.kernel_ms * 1e3:.0f} us a call "
        f"to it against {host.cublas_ms * 1e3:.0f} us to cuBLAS: {with_kernel * 1e3:.1f} us a call against "
        f"{with_cublas * 1e3:.1f} us"))


def _quality(rule: TableRule, kernel: str) -> str:
    ms = dict(rule.times)[kernel]
    text = f"{ms:.4g} ms there on {rule.measured_on}"
    return text + (f", {rule.cublas_ms / ms:.3f}x cuBLAS" if rule.cublas_ms else "")


def _predicted(pick: TablePick) -> str:
    return f"; predicted {pick.ratio_to_cublas:.3f}x cuBLAS here" if pick.ratio_to_cublas is not None else ""


def _cublas_reason(table: DtypeTable, pick: TablePick, shape: tuple[int, int, int]) -> str:
    """Why the table picks cuBLAS: no kernel of the nearest tuned shape runs this one, or its tuned kernel's
    predicted time against cuBLAS's, and where they come from."""
    rule, short = pick.rule, table.short_name(pick.measured)
    here, there = "x".join(map(str, shape)), f"{rule.m}x{rule.n}x{rule.k}"
    if pick.unserved:
        return (f"no tuned kernel measured at the nearest tuned shape {there} runs {here} "
                f"({short} runs only where {table.kernel(pick.measured).launch.serves})")
    if pick.far:
        return (f"the nearest tuned shape {there} is more than {CARRIED_FACTOR}x from {here} "
                f"on some axis: a tuned kernel's time is not carried that far")
    if pick.cut:
        return (f"{here} cuts the tiles of the tuned kernel {short} along N or K, whole at the nearest tuned "
                f"shape {there}: its time there is not carried to cut tiles")
    ms = dict(rule.times)[pick.measured]
    measured = f"{ms:.4g} ms against cuBLAS's {rule.cublas_ms:.4g} ms on {rule.measured_on}"
    if rule.shape == shape:
        where = f"tuned at this shape: {measured}"
    else:
        where = (f"{pick.kernel_ms:.4g} ms against {pick.cublas_ms:.4g} ms, carried from the nearest tuned shape "
                 f"{there}, where it took {measured}")
    return (f"the table picks it: the tuned kernel {short} is predicted {pick.ratio_to_cublas:.3f}x cuBLAS at "
            f"this shape ({short} is {pick.measured}; {where})")
