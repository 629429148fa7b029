"""Racing: the stages at which a candidate's timing stops once it is clearly slower.

A search measures most candidates only to learn that they lose. Racing gives
each candidate a few timed launches, then more, and stops as soon as the median
so far is above a stage's limit, a margin over the best time known; a candidate
that passes every stage gets every launch. No GPU is needed to describe a race:
:func:`autotune.gpu.measure.time_launches` runs it in the GPU worker.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence


@dataclasses.dataclass(frozen=True)
class RaceStage:
    """Once ``launches`` timed launches have run, timing stops if their median is above ``limit_ms``."""

    launches: int
    limit_ms: float

    def __post_init__(self):
        if self.launches < 1:
            raise ValueError(f"a race stage comes after at least 1 launch, not {self.launches}")


def race_stages(best_ms: float, margins: Sequence[tuple[int, float]]) -> tuple[RaceStage, ...]:
    """Stages against a yardstick: ``(launches, margin)`` pairs become limits of ``margin x best_ms``."""
    return tuple(RaceStage(launches, best_ms * margin) for launches, margin in margins)


def lost_race(samples_ms: Sequence[float], race: Sequence[RaceStage]) -> bool:
    """Whether timing stopped at a stage of ``race``: as many samples as its launches, their median over its limit."""
    if not samples_ms:
        return False
    median = statistics.median(samples_ms)
    return any(len(samples_ms) == stage.launches and median > stage.limit_ms for stage in race)
