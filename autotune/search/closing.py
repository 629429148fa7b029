"""A search's closing measurement: the best config and cuBLAS measured again, side by side, for the
reported ratio (and, with an energy objective, their energy windows).

Measuring them alternately, FINAL_ROUNDS times, lets heat and power capping weigh on both
alike; each side's launches are pooled into one measurement. The best config never races here.
"""

from __future__ import annotations

import dataclasses

from autotune.errors import SearchError
from autotune.gpu.tasks import KernelTask
from autotune.gpu.worker import GpuWorker
from autotune.gpu_specs import GpuSpec
from autotune.kernel.build import build_kernel
from autotune.records import EnergyWindow, Failure, Measurement
from autotune.search.evaluate import Measuring, Recorder, energy_window, pooled, run_candidate, run_cublas
from autotune.search.objective import Objective, Point, pareto_front
from autotune.search.standing import Standing
from autotune.search.study import StudyView, trial_ms, trial_params
from autotune.space.family import Config, SearchSpace

FINAL_ROUNDS = 3  # the closing measurement alternates cuBLAS and the best config this many times


@dataclasses.dataclass(frozen=True)
class FrontPoint:
    """A config on the time/energy front, with what its energy window saw."""

    config_name: str
    ms: float
    mj: float
    window: EnergyWindow


@dataclasses.dataclass(frozen=True)
class Closing:
    """The best config and cuBLAS, measured again side by side."""

    config: Config
    best: Measurement
    cublas: Measurement
    best_window: EnergyWindow | None = None  # energy objectives
    cublas_window: EnergyWindow | None = None
    front: tuple[FrontPoint, ...] = ()  # pareto: every measured point of the front


class ClosingMeasurement:
    """Measures the study's best config against cuBLAS on one worker and stores both."""

    def __init__(self, space: SearchSpace, gpu: GpuSpec, measuring: Measuring, standing: Standing,
                 recorder: Recorder):
        self.space, self.gpu, self.measuring, self.standing, self.recorder = space, gpu, measuring, standing, recorder

    @property
    def objective(self) -> Objective:
        return self.standing.objective

    def run(self, view: StudyView, worker: GpuWorker) -> Closing:
        """Measure the study's best config (:meth:`best_trial`) and cuBLAS again; ``view`` holds a measured trial."""
        config = self.space.config(trial_params(self.best_trial(view)))
        task = self._task(config)
        cublas_runs, kernel_runs = [], []
        for _ in range(FINAL_ROUNDS):  # alternated, so heat and power capping weigh on both alike
            cublas_runs.append(run_cublas(worker, self.measuring))
            run = run_candidate(worker, task, self.measuring, cublas_runs[-1].timing.median_ms)
            if isinstance(run, Failure):
                raise SearchError(f"the best config {config.name} failed when measured again: {run.message}")
            kernel_runs.append(run)
        problem = self.measuring.problem
        cublas, best = pooled(problem, cublas_runs), pooled(problem, kernel_runs)
        cublas_id = self.recorder.cublas(cublas)
        measurement_id = self.recorder.measurement(self.space, config, best)
        if not self.objective.uses_energy:
            return Closing(config, best, cublas, front=self._front(view))
        cublas_window = self._window(worker, None, "cuBLAS")
        self.recorder.energy(cublas_id, cublas_window)
        best_window = self._window(worker, task, config.name)
        self.recorder.energy(measurement_id, best_window)
        return Closing(config, best, cublas, best_window, cublas_window, self._front(view))

    def best_trial(self, view: StudyView):
        """The trial to report: the fastest for time and pareto, the least objective value otherwise."""
        if self.objective.name in ("time", "pareto"):
            return min(view.measured, key=trial_ms)
        return min(view.measured, key=lambda t: t.values[0])

    def _task(self, config: Config) -> KernelTask:
        """The best config's task: kept from this run, or built here (from the compile cache, mostly)."""
        kept = self.standing.best_task
        if kept is not None and kept[0] == config.name:
            return kept[1]
        built = build_kernel(self.space, config, self.gpu, self.measuring.problem)
        if isinstance(built, Failure):
            raise SearchError(f"the best config {config.name} failed when measured again: {built.message}")
        return self.measuring.task(built)

    def _window(self, worker: GpuWorker, task: KernelTask | None, what: str) -> EnergyWindow:
        window = energy_window(worker, self.measuring, task)
        if isinstance(window, Failure):
            raise SearchError(f"energy window of {what} failed: {window.failure_class}: {window.message}")
        return window

    def _front(self, view: StudyView) -> tuple[FrontPoint, ...]:
        """Measured points on the time/energy front (pareto), from this run's windows."""
        if self.objective.name != "pareto":
            return ()
        windows = self.standing.windows
        metered = [t for t in view.measured if "energy_mj" in t.user_attrs]
        points = {Point(trial_ms(t), t.user_attrs["energy_mj"]): t.user_attrs["config"] for t in metered}
        return tuple(FrontPoint(points[p], p.ms, p.mj, windows[points[p]])
                     for p in pareto_front(list(points)) if points[p] in windows)
