"""The knobs of a search and of a sweep (plain values: the command line reads them without loading the search)."""

from __future__ import annotations

import dataclasses

from autotune.problem import GemmProblem

SWEEP_TRIALS = 24  # GPU evaluations per shape of a sweep
SWEEP_TOP = 4  # configs per shape a sweep measures at every other shape
WARM_NEIGHBOURS = 2  # tuned shapes a sweep's search is warm-started from...
WARM_PER_NEIGHBOUR = 3  # ...and configs taken from each
SAMPLERS = ("tpe", "random", "genetic")  # what proposes configs after the opening: TPE over feasible configs,
                                         # uniform draws, or children bred from the measured configs


@dataclasses.dataclass(frozen=True)
class SearchSettings:
    """Knobs of the search itself (not of the kernels)."""

    trials: int = 100  # GPU evaluations in the study, counting earlier runs and other processes
    timeout_s: float | None = None  # wall-clock limit of this run
    seed: int = 0
    warmup: int = 5
    repeats: int = 20
    jobs: int | None = None  # compile processes
    max_compile_errors: int = 24  # stop when this many candidates in a row failed to compile and none compiled
    objective: str = "time"  # time, energy, edp or pareto (autotune.search.objective)
    energy_seconds: float = 1.0  # length of an energy window
    race: bool = True  # stop timing clearly slower candidates early (time objective only)
    sampler: str = "tpe"  # after the opening: TPE, random feasible configs, or bred ones (SAMPLERS)
    heartbeat_s: int = 5  # running trials beat this often...
    grace_s: int = 20  # ...and are failed as stale this long after their last beat


@dataclasses.dataclass(frozen=True)
class SweepSettings:
    """Knobs of a sweep. ``search`` holds those of each shape's search (its ``trials`` and
    ``timeout_s`` are set per shape from ``trials`` and what is left of ``timeout_s``)."""

    trials: int = SWEEP_TRIALS
    top: int = SWEEP_TOP  # 0: no cross measurement
    neighbours: int = WARM_NEIGHBOURS
    per_neighbour: int = WARM_PER_NEIGHBOUR
    timeout_s: float | None = None  # wall-clock limit of this run
    cross_from: tuple[GemmProblem, ...] = ()  # the shapes whose best configs are cross-measured (default: the swept)
    search: SearchSettings = dataclasses.field(default_factory=SearchSettings)
