"""Measurements -> a per-shape selection table, and how good its picks are.

Like cuBLAS's heuristics, the table maps a GEMM shape to one config: the best
tuned config of the nearest tuned shape (distance in log m, log n, log k; a tie
goes to the larger problem). Its quality is measured, not assumed: each tuned
shape is held out in turn, the table built from the others picks a config for
it, and that pick's measured time there is compared with the tuned best there.
"""

from __future__ import annotations

import dataclasses
import math

from autotune.db import ResultStore
from autotune.problem import GemmProblem


@dataclasses.dataclass(frozen=True)
class Entry:
    """The best tuned config of one shape."""

    problem: GemmProblem
    family: str
    config_name: str
    params: dict[str, int]
    ms: float
    cublas_ms: float | None


@dataclasses.dataclass(frozen=True)
class HeldOut:
    """The pick for a tuned shape by the table built without it."""

    problem: GemmProblem
    picked_from: GemmProblem | None
    config_name: str | None
    fraction_of_best: float | None  # best ms / pick ms there; None when the pick was not measured there


@dataclasses.dataclass(frozen=True)
class SelectionTable:
    entries: tuple[Entry, ...]

    def pick(self, problem: GemmProblem, exclude: GemmProblem | None = None) -> Entry | None:
        """The entry of the tuned shape nearest to ``problem`` (skipping ``exclude``)."""
        candidates = [e for e in self.entries if e.problem != exclude and e.problem.dtype == problem.dtype]
        if not candidates:
            return None
        return nearest(candidates, (problem.m, problem.n, problem.k), lambda e: (e.problem.m, e.problem.n, e.problem.k))


def nearest(items, shape: tuple[int, int, int], shape_of):
    """The item whose tuned shape (``shape_of(item)``) is nearest to ``shape``: the least
    |log m - log m'| + |log n - log n'| + |log k - log k'| (rounded to 9 decimals), a tie going
    to the larger tuned shape, then to the earlier item. The one rule of every selection table."""

    def key(item):
        tuned = shape_of(item)
        distance = sum(abs(math.log(x) - math.log(y)) for x, y in zip(tuned, shape))
        return round(distance, 9), -tuned[0] * tuned[1] * tuned[2]

    return min(items, key=key)


def build(store: ResultStore, gpu_key: str, dtype: str) -> tuple[SelectionTable, dict[GemmProblem, dict[str, float]]]:
    """The table for ``gpu_key`` and ``dtype``, and every kernel's best time per tuned shape."""
    entries, times = [], {}
    for problem in store.problems(gpu_key, dtype):
        rows = store.best(gpu_key, problem, limit=100_000)
        if not rows:
            continue
        times[problem] = {row.config_name: row.median_ms for row in rows}
        best = rows[0]
        entries.append(Entry(problem, best.family, best.config_name, best.params, best.median_ms,
                             best.cublas_median_ms))
    return SelectionTable(tuple(entries)), times


def held_out(table: SelectionTable, times: dict[GemmProblem, dict[str, float]]) -> list[HeldOut]:
    """Leave-one-out: each tuned shape's pick from the rest, as a fraction of its tuned best."""
    report = []
    for entry in table.entries:
        pick = table.pick(entry.problem, exclude=entry.problem)
        if pick is None:
            report.append(HeldOut(entry.problem, None, None, None))
            continue
        measured = times[entry.problem].get(pick.config_name)
        fraction = entry.ms / measured if measured else None
        report.append(HeldOut(entry.problem, pick.problem, pick.config_name, fraction))
    return report
