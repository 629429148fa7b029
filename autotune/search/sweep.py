"""The sweep: a search per shape in one process, then the best kernels measured across the shapes.

    for each shape: warm start from the nearest tuned shapes -> search (its own study)
    then: the best T configs of every shape -> verified and timed at every other shape

* One GPU worker and one compile pool serve every shape (starting them costs seconds).
* Each shape's study is the one ``autotune search`` would use for that shape, so
  ``search``, ``query`` and ``table`` see the results as usual; a rerun skips the shapes
  whose study has its trials and finishes the one that was cut short.
* Warm start: before a shape's search, the best configs of the nearest already-tuned
  shapes in the database (same GPU, dtype and family; nearest as in
  :func:`autotune.shapes.nearest`) are tried first, where the static rules admit them.
* Measuring only: with ``cross_from`` (shapes tuned earlier) the swept shapes are not searched: each gets
  cuBLAS's time (unless one is stored), then the cross measurement, so a held-out set is judged without
  being tuned on.
* Cross measurement: the best ``top`` distinct configs of every swept shape (or of the
  shapes of ``cross_from``, tuned earlier) are verified and timed at every swept shape
  where they are feasible and have no result yet (no Optuna trials), and stored as
  ordinary measurements, so a table can compare every kernel at every shape. A cubin does
  not depend on the shape: each config is compiled once. A config whose first timed
  launches take over CROSS_RACE_MARGINS' 1.5x the best time known at the shape
  stops timing there, as a raced search candidate does: it would not be that shape's pick.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import time
from collections.abc import Callable, Sequence

from sqlalchemy import select

from autotune.errors import InputError
from autotune.gpu.race import race_stages
from autotune.gpu.worker import GpuWorker
from autotune.gpu_specs import GpuSpec
from autotune.kernel.build import compile_result, finish_build
from autotune.kernel.compile import CompiledKernel, CompileFailure, CompilePool
from autotune.kernel.render import render
from autotune.problem import GemmProblem
from autotune.records import Failure, Measurement
from autotune.results import ResultStore
from autotune.results.models import Environment, Kernel, Problem
from autotune.results.models import Failure as FailureRow
from autotune.results.models import Measurement as MeasurementRow
from autotune.results.rows import problem_fields
from autotune.search.evaluate import Measuring, Recorder, run_candidate, run_cublas
from autotune.search.search import Search, study_name
from autotune.search.settings import WARM_NEIGHBOURS, WARM_PER_NEIGHBOUR, SweepSettings
from autotune.search.study import StudyView, optuna_storage, trial_ms, trial_params
from autotune.shapes import nearest
from autotune.space.family import Config, SearchSpace

CROSS = "cross"  # the study label of cross measurements: "<the shape's study>/cross"
CROSS_RACE_MARGINS = ((3, 1.5),)  # a cross candidate whose first 3 launches are 1.5x a shape's best stops timing
CUBLAS_MS_UNKNOWN = 10.0  # the cuBLAS time a cross candidate's timeout assumes where none is stored


@dataclasses.dataclass
class SweepProgress:
    """What the sweep's progress line shows. ``evaluated`` and ``target`` count GPU evaluations of the
    whole sweep (searches' trials, earlier runs' included, then cross measurements, once known);
    ``measured_now`` those of this run, whose pace gives the ETA."""

    shapes_done: int
    shapes_total: int
    evaluated: int
    target: int
    measured_now: int = 0
    elapsed_s: float = 0.0
    phase: str = ""  # the shape being searched, or "cross"

    @property
    def eta_s(self) -> float | None:
        """Seconds left at this run's pace so far; None before its first evaluation."""
        if self.measured_now == 0:
            return None
        return self.elapsed_s / self.measured_now * max(0, self.target - self.evaluated)


@dataclasses.dataclass(frozen=True)
class ShapeOutcome:
    """One shape's search: its study, and its best config against cuBLAS."""

    problem: GemmProblem
    study_name: str
    evaluated: int
    best_config: str | None
    best_ms: float | None
    cublas_ms: float | None
    warm_start: int  # warm-start configs offered to the search (0 for a shape done earlier)
    earlier: bool  # the study had its trials before this run: not searched again
    searched: bool = True  # False: measured only (``cross_from``): cuBLAS here, then the cross measurement

    @property
    def ratio(self) -> float | None:
        """cuBLAS time over the best time (above 1: faster than cuBLAS)."""
        return self.cublas_ms / self.best_ms if self.best_ms and self.cublas_ms else None


