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
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

Shape = tuple[int, int, int]
def scaled_ms(ms: float, work_there: int, work_here: int) -> float:
    """A time measured where the busiest SM did ``work_there``, carried to where it does ``work_here``
    (computed as ``ms * work_here / work_there``, left to right, as the C library does)."""
    return ms * work_here / work_there


def fastest(times: Iterable[tuple[str, float]], work: Callable[[str, Shape], int], there: Shape, here: Shape) -> str:
    """Of ``times`` (kernel, ms measured at shape ``there``, fastest first), the kernel whose time scaled from
    ``there`` to ``here`` is least; a tie goes to the earlier one."""
    best, best_ms = None, 0.0
    for kernel, ms in times:
        predicted = scaled_ms(ms, work(kernel, there), work(kernel, here))
        if best is None or predicted < best_ms:
            best, best_ms = kernel, predicted
    if best is None:
        raise ValueError("no kernel was measured at the tuned shape")
    return best
