"""What a search minimises: time, energy, energy-delay product, or the time/energy front.

Timing a candidate costs milliseconds; an energy window costs about a second.
So every candidate is timed, and an energy window is measured only where it can
matter: energy per GEMM is power x time, and no kernel is assumed to draw less
than ``FLOOR_MARGIN`` x the lowest mean power seen in this run's windows (the
*power floor*). A candidate whose time x floor already loses to what is known
(the best energy, the best EDP, or a point of the front) is given that lower
bound as its energy, marked as estimated, and skips the window.
"""

from __future__ import annotations

import dataclasses

OBJECTIVES = ("time", "energy", "edp", "pareto")
FLOOR_MARGIN = 0.8


@dataclasses.dataclass(frozen=True)
class Point:
    """A measured candidate: time per GEMM (ms) and energy per GEMM (mJ)."""

    ms: float
    mj: float


class Objective:
    """Base: tracks the power floor and the measured points; subclasses say what is better."""

    name = "time"
    directions: tuple[str, ...] = ("minimize",)
    uses_energy = False

    def __init__(self):
        self.points: list[Point] = []
        self.lowest_power_w: float | None = None

    def observe(self, ms: float, mj: float | None, power_w: float | None) -> None:
        """Record a measured candidate (``mj``/``power_w`` None when it had no window)."""
        if power_w is not None and power_w > 0:
            self.lowest_power_w = power_w if self.lowest_power_w is None else min(self.lowest_power_w, power_w)
        if mj is not None:
            self.points.append(Point(ms, mj))

    def floor_mj(self, ms: float) -> float | None:
        """The least energy a kernel taking ``ms`` can use, by the power floor (None before any window)."""
        if self.lowest_power_w is None:
            return None
        return ms * self.lowest_power_w * FLOOR_MARGIN  # ms x W = mJ

    def wants_window(self, ms: float) -> bool:
        """Whether a candidate taking ``ms`` could improve the objective, so its energy is worth measuring."""
        return False

    def values(self, ms: float, mj: float | None) -> tuple[float, ...]:
        """The values Optuna is told; ``mj`` None means use the lower bound."""
        return (ms,)

    def _energy(self, ms: float, mj: float | None) -> float:
        if mj is not None:
            return mj
        bound = self.floor_mj(ms)
        if bound is None:
            raise ValueError("no energy window measured yet: the power floor is unknown")
        return bound


class TimeObjective(Objective):
    pass


class EnergyObjective(Objective):
    name = "energy"
    uses_energy = True

    def wants_window(self, ms: float) -> bool:
        floor = self.floor_mj(ms)
        return floor is None or not self.points or floor < min(p.mj for p in self.points)

    def values(self, ms: float, mj: float | None) -> tuple[float, ...]:
        return (self._energy(ms, mj),)


class EdpObjective(Objective):
    name = "edp"
    uses_energy = True

    def wants_window(self, ms: float) -> bool:
        floor = self.floor_mj(ms)
        return floor is None or not self.points or floor * ms < min(p.mj * p.ms for p in self.points)

    def values(self, ms: float, mj: float | None) -> tuple[float, ...]:
        return (self._energy(ms, mj) * ms,)


class ParetoObjective(Objective):
    name = "pareto"
    directions = ("minimize", "minimize")
    uses_energy = True

    def wants_window(self, ms: float) -> bool:
        floor = self.floor_mj(ms)
        return floor is None or not any(_dominates(p, Point(ms, floor)) for p in self.points)

    def values(self, ms: float, mj: float | None) -> tuple[float, ...]:
        return (ms, self._energy(ms, mj))


def _dominates(a: Point, b: Point) -> bool:
    return a.ms <= b.ms and a.mj <= b.mj and (a.ms < b.ms or a.mj < b.mj)


def pareto_front(points: list[Point]) -> list[Point]:
    """The points no other point dominates, fastest first."""
    front = [p for p in points if not any(_dominates(q, p) for q in points)]
    return sorted(set(front), key=lambda p: (p.ms, p.mj))


def make_objective(name: str) -> Objective:
    """The objective called ``name`` (one of OBJECTIVES)."""
    from autotune.errors import InputError

    classes = {cls.name: cls for cls in (TimeObjective, EnergyObjective, EdpObjective, ParetoObjective)}
    if name not in classes:
        raise InputError("--objective", name, ", ".join(OBJECTIVES))
    return classes[name]()
