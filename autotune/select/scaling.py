"""How a kernel's time measured at one shape carries to another: in proportion to its busiest SM's work.

A GEMM kernel runs a grid of blocks, each through a number of k-tiles (the
k-slices of ``BK`` columns of A it multiplies; with ``SPLIT_K`` blocks sharing a
tile, its share of them). The SMs take the blocks in turns, so the SM that runs
the most blocks decides the time: ``cdiv(blocks, SMs) * k_tiles``. Between two
shapes near each other this work changes in steps (a 129th block on a GPU of
132 SMs costs nothing, a 133rd a whole turn), and a kernel's time changes with
it; what it costs per unit of work stays about the same.

The selection table uses this to choose among the kernels measured at the
nearest tuned shape: the one whose time there, scaled by the change in its
work, is least (:func:`fastest`). Families name their k-slice ``BK`` and their
split ``SPLIT_K`` (a family without one counts it as 1), or give a block's k-tiles
themselves as ``[launch] k_tiles`` (a persistent kernel's blocks walk several tiles); a launch
contract computes its work (:meth:`autotune.kernel.contract.LaunchContract.work`).

cuBLAS is a candidate too, wherever its time was measured at the tuned shape
(:func:`cublas_ms_at`). It has no launch contract: it chooses its own kernel per
shape (tile, split-K, stream-K), so it follows no fixed grid's steps. Its time is
carried by a roofline: in proportion to the larger of the flops (``2 * m * n * k``)
and the elements moved (``m * k + k * n + m * n``) times the GPU's ridge (its peak
flops per element its memory moves, :meth:`~autotune.gpu_specs.GpuSpec.flops_per_element`).
Between large shapes that is the product ``m * n * k``, how a kernel's work grows
too once it fills the GPU many times over, so the comparison is the measured ratio,
and where a kernel's grid takes a step (a wave barely filled) cuBLAS, which has no
such step, wins. With a few rows of A both are bound by reading B, whose size does
not follow ``m``: carried by ``m * n * k`` alone, cuBLAS's time at 2 rows would be
half its time at 4, and the table would send a shape it measured a kernel 1.6x
faster at to cuBLAS. A table without a ridge (0) carries it by ``m * n * k``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

Shape = tuple[int, int, int]


def scaled_ms(ms: float, work_there: int, work_here: int) -> float:
    """A time measured where the busiest SM did ``work_there``, carried to where it does ``work_here``
    (computed as ``ms * work_here / work_there``, left to right, as the C library does)."""
    return ms * work_here / work_there


def volume(shape: Shape) -> float:
    """``m * n * k`` as a double, multiplied left to right (as the C library computes it)."""
    m, n, k = shape
    return float(m) * n * k


def roofline_cost(shape: Shape, ridge: float) -> float:
    """The larger of ``2 * m * n * k`` and ``ridge * (m * k + k * n + m * n)``, as doubles, left to right (as
    the C library computes it)."""
    m, n, k = shape
    return max(2.0 * volume(shape), ridge * (float(m) * k + float(k) * n + float(m) * n))


def cublas_ms_at(ms: float, there: Shape, here: Shape, ridge: float = 0.0) -> float:
    """cuBLAS's time measured at shape ``there`` carried to ``here``: in proportion to its roofline cost
    (``ms * cost(here) / cost(there)``, left to right; see the module docstring for why); with ``ridge`` 0, in
    proportion to ``m * n * k``."""
    return ms * roofline_cost(here, ridge) / roofline_cost(there, ridge)


def fastest(times: Iterable[tuple[str, float]], work: Callable[[str, Shape], int], there: Shape,
            here: Shape) -> tuple[str, float]:
    """Of ``times`` (kernel, ms measured at shape ``there``, fastest first), the kernel whose time scaled from
    ``there`` to ``here`` is least, and that time; a tie goes to the earlier one."""
    best, best_ms = None, 0.0
    for kernel, ms in times:
        predicted = scaled_ms(ms, work(kernel, there), work(kernel, here))
        if best is None or predicted < best_ms:
            best, best_ms = kernel, predicted
    if best is None:
        raise ValueError("no kernel was measured at the tuned shape")
    return best, best_ms
