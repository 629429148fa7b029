"""The search: Optuna asks for configs, the pipeline evaluates them, Optuna is told.

space -> check (static rules) -> render -> compile (parallel CPU pool) ->
check resources -> GPU worker (verify, time) -> record -> tell.

* Statically rejected configs, resource rejections and compile errors never
  reach the GPU and do not use up the trial budget (``--trials`` counts GPU
  evaluations). They are stored as failures with their reason.
* A config already evaluated in the study is answered from its earlier result.
* The study lives in the results database (Optuna's own tables), so running
  the same search again resumes it until the budget is reached.
* With an energy objective (``energy``, ``edp``, ``pareto``) cuBLAS and the
  candidates that could improve the objective also get an NVML energy window
  of about a second; :mod:`autotune.objective` says how that is decided.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import time
from collections.abc import Callable

import optuna

from autotune.check import resource_violation
from autotune.compile import CompiledKernel, CompileFailure, CompilePool
from autotune.cubin import parameter_sizes
from autotune.db import ResultStore
from autotune.errors import FailureClass, SearchError
from autotune.gpus import GpuSpec
from autotune.objective import Objective, Point, make_objective, pareto_front
from autotune.problem import GemmProblem
from autotune.records import EnergyWindow, Environment, Failure, Measurement, Timing
from autotune.render import render
from autotune.space import Config, SearchSpace
from autotune.worker import CublasTask, EnergyTask, GpuWorker, KernelTask, argument_bytes

STAGE = "stage"  # trial user attribute: "rejected", "compile" or "gpu"
FINAL_ROUNDS = 3  # the closing measurement alternates cuBLAS and the best config this many times


@dataclasses.dataclass(frozen=True)
class SearchSettings:
    """Knobs of the search itself (not of the kernels)."""

    trials: int = 100  # GPU evaluations in the study, counting earlier runs
    timeout_s: float | None = None  # wall-clock limit of this run
    seed: int = 0
    warmup: int = 5
    repeats: int = 30
    jobs: int | None = None  # compile processes
    max_asks_per_trial: int = 50  # give up when the sampler keeps proposing infeasible configs
    max_compile_errors: int = 24  # stop when this many candidates in a row failed to compile and none compiled
    objective: str = "time"  # time, energy, edp or pareto (autotune.objective)
    energy_seconds: float = 1.0  # length of an energy window


@dataclasses.dataclass
class Progress:
    """What the progress display shows."""

    evaluated: int
    target: int
    best_ms: float | None
    best_name: str | None
    cublas_ms: float
    problem: GemmProblem
    last: str = ""
    best_mj: float | None = None  # the least measured energy per GEMM (energy objectives)
    cublas_mj: float | None = None
    front: int = 0  # points on the time/energy front (pareto)


@dataclasses.dataclass(frozen=True)
class FrontPoint:
    """A config on the time/energy front, with what its energy window saw."""

    config_name: str
    ms: float
    mj: float
    window: EnergyWindow


@dataclasses.dataclass(frozen=True)
class SearchResult:
    study_name: str
    evaluated: int
    best_config: Config | None
    best: Measurement | None
    cublas: Measurement
    failures: dict[str, int]
    objective: str = "time"
    best_window: EnergyWindow | None = None  # energy objectives: the closing windows
    cublas_window: EnergyWindow | None = None
    front: tuple[FrontPoint, ...] = ()  # pareto: every measured point of the front


def study_name(space: SearchSpace, env: Environment, problem: GemmProblem, objective: str = "time") -> str:
    """One study per family, GPU, problem, template version and objective."""
    name = (
        f"{space.family}/{env.gpu_key}/{problem.shape}/{problem.dtype}/"
        f"alpha{problem.alpha:g}/beta{problem.beta:g}/{space.template_hash}"
    )
    return name if objective == "time" else f"{name}/{objective}"


class Search:
    """One Optuna study over one space, GPU and problem."""

    def __init__(
        self,
        space: SearchSpace,
        gpu: GpuSpec,
        problem: GemmProblem,
        store: ResultStore,
        worker: GpuWorker,
        settings: SearchSettings,
        on_progress: Callable[[Progress], None] = lambda progress: None,
    ):
        self.space, self.gpu, self.problem = space, gpu, problem
        self.store, self.worker, self.settings = store, worker, settings
        self.on_progress = on_progress
        self.env = worker.environment()
        self.objective: Objective = make_objective(settings.objective)
        self.name = study_name(space, self.env, problem, settings.objective)
        self.windows: dict[str, EnergyWindow] = {}  # config name -> its energy window, this run
        self.distributions = {
            knob: optuna.distributions.CategoricalDistribution(values) for knob, values in space.knobs.items()
        }
        self.failures: dict[str, int] = {}
        self.compiled_any = False

    # -- the loop --------------------------------------------------------------

    def run(self) -> SearchResult:
        started = time.monotonic()
        cublas, cublas_window = self._reference()
        study = self._study()
        known = self._known_results(study)
        evaluated = sum(1 for t in study.get_trials(deepcopy=False) if t.user_attrs.get(STAGE) == "gpu")
        progress = Progress(evaluated, self.settings.trials, None, None, cublas.timing.median_ms, self.problem,
                            cublas_mj=_mj(cublas_window))
        self._update_best(study, progress)
        self.on_progress(progress)
        asks = 0
        max_asks = self.settings.max_asks_per_trial * max(self.settings.trials, 1)
        with CompilePool(self.settings.jobs) as pool:
            while progress.evaluated < self.settings.trials and asks < max_asks:
                if self._out_of_time(started):
                    break
                wanted = min(pool.jobs * 2, self.settings.trials - progress.evaluated)
                batch, asked = self._ask_batch(study, known, wanted, max_asks - asks)
                asks += asked
                if not batch:
                    if asked == 0:
                        break
                    continue
                futures = [(trial, config, pool.submit(render(self.space, config, self.gpu)))
                           for trial, config in batch]
                for trial, config, future in futures:
                    compiled = _compiled(future)
                    task = self._kernel_task(config, compiled)
                    outcome = task if isinstance(task, Failure) else self.worker.run(
                        task, timeout_s=self._candidate_timeout(cublas))
                    self._tell(study, trial, config, outcome, known, task)
                    self._check_template_compiles(compiled)
                    if isinstance(outcome, Measurement) or _reached_gpu(outcome):
                        progress.evaluated += 1
                    progress.last = config.name
                    self._note(progress, config, outcome)
                    self.on_progress(progress)
            return self._result(study, progress, pool, cublas, cublas_window)

    def _ask_batch(self, study, known, wanted: int, ask_budget: int):
        """Ask until ``wanted`` new feasible configs; rejected and repeated ones are told at once."""
        batch: list[tuple[optuna.trial.Trial, Config]] = []
        names: set[str] = set()
        asked = 0
        while len(batch) < wanted and asked < ask_budget:
            trial = study.ask(self.distributions)
            asked += 1
            config = self.space.config(trial.params)
            if config.name in known:
                self._repeat(study, trial, known[config.name])
                continue
            if config.name in names:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                continue
            verdict = self.space.check(config, self.gpu, self.problem)
            if not verdict.feasible:
                failure = Failure(FailureClass.REJECTED.value, verdict.reason)
                self._tell(study, trial, config, failure, known)
                continue
            names.add(config.name)
            batch.append((trial, config))
        return batch, asked

    # -- one candidate -----------------------------------------------------------

    def _check_template_compiles(self, compiled: CompiledKernel | CompileFailure) -> None:
        """Stop a search whose template has compiled for no candidate yet, naming NVRTC's error."""
        if not isinstance(compiled, CompileFailure):
            self.compiled_any = True
            return
        failed = self.failures.get(FailureClass.COMPILE_ERROR.value, 0)  # all of them, while none compiled
        if not self.compiled_any and failed >= self.settings.max_compile_errors:
            raise SearchError(
                f"{self.space.template} does not compile with NVRTC {self.env.nvrtc} for "
                f"{self.space.target(self.gpu)}: {failed} candidates in a row failed, the last with: "
                f"{compiled.message}")

    def _kernel_task(self, config: Config, compiled) -> KernelTask | Failure:
        return kernel_task(self.space, config, compiled, self.gpu, self.problem, self.settings.seed,
                           self.settings.warmup, self.settings.repeats)

    def _candidate_timeout(self, cublas: Measurement) -> float:
        """Generous for a kernel 50x slower than cuBLAS, short enough to catch a hang."""
        launches = self.settings.warmup + self.settings.repeats + 4
        return 15.0 + 50.0 * launches * cublas.timing.median_ms / 1e3

    def _energy_window(self, kernel: KernelTask | None) -> EnergyWindow | Failure:
        task = EnergyTask(kernel, self.problem, self.settings.seed, self.settings.energy_seconds)
        return self.worker.run(task, timeout_s=60.0 + 10.0 * self.settings.energy_seconds)

    def _reference(self) -> tuple[Measurement, EnergyWindow | None]:
        """cuBLAS timed (and, for energy objectives, metered) in this run."""
        return self._record_reference(self._run_cublas())

    def _run_cublas(self) -> Measurement:
        task = CublasTask(self.problem, self.settings.seed, self.settings.warmup, self.settings.repeats)
        result = self.worker.run(task, timeout_s=300.0)
        if isinstance(result, Failure):
            raise SearchError(f"cuBLAS reference failed: {result.failure_class}: {result.message}")
        return result

    def _record_reference(self, result: Measurement) -> tuple[Measurement, EnergyWindow | None]:
        """Store a cuBLAS measurement and, for energy objectives, meter cuBLAS."""
        measurement_id = self.store.add_measurement(self.env, self.problem, None, None, result, self.name)
        if not self.objective.uses_energy:
            return result, None
        window = self._energy_window(None)
        if isinstance(window, Failure):
            raise SearchError(f"cuBLAS energy window failed: {window.failure_class}: {window.message}")
        self.store.add_energy(measurement_id, window)
        self.objective.observe(result.timing.median_ms, None, window.mean_power_w)  # the power floor only
        return result, window

    # -- bookkeeping -----------------------------------------------------------------

    def _study(self) -> optuna.Study:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        sampler = optuna.samplers.TPESampler(
            seed=self.settings.seed, multivariate=True, constant_liar=True, n_startup_trials=16
        )
        study = optuna.create_study(
            study_name=self.name, storage=self.store.url, sampler=sampler,
            directions=list(self.objective.directions), load_if_exists=True,
        )
        if not study.get_trials(deepcopy=False):
            for seed in self.space.seeds:
                study.enqueue_trial(seed.as_dict())
        return study

    def _known_results(self, study: optuna.Study) -> dict[str, tuple[float, ...] | None]:
        """Config name -> objective values (None for a GPU failure) of configs already evaluated.

        Also replays earlier measurements into the objective (its front and power floor).
        """
        known: dict[str, tuple[float, ...] | None] = {}
        for trial in study.get_trials(deepcopy=False):
            name, attrs = trial.user_attrs.get("config"), trial.user_attrs
            if not name or attrs.get(STAGE) != "gpu":
                continue
            complete = trial.state == optuna.trial.TrialState.COMPLETE
            known[name] = tuple(trial.values) if complete else None
            if complete:
                self.objective.observe(_ms(trial), attrs.get("energy_mj"), attrs.get("power_w"))
        return known

    def _repeat(self, study, trial, values: tuple[float, ...] | None) -> None:
        if values is None:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, list(values))

    def _tell(self, study, trial, config: Config, outcome: Measurement | Failure, known: dict,
              task: KernelTask | Failure | None = None) -> None:
        trial.set_user_attr("config", config.name)
        if isinstance(outcome, Measurement):
            measurement_id = self.store.add_measurement(
                self.env, self.problem, config, self.space.template_hash, outcome, self.name)
            values = self._values(trial, config, outcome, task, measurement_id)
            trial.set_user_attr(STAGE, "gpu")
            trial.set_user_attr("tflops", outcome.tflops)
            study.tell(trial, list(values))
            known[config.name] = values
            return
        stage = "gpu" if _reached_gpu(outcome) else (
            "rejected" if outcome.failure_class == FailureClass.REJECTED.value else "compile")
        trial.set_user_attr(STAGE, stage)
        trial.set_user_attr("failure", outcome.failure_class)
        trial.set_user_attr("reason", outcome.message[:500])
        self.failures[outcome.failure_class] = self.failures.get(outcome.failure_class, 0) + 1
        self.store.add_failure(self.env, self.problem, config, self.space.template_hash, outcome, self.name)
        if stage == "gpu":
            known[config.name] = None
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)

    def _values(self, trial, config: Config, measurement: Measurement, task, measurement_id: int):
        """The objective values of a measured candidate, metering its energy where it matters."""
        ms = measurement.timing.median_ms
        trial.set_user_attr("ms", ms)
        mj = None
        if self.objective.uses_energy and isinstance(task, KernelTask) and self.objective.wants_window(ms):
            window = self._energy_window(task)
            if isinstance(window, Failure):
                trial.set_user_attr("energy_failure", f"{window.failure_class}: {window.message}"[:500])
            else:
                self.store.add_energy(measurement_id, window)
                self.windows[config.name] = window
                mj = _mj(window)
                trial.set_user_attr("energy_mj", mj)
                trial.set_user_attr("power_w", window.mean_power_w)
                trial.set_user_attr("throttled", window.throttled)
                self.objective.observe(ms, mj, window.mean_power_w)
        if self.objective.uses_energy and mj is None:
            trial.set_user_attr("energy_estimated", True)
        return self.objective.values(ms, mj)

    def _gpu_trials(self, study: optuna.Study) -> list:
        return [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
                if t.user_attrs.get(STAGE) == "gpu"]

    def _update_best(self, study: optuna.Study, progress: Progress) -> None:
        """Progress from the trials already in the study (once, when a run starts)."""
        trials = self._gpu_trials(study)
        if trials:
            fastest = min(trials, key=_ms)
            progress.best_ms, progress.best_name = _ms(fastest), fastest.user_attrs.get("config")
        self._note_energy(progress)

    def _note(self, progress: Progress, config: Config, outcome: Measurement | Failure) -> None:
        """Progress after one candidate, from memory (no storage read in the loop)."""
        if isinstance(outcome, Measurement):
            ms = outcome.timing.median_ms
            if progress.best_ms is None or ms < progress.best_ms:
                progress.best_ms, progress.best_name = ms, config.name
        self._note_energy(progress)

    def _note_energy(self, progress: Progress) -> None:
        points = self.objective.points  # metered candidates, earlier runs included
        progress.best_mj = min(p.mj for p in points) if points else None
        progress.front = len(pareto_front(points))

    def _out_of_time(self, started: float) -> bool:
        return self.settings.timeout_s is not None and time.monotonic() - started > self.settings.timeout_s

    def _best_trial(self, study: optuna.Study):
        """The trial to report: the fastest for time and pareto, the least objective value otherwise."""
        trials = self._gpu_trials(study)
        if self.objective.name in ("time", "pareto"):
            return min(trials, key=_ms)
        return min(trials, key=lambda t: t.values[0])

    def _result(self, study: optuna.Study, progress: Progress, pool: CompilePool, cublas: Measurement,
                cublas_window: EnergyWindow | None) -> SearchResult:
        """Measure the best config and cuBLAS again, side by side, for the reported ratio."""
        failures = dict(self.failures)
        if not self._gpu_trials(study):
            return SearchResult(self.name, progress.evaluated, None, None, cublas, failures,
                                self.objective.name, cublas_window=cublas_window)
        config = self.space.config(self._best_trial(study).params)
        compiled = pool.submit(render(self.space, config, self.gpu)).result()
        task = self._kernel_task(config, compiled)
        if isinstance(task, Failure):
            raise SearchError(f"the best config {config.name} failed when measured again: {task.message}")
        cublas_runs, kernel_runs = [], []
        for _ in range(FINAL_ROUNDS):  # alternated, so heat and power capping weigh on both alike
            cublas_runs.append(self._run_cublas())
            run = self.worker.run(task, timeout_s=self._candidate_timeout(cublas_runs[-1]))
            if isinstance(run, Failure):
                raise SearchError(f"the best config {config.name} failed when measured again: {run.message}")
            kernel_runs.append(run)
        final_cublas, cublas_window = self._record_reference(pooled(self.problem, cublas_runs))
        final = pooled(self.problem, kernel_runs)
        measurement_id = self.store.add_measurement(
            self.env, self.problem, config, self.space.template_hash, final, self.name)
        best_window = None
        if self.objective.uses_energy:
            best_window = self._energy_window(task)
            if isinstance(best_window, Failure):
                raise SearchError(f"energy window of {config.name} failed: {best_window.message}")
            self.store.add_energy(measurement_id, best_window)
        return SearchResult(self.name, progress.evaluated, config, final, final_cublas, failures,
                            self.objective.name, best_window, cublas_window, self._front(study))

    def _front(self, study: optuna.Study) -> tuple[FrontPoint, ...]:
        """Measured points on the time/energy front (pareto), from this run's windows."""
        if self.objective.name != "pareto":
            return ()
        metered = [t for t in self._gpu_trials(study) if "energy_mj" in t.user_attrs]
        points = {Point(_ms(t), t.user_attrs["energy_mj"]): t.user_attrs["config"] for t in metered}
        return tuple(FrontPoint(points[p], p.ms, p.mj, self.windows[points[p]])
                     for p in pareto_front(list(points)) if points[p] in self.windows)