@dataclasses.dataclass(frozen=True)
class CrossOutcome:
    """The cross measurement: configs and (config, shape) pairs."""

    configs: int
    measured: int  # pairs measured in this run
    failed: int  # pairs that failed in this run (recorded as failures)
    earlier: int  # pairs with a result in the database already
    infeasible: int  # pairs the static rules reject


@dataclasses.dataclass(frozen=True)
class SweepResult:
    shapes: tuple[ShapeOutcome, ...]
    cross: CrossOutcome | None
    complete: bool  # False when the run stopped at its time limit


class Sweep:
    """Searches over ``problems`` one after another on one worker and one compile pool, then the
    cross measurement. ``on_progress`` gets a :class:`SweepProgress` after every GPU evaluation,
    ``on_shape`` each shape's :class:`ShapeOutcome`."""

    def __init__(self, space: SearchSpace, gpu: GpuSpec, problems: Sequence[GemmProblem], store: ResultStore,
                 worker: GpuWorker, pool: CompilePool, settings: SweepSettings,
                 on_progress: Callable[[SweepProgress], None] = lambda progress: None,
                 on_shape: Callable[[ShapeOutcome], None] = lambda outcome: None):
        self.space, self.gpu, self.problems = space, gpu, list(problems)
        self.store, self.worker, self.pool, self.settings = store, worker, pool, settings
        self.on_progress, self.on_shape = on_progress, on_shape
        self.names = {problem: study_name(space, gpu.key, problem) for problem in self.problems}
        self._storage = optuna_storage(store.url)
        self._started = time.monotonic()
        self._done: dict[GemmProblem, int] = {}  # evaluations per shape, as last seen
        self._best: dict[GemmProblem, float | None] = {}  # the best time of each shape's search
        self._trials = 0 if settings.cross_from else settings.trials  # per shape: none where only measured
        self._progress = SweepProgress(0, len(self.problems), 0, self._trials * len(self.problems))

    def run(self) -> SweepResult:
        self._started = time.monotonic()
        views = {problem: self._view(problem) for problem in self.problems}
        self._done = {problem: min(view.evaluated, self._trials) for problem, view in views.items()}
        self._progress.evaluated = sum(self._done.values())
        outcomes = []
        for position, problem in enumerate(self.problems):
            if self._time_left() == 0:
                return SweepResult(tuple(outcomes), None, complete=False)
            self._progress.phase = problem.shape
            outcome = (self._reference(problem) if self.settings.cross_from
                       else self._shape(problem, views[problem], self.settings.search.seed + position))
            outcomes.append(outcome)
            self._progress.shapes_done += 1
            self.on_shape(outcome)
            if outcome.evaluated < self._trials and self._time_left() == 0:  # cut short by the time limit
                return SweepResult(tuple(outcomes), None, complete=False)
        if self.settings.top == 0:
            return SweepResult(tuple(outcomes), None, complete=True)
        cross, complete = self._cross()
        return SweepResult(tuple(outcomes), cross, complete)

    # -- the searches ------------------------------------------------------------------

    def _shape(self, problem: GemmProblem, view: StudyView, seed: int) -> ShapeOutcome:
        """Search one shape, or report the search an earlier run finished. Each shape's search has
        a seed of its own, so that the shapes of one process do not all draw the same random configs."""
        if view.evaluated >= self.settings.trials:
            return self._earlier(problem, view)
        warm = warm_start_configs(self.store, self.space, self.gpu.key, problem, self.settings.neighbours,
                                  self.settings.per_neighbour)
        settings = dataclasses.replace(self.settings.search, trials=self.settings.trials, seed=seed,
                                       timeout_s=self._time_left(), objective="time")
        search = Search(self.space, self.gpu, problem, self.store, self.worker, settings,
                        on_progress=lambda progress: self._searched(problem, progress.evaluated),
                        pool=_SearchPool(self.pool), warm_start=warm)
        result = search.run()
        self._searched(problem, result.evaluated)
        best_ms = result.best.timing.median_ms if result.best else None
        return ShapeOutcome(problem, result.study_name, result.evaluated,
                            result.best_config.name if result.best_config else None, best_ms,
                            result.cublas.timing.median_ms, len(warm), earlier=False)

    def _reference(self, problem: GemmProblem) -> ShapeOutcome:
        """A shape measured, not searched: cuBLAS's stored time there, else cuBLAS measured and stored now."""
        cublas_ms = self.store.cublas_reference(self.gpu.key, problem)
        if cublas_ms is None:
            measurement = run_cublas(self.worker, Measuring.of(problem, self.settings.search))
            Recorder(self.store, self.worker.environment(), problem, f"{self.names[problem]}/{CROSS}").cublas(measurement)
            cublas_ms = measurement.timing.median_ms
        return ShapeOutcome(problem, self.names[problem], 0, None, None, cublas_ms, 0, earlier=False, searched=False)

    def _earlier(self, problem: GemmProblem, view: StudyView) -> ShapeOutcome:
        best = min(view.measured, key=trial_ms, default=None)
        return ShapeOutcome(problem, self.names[problem], view.evaluated,
                            best.user_attrs.get("config") if best else None, trial_ms(best) if best else None,
                            self.store.cublas_reference(self.gpu.key, problem), 0, earlier=True)

    def _searched(self, problem: GemmProblem, evaluated: int) -> None:
        """Progress after a search's event: new evaluations of this shape count for this run's pace."""
        evaluated = min(evaluated, self.settings.trials)
        new = evaluated - self._done[problem]
        if new <= 0:
            return
        self._done[problem] = evaluated
        self._progress.evaluated += new
        self._progress.measured_now += new
        self._report()

    def _report(self) -> None:
        self._progress.elapsed_s = time.monotonic() - self._started
        self.on_progress(self._progress)

    # -- the cross measurement --------------------------------------------------------------

    def _cross(self) -> tuple[CrossOutcome, bool]:
        """Measure the best configs of every shape at every shape where they have no result yet."""
        configs = self._top_configs()
        pairs, earlier, infeasible = [], 0, 0
        for problem in self.problems:
            measured = measured_configs(self.store, self.gpu.key, problem, self.space)
            for config in (self.space.build_for(config, self.gpu, problem) for config in configs):
                if not self.space.check(config, self.gpu, problem).feasible:
                    infeasible += 1
                elif config.name in measured:
                    earlier += 1
                else:
                    pairs.append((config, problem))
        self._progress.phase = CROSS
        self._progress.target += len(pairs)
        compiles = {config: self.pool.submit(render(self.space, config, self.gpu))
                    for config in dict.fromkeys(config for config, _ in pairs)}
        env = self.worker.environment()
        measured = failed = 0
        for config, problem in pairs:
            if self._time_left() == 0:
                for future in compiles.values():
                    future.cancel()
                return CrossOutcome(len(configs), measured, failed, earlier, infeasible), False
            outcome = self._measure(config, problem, compile_result(compiles[config]))
            Recorder(self.store, env, problem, f"{self.names[problem]}/{CROSS}").outcome(self.space, config, outcome)
            if isinstance(outcome, Failure):
                failed += 1
            else:
                measured += 1
            self._progress.evaluated += 1
            self._progress.measured_now += 1
            self._report()
        return CrossOutcome(len(configs), measured, failed, earlier, infeasible), True

    def _top_configs(self) -> list[Config]:
        """The ``top`` fastest distinct configs of each source shape's study (``cross_from``, else the
        swept shapes), in shape order, each once."""
        configs: list[Config] = []
        for problem in self.settings.cross_from or self.problems:
            names: set[str] = set()
            for trial in sorted(self._view(problem).measured, key=trial_ms):
                if len(names) == self.settings.top:
                    break
                config = self.space.config(trial_params(trial))
                names.add(config.name)
                if config not in configs:
                    configs.append(config)
        return configs

    def _measure(self, config: Config, problem: GemmProblem,
                 compiled: CompiledKernel | CompileFailure) -> Measurement | Failure:
        """Verify and time ``config`` at ``problem`` like a search candidate, racing it against the shape's best."""
        built = finish_build(self.space, config, compiled, self.gpu, problem)
        if isinstance(built, Failure):
            return built
        measuring = Measuring.of(problem, self.settings.search)
        task = measuring.task(built)
        best_ms = self._best_ms(problem)
        if best_ms is not None and self.settings.search.race:
            task = dataclasses.replace(task, race=race_stages(best_ms, CROSS_RACE_MARGINS))
        cublas_ms = self.store.cublas_reference(self.gpu.key, problem) or CUBLAS_MS_UNKNOWN
        return run_candidate(self.worker, task, measuring, cublas_ms)

    def _best_ms(self, problem: GemmProblem) -> float | None:
        """The best time the shape's search found (the cross measurement's racing yardstick)."""
        if problem not in self._best:
            best = min(self._view(problem).measured, key=trial_ms, default=None)
            self._best[problem] = None if best is None else trial_ms(best)
        return self._best[problem]

    # -- bookkeeping -------------------------------------------------------------------

    def _view(self, problem: GemmProblem) -> StudyView:
        """The shape's study as it is now (empty when there is none yet)."""
        name = self.names.get(problem) or study_name(self.space, self.gpu.key, problem)
        try:
            study_id = self._storage.get_study_id_from_name(name)
        except KeyError:
            return StudyView([], set(), lambda trial: trial)
        return StudyView(self._storage.get_all_trials(study_id, deepcopy=False), set(), lambda trial: trial)

    def _time_left(self) -> float | None:
        """Seconds left of ``timeout_s`` (0 when none), or None without a limit."""
        if self.settings.timeout_s is None:
            return None
        return max(0.0, self.settings.timeout_s - (time.monotonic() - self._started))


