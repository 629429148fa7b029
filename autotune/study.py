"""The search: Optuna asks for configs, the pipeline evaluates them, Optuna is told.

space -> check (static rules) -> render -> compile (parallel CPU pool) ->
check resources -> GPU worker (verify, time) -> record -> tell.

* Statically rejected configs, resource rejections and compile errors never
  reach the GPU and do not use up the trial budget (``--trials`` counts GPU
  evaluations). They are stored as failures with their reason.
* A config already evaluated in the study is answered from its earlier result.
* The study lives in the results database (Optuna's own tables), so running
  the same search again resumes it until the budget is reached.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import optuna

from autotune.check import resource_violation
from autotune.compile import CompiledKernel, CompileFailure, CompilePool
from autotune.db import ResultStore
from autotune.errors import FailureClass
from autotune.gpus import GpuSpec
from autotune.problem import GemmProblem
from autotune.records import Environment, Failure, Measurement
from autotune.render import render
from autotune.space import Config, SearchSpace
from autotune.worker import CublasTask, GpuWorker, KernelTask

STAGE = "stage"  # trial user attribute: "rejected", "compile" or "gpu"
FINAL_REPEAT_FACTOR = 3  # the closing side-by-side measurement times 3x as many launches


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


@dataclasses.dataclass(frozen=True)
class SearchResult:
    study_name: str
    evaluated: int
    best_config: Config | None
    best: Measurement | None
    cublas: Measurement
    failures: dict[str, int]


def study_name(space: SearchSpace, env: Environment, problem: GemmProblem) -> str:
    """One study per family, GPU, problem and template version."""
    return (
        f"{space.family}/{env.gpu_key}/{problem.shape}/{problem.dtype}/"
        f"alpha{problem.alpha:g}/beta{problem.beta:g}/{space.template_hash}"
    )


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
        self.name = study_name(space, self.env, problem)
        self.distributions = {
            knob: optuna.distributions.CategoricalDistribution(values) for knob, values in space.knobs.items()
        }
        self.failures: dict[str, int] = {}

    # -- the loop --------------------------------------------------------------

    def run(self) -> SearchResult:
        started = time.monotonic()
        cublas = self._reference()
        study = self._study()
        known = self._known_results(study)
        evaluated = sum(1 for t in study.get_trials(deepcopy=False) if t.user_attrs.get(STAGE) == "gpu")
        progress = Progress(evaluated, self.settings.trials, None, None, cublas.timing.median_ms, self.problem)
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
                futures = [(trial, config, pool.submit(render(self.space, config, self.gpu), self.gpu.sm))
                           for trial, config in batch]
                for trial, config, future in futures:
                    outcome = self._evaluate(config, _compiled(future), cublas)
                    self._tell(study, trial, config, outcome, known)
                    if isinstance(outcome, Measurement) or _reached_gpu(outcome):
                        progress.evaluated += 1
                    progress.last = config.name
                    self._update_best(study, progress)
                    self.on_progress(progress)
            return self._result(study, progress, cublas, pool)

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

    def _evaluate(self, config: Config, compiled, cublas: Measurement, repeats: int | None = None
                  ) -> Measurement | Failure:
        if isinstance(compiled, CompileFailure):
            return Failure(FailureClass.COMPILE_ERROR.value, compiled.message)
        launch = self.space.launch(config, self.gpu, self.problem)
        resources = dataclasses.replace(compiled.resources, smem_dynamic=launch.dynamic_smem)
        violation = resource_violation(resources, launch.block[0], self.gpu, launch.opt_in)
        if violation:
            return Failure(FailureClass.RESOURCE.value, violation)
        task = KernelTask(
            cubin=compiled.cubin,
            entry=compiled.entry,
            grid=launch.grid,
            block=launch.block,
            dynamic_smem=launch.dynamic_smem,
            problem=self.problem,
            seed=self.settings.seed,
            warmup=self.settings.warmup,
            repeats=repeats or self.settings.repeats,
            resources=resources,
        )
        return self.worker.run(task, timeout_s=self._candidate_timeout(cublas))

    def _candidate_timeout(self, cublas: Measurement) -> float:
        """Generous for a kernel 50x slower than cuBLAS, short enough to catch a hang."""
        launches = self.settings.warmup + self.settings.repeats + 4
        return 15.0 + 50.0 * launches * cublas.timing.median_ms / 1e3

    def _reference(self, repeats: int | None = None) -> Measurement:
        task = CublasTask(self.problem, self.settings.seed, self.settings.warmup, repeats or self.settings.repeats)
        result = self.worker.run(task, timeout_s=300.0)
        if isinstance(result, Failure):
            raise RuntimeError(f"cuBLAS reference failed: {result.failure_class}: {result.message}")
        self.store.add_measurement(self.env, self.problem, None, None, result, self.name)
        return result

    # -- bookkeeping -----------------------------------------------------------------

    def _study(self) -> optuna.Study:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        sampler = optuna.samplers.TPESampler(
            seed=self.settings.seed, multivariate=True, constant_liar=True, n_startup_trials=16
        )
        study = optuna.create_study(
            study_name=self.name, storage=self.store.url, sampler=sampler, direction="minimize", load_if_exists=True
        )
        if not study.get_trials(deepcopy=False):
            for seed in self.space.seeds:
                study.enqueue_trial(seed.as_dict())
        return study

    def _known_results(self, study: optuna.Study) -> dict[str, float | None]:
        """Config name -> median ms (None for a GPU failure) of configs already evaluated."""
        known: dict[str, float | None] = {}
        for trial in study.get_trials(deepcopy=False):
            name = trial.user_attrs.get("config")
            if name and trial.user_attrs.get(STAGE) == "gpu":
                known[name] = trial.value if trial.state == optuna.trial.TrialState.COMPLETE else None
        return known

    def _repeat(self, study, trial, value: float | None) -> None:
        if value is None:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, value)

    def _tell(self, study, trial, config: Config, outcome: Measurement | Failure, known: dict) -> None:
        trial.set_user_attr("config", config.name)
        if isinstance(outcome, Measurement):
            trial.set_user_attr(STAGE, "gpu")
            trial.set_user_attr("tflops", outcome.tflops)
            self.store.add_measurement(self.env, self.problem, config, self.space.template_hash, outcome, self.name)
            study.tell(trial, outcome.timing.median_ms)
            known[config.name] = outcome.timing.median_ms
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

    def _update_best(self, study: optuna.Study, progress: Progress) -> None:
        completed = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
                     if t.user_attrs.get(STAGE) == "gpu"]
        if completed:
            best = min(completed, key=lambda t: t.value)
            progress.best_ms, progress.best_name = best.value, best.user_attrs.get("config")

    def _out_of_time(self, started: float) -> bool:
        return self.settings.timeout_s is not None and time.monotonic() - started > self.settings.timeout_s

    def _result(self, study: optuna.Study, progress: Progress, cublas: Measurement, pool: CompilePool) -> SearchResult:
        """Measure the best config and cuBLAS again, side by side, for the reported ratio."""
        if not progress.best_name:
            return SearchResult(self.name, progress.evaluated, None, None, cublas, dict(self.failures))
        best_trial = min(
            (t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
             if t.user_attrs.get(STAGE) == "gpu"),
            key=lambda t: t.value,
        )
        config = self.space.config(best_trial.params)
        compiled = pool.submit(render(self.space, config, self.gpu), self.gpu.sm).result()
        repeats = FINAL_REPEAT_FACTOR * self.settings.repeats
        final_cublas = self._reference(repeats)
        final = self._evaluate(config, compiled, final_cublas, repeats)
        if isinstance(final, Measurement):
            self.store.add_measurement(self.env, self.problem, config, self.space.template_hash, final, self.name)
            return SearchResult(self.name, progress.evaluated, config, final, final_cublas, dict(self.failures))
        raise RuntimeError(f"the best config {config.name} failed when measured again: {final.message}")


def _compiled(future) -> CompiledKernel | CompileFailure:
    """The compile result; an error inside the compile process becomes a compile failure."""
    try:
        return future.result()
    except Exception as error:  # raised in the pool process: record it with the candidate, go on
        return CompileFailure("?", f"{type(error).__name__}: {error}", "")


def _reached_gpu(outcome: Measurement | Failure) -> bool:
    return isinstance(outcome, Failure) and outcome.failure_class not in (
        FailureClass.REJECTED.value, FailureClass.COMPILE_ERROR.value, FailureClass.RESOURCE.value)
