"""Where a search stands: what its loop, its recording and its GPU lanes' threads share.

The best time in the study (other processes' included) is racing's yardstick; the objective
decides which candidates get an energy window. The lanes' threads read both, so they
change under :attr:`Standing.lock`.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence

from autotune.gpu.race import RaceStage, race_stages
from autotune.gpu.tasks import KernelTask
from autotune.records import EnergyWindow, Measurement
from autotune.search.objective import Objective
from autotune.search.study import StudyView, trial_ms


class Standing:
    """What a search has learned so far, this run and, through the study, other processes."""

    def __init__(self, objective: Objective):
        self.objective = objective
        self.lock = threading.Lock()  # the objective and the best time
        self.best: tuple[float, str] | None = None  # (ms, config name): the fastest in the study
        self.best_task: tuple[str, KernelTask] | None = None  # (config name, task) of this run's fastest candidate
        self.cublas: Measurement | None = None  # the reference of the first GPU
        self.cublas_window: EnergyWindow | None = None
        self.windows: dict[str, EnergyWindow] = {}  # config name -> its energy window, this run
        self.failures: dict[str, int] = {}  # failure class -> candidates of this run
        self.raced = 0  # candidates of this run whose timing stopped early

    def count_failure(self, failure_class: str) -> None:
        self.failures[failure_class] = self.failures.get(failure_class, 0) + 1

    def learn(self, view: StudyView) -> None:
        """Take the best time in the study, other processes' included."""
        fastest = min(view.measured, key=trial_ms, default=None)
        if fastest is None:
            return
        with self.lock:
            if self.best is None or trial_ms(fastest) < self.best[0]:
                self.best = (trial_ms(fastest), fastest.user_attrs.get("config"))

    def race(self, margins: Sequence[tuple[int, float]]) -> tuple[RaceStage, ...]:
        """The stages a candidate races through now: none before the first result."""
        with self.lock:
            return () if self.best is None else race_stages(self.best[0], margins)

    def wants_window(self, ms: float) -> bool:
        """Whether a candidate of ``ms`` could improve the objective with its energy measured."""
        with self.lock:
            return self.objective.wants_window(ms)

    def observe_cublas(self, ms: float, power_w: float) -> None:
        """cuBLAS's time and power: the objective's power floor."""
        with self.lock:
            self.objective.observe(ms, None, power_w)

    def measured(self, name: str, task: KernelTask, ms: float, mj: float | None, power_w: float | None,
                 warmup: int) -> tuple[float, ...]:
        """Take a candidate's measurement (its energy where metered); its objective values. The
        fastest of this run keeps its task, unraced and with a full warm-up, for the closing measurement."""
        with self.lock:
            if mj is not None:
                self.objective.observe(ms, mj, power_w)
            values = self.objective.values(ms, mj)
            if self.best is None or ms < self.best[0]:
                self.best = (ms, name)
                self.best_task = (name, dataclasses.replace(task, race=(), warmup=warmup))
        return values