def warm_start_configs(store: ResultStore, space: SearchSpace, gpu_key: str, problem: GemmProblem,
                       neighbours: int = WARM_NEIGHBOURS, per_neighbour: int = WARM_PER_NEIGHBOUR) -> list[Config]:
    """The ``per_neighbour`` fastest configs of ``space``'s family at each of the ``neighbours`` shapes
    nearest to ``problem`` (:func:`autotune.shapes.nearest`) with results of that family on ``gpu_key``
    (same dtype, layout and scalars), nearest shape first, each config once. Configs the space
    no longer has (a knob value since removed) are left out."""
    shape = (problem.m, problem.n, problem.k)
    others = [p for p in store.problems(gpu_key, problem.dtype) if p != problem
              and (p.layout, p.alpha, p.beta) == (problem.layout, problem.alpha, problem.beta)]
    configs: list[Config] = []
    found = 0
    while others and found < neighbours:
        near = nearest(others, shape, lambda p: (p.m, p.n, p.k))
        others.remove(near)
        rows = [row for row in store.best(gpu_key, near, limit=1_000_000) if row.family == space.family]
        if not rows:
            continue
        found += 1
        for row in rows[:per_neighbour]:
            try:
                config = space.config(row.params)
            except InputError:
                continue
            if config not in configs:
                configs.append(config)
    return configs