def pooled(problem: GemmProblem, runs: list[Measurement]) -> Measurement:
    """One measurement from several runs of the same kernel: every timed launch pooled."""
    timing = Timing.from_samples([ms for run in runs for ms in run.timing.samples_ms])
    clocks = [run.sm_clock_mhz for run in runs if run.sm_clock_mhz is not None]
    temperatures = [run.temperature_c for run in runs if run.temperature_c is not None]
    reasons = [run.throttle_reasons for run in runs if run.throttle_reasons is not None]
    return Measurement(
        timing=timing,
        tflops=problem.tflops(timing.median_ms),
        max_error=max(run.max_error for run in runs),
        sm_clock_mhz=min(clocks) if clocks else None,
        throttle_reasons=functools.reduce(operator.or_, reasons) if reasons else None,
        temperature_c=max(temperatures) if temperatures else None,
        resources=runs[0].resources,
    )


def kernel_task(space: SearchSpace, config: Config, compiled: CompiledKernel | CompileFailure, gpu: GpuSpec,
                problem: GemmProblem, seed: int, warmup: int, repeats: int) -> KernelTask | Failure:
    """The GPU task that verifies and times a compiled config, or why it cannot run."""
    if isinstance(compiled, CompileFailure):
        return Failure(FailureClass.COMPILE_ERROR.value, compiled.message)
    launch = space.launch(config, gpu, problem)
    expected = argument_bytes(launch.tensor_maps)
    taken = parameter_sizes(compiled.cubin, compiled.entry)
    if taken and taken != expected:
        return Failure(FailureClass.LAUNCH_ERROR.value, f"{compiled.entry} takes parameters of {list(taken)} bytes; "
                       f"its launch passes {list(expected)}")
    resources = dataclasses.replace(compiled.resources, smem_dynamic=launch.dynamic_smem)
    violation = resource_violation(resources, launch.block[0], gpu, launch.opt_in)
    if violation:
        return Failure(FailureClass.RESOURCE.value, violation)
    return KernelTask(cubin=compiled.cubin, entry=compiled.entry, grid=launch.grid, block=launch.block,
                      dynamic_smem=launch.dynamic_smem, problem=problem, seed=seed, warmup=warmup,
                      repeats=repeats, resources=resources, tensor_maps=launch.tensor_maps)


def _ms(trial) -> float:
    """A GPU trial's median time; studies written before the "ms" attribute hold it as their value."""
    return trial.user_attrs.get("ms", trial.values[0] if trial.values else float("inf"))


def _mj(window: EnergyWindow | None) -> float | None:
    return None if window is None else window.energy_per_gemm_j * 1e3


def _compiled(future) -> CompiledKernel | CompileFailure:
    """The compile result; an error inside the compile process becomes a compile failure."""
    try:
        return future.result()
    except Exception as error:  # raised in the pool process: record it with the candidate, go on
        return CompileFailure("?", f"{type(error).__name__}: {error}", "")


def _reached_gpu(outcome: Measurement | Failure) -> bool:
    return isinstance(outcome, Failure) and outcome.failure_class not in (
        FailureClass.REJECTED.value, FailureClass.COMPILE_ERROR.value, FailureClass.RESOURCE.value)
