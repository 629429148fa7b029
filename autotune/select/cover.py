"""Choose a few kernels that serve many shapes: greedy cover of a time matrix.

Input is ``times[shape][config]``, the measured milliseconds of configs at
shapes, with gaps (not every config is measured everywhere). A shape's score
under a set of chosen configs is (best time measured at the shape) / (time of
the fastest chosen config measured there), 0 where none of them was measured.
The greedy cover starts from nothing and keeps adding the config that most
raises the geometric mean of the scores over all shapes, until ``max_kernels``
are chosen or no config raises it. A chosen config that ends up no shape's
fastest (later choices beat it everywhere it was measured) changes no score:
it is dropped, and its place is offered again.

While a shape scores 0 the geometric mean is 0 for every choice; the cover
compares choices as the limit of the geometric mean with a tiny score for
uncovered shapes: fewer uncovered shapes first, then the product of the
covered shapes' scores. So every shape that any config was measured at gets a
measured kernel before the speed of covered shapes is improved (the cap
permitting). Shapes and configs are taken in sorted order and a tie goes to
the config whose name sorts first, so the same matrix gives the same cover.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING

from autotune.errors import InputError

if TYPE_CHECKING:  # numpy loads when a cover is chosen: the command line reads MAX_KERNELS at every start
    import numpy as np

MAX_KERNELS = 16
DECIMALS = 9  # log-score sums are compared rounded, so float noise cannot break a tie differently


@dataclasses.dataclass(frozen=True)
class Cover:
    """The chosen configs (in the order they were chosen) and each shape's rule.

    ``rules[shape]`` is the fastest chosen config measured at ``shape``, or None
    where no chosen config was measured there.
    """

    kernels: tuple[str, ...]
    rules: dict[Hashable, str | None]
    geomean: float  # of best / rule time over the shapes, 0 while a shape has no rule

    def served(self, kernel: str) -> int:
        """How many shapes have ``kernel`` as their rule."""
        return sum(1 for rule in self.rules.values() if rule == kernel)


def choose(times: Mapping[Hashable, Mapping[str, float]], max_kernels: int = MAX_KERNELS,
           floors: Mapping[Hashable, float] | None = None) -> Cover:
    """The greedy cover of ``times[shape][config]`` (milliseconds) with at most ``max_kernels`` configs.
    ``floors[shape]`` (in (0, 1]) is a shape's score before any config is chosen: what it scores where none of
    them runs (another library's time there, say); such a shape is never uncovered."""
    if not isinstance(max_kernels, int) or max_kernels < 1:
        raise InputError("--max-kernels", max_kernels, "an integer >= 1")
    shapes = sorted(times, key=repr)
    configs = sorted({config for row in times.values() for config in row})
    if not shapes or not configs:
        return Cover((), {shape: None for shape in shapes}, 0.0)
    import numpy as np

    matrix = np.full((len(shapes), len(configs)), np.nan)
    column = {config: j for j, config in enumerate(configs)}
    for i, shape in enumerate(shapes):
        for config, ms in times[shape].items():
            matrix[i, column[config]] = ms
    with np.errstate(invalid="ignore", divide="ignore"):
        scores = np.nan_to_num(np.fmin.reduce(matrix, axis=1, keepdims=True) / matrix, nan=0.0)  # shape x config, 0: gap

    chosen: list[int] = []
    floors = floors or {}
    current = np.array([min(1.0, max(0.0, floors.get(shape, 0.0))) for shape in shapes])  # each shape's score
    best_key = _key(current)
    while True:
        if len(chosen) < max_kernels:
            candidate = np.maximum(current[:, None], scores)  # each shape's score if that config were added
            covered = (candidate > 0).sum(axis=0)
            logs = np.where(candidate > 0, np.log(np.where(candidate > 0, candidate, 1.0)), 0.0).sum(axis=0)
            logs = np.round(logs, DECIMALS)
            pick = int(np.lexsort((-logs, -covered))[0])  # stable: equal keys keep name order
            key = (int(covered[pick]), float(logs[pick]))
            if key > best_key:
                chosen.append(pick)
                current, best_key = candidate[:, pick], key
                continue
        used = set(_rules(matrix, scores, chosen, configs).values()) - {None}
        if len(used) == len(chosen):
            break
        chosen = [j for j in chosen if j in used]  # no shape's fastest: dropping it changes no score, frees a place

    rules = {shapes[i]: None if j is None else configs[j]
             for i, j in _rules(matrix, scores, chosen, configs).items()}
    geomean = float(np.exp(np.log(current).mean())) if current.all() else 0.0
    return Cover(tuple(configs[j] for j in chosen), rules, geomean)


def _rules(matrix: np.ndarray, scores: np.ndarray, chosen: list[int], configs: list[str]) -> dict[int, int | None]:
    """Each shape's (row's) fastest chosen config (column), ties to the name that sorts first; None: none measured."""
    rules = {}
    for i in range(matrix.shape[0]):
        measured = [j for j in chosen if scores[i, j] > 0]
        rules[i] = min(measured, key=lambda j: (matrix[i, j], configs[j])) if measured else None
    return rules


def _key(scores: np.ndarray) -> tuple[int, float]:
    import numpy as np

    covered = scores > 0
    return int(covered.sum()), float(np.round(np.log(scores[covered]).sum(), DECIMALS))