def measured_configs(store: ResultStore, gpu_key: str, problem: GemmProblem, space: SearchSpace) -> set[str]:
    """Names of ``space``'s kernels (its current template) with a measurement or a failure recorded for
    exactly ``problem`` on ``gpu_key``."""
    names: set[str] = set()
    for table in (MeasurementRow, FailureRow):
        query = (
            select(Kernel.name).distinct()
            .join(table, table.kernel_id == Kernel.id)
            .join(Environment, table.environment_id == Environment.id)
            .join(Problem, table.problem_id == Problem.id)
            .where(Environment.gpu_key == gpu_key, Kernel.family == space.family,
                   Kernel.template_hash == space.template_hash,
                   *(getattr(Problem, name) == value for name, value in problem_fields(problem).items()))
        )
        with store.session() as session:
            names.update(session.scalars(query))
    return names


class _SearchPool:
    """The sweep's compile pool as one shape's search sees it: closing it cancels that search's
    compiles not started yet, and leaves the pool running for the next shape."""

    stops_unfinished = False  # compiles running at a search's end finish, delaying the next shape's

    def __init__(self, pool: CompilePool):
        self._pool = pool
        self._futures: list[concurrent.futures.Future] = []

    @property
    def jobs(self) -> int:
        return self._pool.jobs

    def warm_up(self) -> None:
        """Nothing to do: the sweep's pool is warm."""

    def submit(self, source, arch: str | None = None) -> concurrent.futures.Future:
        future = self._pool.submit(source, arch)
        self._futures.append(future)
        return future

    def close(self, wait: bool = True) -> None:
        for future in self._futures:
            future.cancel()
