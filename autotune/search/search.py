"""The search: proposals, a compile pipeline ahead of the GPU, GPU lanes, a shared study.

    propose -> render -> compile (CPU pool) -> check resources -> GPU slot -> GPU lane
    (verify, time) -> record

* Configs come from :class:`~autotune.search.sampler.Proposer`: the space's seeds, then
  random feasible configs, then TPE over feasible configs. The opening (the seeds,
  then random configs, one per compile process) starts compiling before the study
  is read. A config that breaks a
  static rule is screened out for the cost of a rule check; it is never compiled
  and never becomes a trial. Resource rejections and compile errors never reach
  the GPU and do not use up the budget; they are stored as failures with their reason.
* Compiles run ahead of the GPU: the pool is kept busy while compiled candidates
  wait for a GPU, and each GPU lane (:mod:`autotune.search.lanes`, one per GPU worker)
  has a candidate queued behind the running one, so a GPU never waits for a
  compile that could have started earlier, nor for the search's bookkeeping.
* ``--trials`` counts GPU evaluations in the study, every process sharing it
  together (:mod:`autotune.search.study`): a candidate runs only once it holds a slot.
  Running the same search again resumes the study until the budget is reached;
  several processes (on one host or many, through one database) share it.
* Racing (time objective): a candidate's timing stops at the first of
  RACE_MARGINS' stages where it is clearly slower than the best so far (one
  launch over 1.5x the best, three over 1.2x, ten over 1.05x); its two
  verification launches are its warm-up. Verification is never skipped.
* With an energy objective (``energy``, ``edp``, ``pareto``) cuBLAS and the
  candidates that could improve the objective also get an NVML energy window
  of about a second; :mod:`autotune.search.objective` says how that is decided.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
import operator
import queue
import sys
import threading
import time
from collections.abc import Callable, Sequence

from autotune.errors import FailureClass, SearchError
from autotune.gpu.race import RaceStage, lost_race, race_stages
from autotune.gpu.tasks import CublasTask, EnergyTask, KernelTask
from autotune.gpu.worker import GpuWorker
from autotune.gpu_specs import GpuSpec
from autotune.kernel.compile import CompiledKernel, CompileFailure, CompilePool, compile_kernel, nvrtc_version
from autotune.kernel.cubin import parameter_sizes
from autotune.kernel.render import render
from autotune.kernel.resources import resource_violation
from autotune.kernel_abi import argument_bytes
from autotune.problem import GemmProblem
from autotune.records import EnergyWindow, Environment, Failure, Measurement, Timing
from autotune.results import ResultStore
from autotune.search.draws import opening_size, process_seed
from autotune.search.lanes import GpuLane
from autotune.search.objective import Objective, Point, make_objective, pareto_front
from autotune.search.sampler import Proposer
from autotune.search.study import Admission, StudyLedger, StudyView, trial_ms, trial_params
from autotune.search.time_spent import TimeSpent
from autotune.search.timeline import COMPILE, SEARCH, Timeline, span
from autotune.space.family import Config, SearchSpace

FINAL_ROUNDS = 3  # the closing measurement alternates cuBLAS and the best config this many times
RACE_MARGINS = ((1, 1.5), (3, 1.2), (10, 1.05))  # (timed launches, margin over the best): where a candidate stops
LANE_DEPTH = 2  # jobs per GPU lane: the running one and one queued behind it
READY_PER_LANE = 4  # candidates TPE proposed, waiting per GPU lane, before compiling pauses
BUDGET_OVERSHOOT = 1.5  # compiles in flight near the end of the budget, per GPU evaluation left, where
                        # the pool cannot stop unfinished compiles (a sweep's, shared by its shapes)
REFERENCE = "reference"  # the lane job that measures cuBLAS
IDLE_POLL_S = 0.5  # how often a search with nothing in flight looks at other processes' slots
LANE_SWITCH_S = 0.001  # the thread switch interval during a search (Python's default 5 ms would idle a GPU)


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
    heartbeat_s: int = 5  # running trials beat this often...
    grace_s: int = 20  # ...and are failed as stale this long after their last beat


@dataclasses.dataclass
class Progress:
    """What the progress display shows."""

    evaluated: int
    target: int
    best_ms: float | None
    best_name: str | None
    cublas_ms: float | None
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
    screened: int = 0  # sampled configs a static rule rejected: never compiled, never trials
    raced: int = 0  # candidates of this run whose timing stopped early
    time_spent: dict = dataclasses.field(default_factory=dict)  # TimeSpent.as_dict() of this run


@dataclasses.dataclass
class _Candidate:
    """A compiled config on its way to a GPU."""

    config: Config
    task: KernelTask
    trial_id: int | None = None  # its slot in the study


def study_name(space: SearchSpace, gpu_key: str, problem: GemmProblem, objective: str = "time") -> str:
    """One study per family, GPU, problem, template version and objective."""
    name = (
        f"{space.family}/{gpu_key}/{problem.shape}/{problem.dtype}/"
        f"alpha{problem.alpha:g}/beta{problem.beta:g}/{space.template_hash}"
    )
    return name if objective == "time" else f"{name}/{objective}"


class Search:
    """One study over one space, GPU model and problem, on one or more GPU workers.

    ``worker`` is a :class:`~autotune.gpu.worker.GpuWorker` or a list of them (one per GPU,
    all of one model); workers may still be starting (:meth:`GpuWorker.begin`).
    ``on_environment`` is called with the GPU's environment once the first worker has
    started, before anything is measured; it may raise to stop the search. ``pool`` is a
    compile pool the caller started early (and closes); by default the search makes its own.
    ``warm_start`` configs (e.g. the best of nearby tuned shapes) are tried before the space's
    seeds, each once; those the static rules reject for this problem are skipped.
    ``timeline`` (optional) receives a span for each compile, GPU job and activity of the loop.
    ``store`` is an open :class:`~autotune.results.ResultStore`, or a function that opens one: it is then
    called once the seeds are compiling, so that opening a database never holds up the compiles.
    """

    def __init__(
        self,
        space: SearchSpace,
        gpu: GpuSpec,
        problem: GemmProblem,
        store: ResultStore | Callable[[], ResultStore],
        worker: GpuWorker | Sequence[GpuWorker],
        settings: SearchSettings,
        on_progress: Callable[[Progress], None] = lambda progress: None,
        on_environment: Callable[[Environment], None] = lambda env: None,
        pool: CompilePool | None = None,
        warm_start: Sequence[Config] = (),
        timeline: Timeline | None = None,
    ):
        self.space, self.gpu, self.problem = space, gpu, problem
        self.pool = pool
        self._store = store
        self.settings = settings
        self.workers = list(worker) if isinstance(worker, (list, tuple)) else [worker]
        self.on_progress, self.on_environment = on_progress, on_environment
        self.env: Environment | None = None
        self.objective: Objective = make_objective(settings.objective)
        self.name = study_name(space, gpu.key, problem, settings.objective)
        self.proposer = Proposer(space, gpu, problem, seed=process_seed(settings.seed), warm_start=warm_start)
        self.windows: dict[str, EnergyWindow] = {}  # config name -> its energy window, this run
        self.failures: dict[str, int] = {}
        self.raced = 0
        self.compiled_any = False
        self.timeline = timeline
        self.spent = TimeSpent(timeline)
        self._lock = threading.Lock()  # the objective and the best time, read by the lanes' threads
        self._events: queue.Queue = queue.Queue()
        self._compiling: dict = {}  # compile future -> config
        self._ready: collections.deque[_Candidate] = collections.deque()
        self._exhausted = False  # the proposer found no feasible config left
        self._best: tuple[float, str] | None = None  # (ms, config name): racing's yardstick
        self._best_task: tuple[str, KernelTask] | None = None  # the task of this run's fastest candidate
        self._cublas: Measurement | None = None
        self._cublas_window: EnergyWindow | None = None
        self._stale_checked = time.monotonic()  # when other processes' stale trials were last failed

    @property
    def store(self) -> ResultStore:
        """The results database (opened here on first use when the search was given an opener)."""
        if not isinstance(self._store, ResultStore):
            with span(self.timeline, SEARCH, "open database"):
                self._store = self._store()
        return self._store

    # -- the run -------------------------------------------------------------------

    def run(self) -> SearchResult:
        started = time.monotonic()
        switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(LANE_SWITCH_S)  # a lane hands its GPU the next candidate without waiting for the loop
        try:
            if self.pool is not None:
                return self._run(self.pool, started)
            with CompilePool(self.settings.jobs) as pool:
                pool.warm_up()  # while the study opens
                return self._run(pool, started)
        finally:
            sys.setswitchinterval(switch_interval)

    def _run(self, pool: CompilePool, started: float) -> SearchResult:
        self._compile_opening(pool)  # while the study opens and the GPU workers start
        lanes = [GpuLane(i, worker, self._events) for i, worker in enumerate(self.workers)]
        for lane in lanes:  # cuBLAS, each lane's yardstick, runs as soon as its worker is up, while the study opens
            lane.submit(REFERENCE, functools.partial(self._reference_job, lane))
        ledger: StudyLedger | None = None
        try:
            with span(self.timeline, SEARCH, "open study"):
                ledger = StudyLedger(self.store.url, self.name, list(self.objective.directions),
                                     self.proposer.distributions, self.settings.trials, self.settings.heartbeat_s,
                                     self.settings.grace_s, sampler=self.proposer.sampler)
            ledger.fail_stale()
            view = ledger.view()
            progress = self._start_progress(view)
            self._compile_ahead(ledger, view, pool, lanes=1)  # while the GPU workers start
            self._start_environment()
            self._loop(ledger, pool, lanes, started, progress)
            self._stop_lanes(ledger, lanes, progress)
            pool.close(wait=False)  # compiles still running are of no use now
            for lane in lanes:
                self.spent.add("gpu busy", lane.busy_s)
                self.spent.add("gpu waiting", lane.waited_s)
            with self.spent.on("closing"):
                result = self._result(ledger.view(fresh=True), lanes[0].worker)
            self.spent.add("wall", time.monotonic() - started)
            return dataclasses.replace(result, time_spent=self.spent.as_dict())
        finally:
            for lane in lanes:
                lane.cancel_waiting()
                lane.stop(timeout_s=0)
            if ledger is not None:
                ledger.close()

    def _loop(self, ledger: StudyLedger, pool: CompilePool, lanes: list[GpuLane], started: float,
              progress: Progress) -> None:
        """Propose, compile, dispatch and record until the study has its GPU evaluations."""
        while True:
            view = ledger.view()
            progress.evaluated = view.evaluated
            self._learn_best(view)
            if view.evaluated >= self.settings.trials or self._out_of_time(started):
                return
            full = self._dispatch(ledger, lanes)  # the GPUs first: proposing and compiling can wait
            self._compile_ahead(ledger, ledger.view(), pool, len(lanes))
            idle = not (self._compiling or self._ready or any(lane.queued for lane in lanes))
            if idle:  # nothing of ours in flight: decide on the study as it is now
                view = ledger.view(fresh=True)
                if view.evaluated >= self.settings.trials:
                    continue
                if not view.running_elsewhere:
                    if self._exhausted:
                        return  # every feasible config is taken
                    continue  # the budget has room again
            if idle or full:  # waiting for slots held elsewhere: they finish, or their process died
                self._fail_stale(ledger)
            try:
                event = self._events.get(timeout=IDLE_POLL_S if idle else self.settings.heartbeat_s)
            except queue.Empty:
                continue
            self._handle(ledger, event, progress)

    # -- compiling ahead -------------------------------------------------------------

    def _compile_ahead(self, ledger: StudyLedger, view: StudyView, pool: CompilePool, lanes: int) -> None:
        """Keep every compile process busy while the budget has room.

        Compiling pauses while READY_PER_LANE candidates per lane that TPE proposed wait for a GPU:
        more would be proposed from older results. Seeds, warm-start configs and random draws learn
        nothing from results, so a backlog of them never pauses it. Near the end of the budget every
        process keeps compiling where the pool can stop them unfinished (the first to finish fill the
        budget); a pool that cannot keeps BUDGET_OVERSHOOT compiles per evaluation left."""
        left = self.settings.trials - view.held
        in_flight = math.inf if pool.stops_unfinished else math.ceil(left * BUDGET_OVERSHOOT)
        while (not self._exhausted and len(self._compiling) < pool.jobs and len(self._ready) < left
               and self._proposed_waiting() < READY_PER_LANE * lanes
               and len(self._compiling) + len(self._ready) < in_flight):
            local = [*self._compiling.values(), *(candidate.config for candidate in self._ready)]
            taken = view.taken | {config.name for config in local}
            with self.spent.on("propose"):
                config = self.proposer.next(ledger.study, view.learnable, taken, in_flight=local)
            if config is None:
                self._exhausted = True
                return
            self._submit(pool, config)

    def _proposed_waiting(self) -> int:
        """Compiled candidates waiting for a GPU that TPE proposed from the study's results."""
        return sum(candidate.config.name in self.proposer.learned for candidate in self._ready)

    def _compile_opening(self, pool: CompilePool) -> None:
        """Start compiling, before the study is read, the proposer's opening (what it gives first
        whatever the study holds: the warm-start configs and the space's seeds that the static rules
        admit, then random feasible configs), one per compile process. Those the study holds already
        (a resumed search) are dropped once compiled."""
        with self.spent.on("propose") as proposals:
            opening = self.proposer.opening(opening_size(pool.jobs, self.settings.trials))
            proposals.count = len(opening)
        for config in opening:
            self._submit(pool, config)

    def _submit(self, pool: CompilePool, config: Config) -> None:
        future = pool.submit(render(self.space, config, self.gpu))
        self._compiling[future] = config
        future.add_done_callback(self._events.put)

    def _compiled(self, ledger: StudyLedger, future) -> None:
        config = self._compiling.pop(future, None)
        if config is None or future.cancelled():
            return
        compiled = _compile_result(future)
        self.spent.add("compile", compiled.seconds)
        if self.timeline is not None and compiled.seconds:
            self.timeline.add(COMPILE, config.name, compiled.started, compiled.seconds,
                              failed=isinstance(compiled, CompileFailure))
        if config.name in ledger.view().taken:
            return  # the study holds it already: a seed of a resumed search, or another process took it
        task = self._kernel_task(config, compiled)
        if isinstance(task, Failure):
            with self.spent.on("record"):
                self._record_compile_failure(ledger, config, task)
        else:
            self._ready.append(_Candidate(config, task))
        self._check_template_compiles(compiled)

    def _check_template_compiles(self, compiled: CompiledKernel | CompileFailure) -> None:
        """Stop a search whose template has compiled for no candidate yet, naming NVRTC's error."""
        if not isinstance(compiled, CompileFailure):
            self.compiled_any = True
            return
        failed = self.failures.get(FailureClass.COMPILE_ERROR.value, 0)  # all of them, while none compiled
        if not self.compiled_any and failed >= self.settings.max_compile_errors:
            raise SearchError(
                f"{self.space.template} does not compile with NVRTC {nvrtc_version()} for "
                f"{self.space.target(self.gpu)}: {failed} candidates in a row failed, the last with: "
                f"{compiled.message}")

    def _kernel_task(self, config: Config, compiled) -> KernelTask | Failure:
        return kernel_task(self.space, config, compiled, self.gpu, self.problem, self.settings.seed,
                           self.settings.warmup, self.settings.repeats)

    # -- the GPU lanes ---------------------------------------------------------------

    def _dispatch(self, ledger: StudyLedger, lanes: list[GpuLane]) -> bool:
        """Give each lane a candidate to run next, each holding a slot of the study; True when the
        budget is held in full (by this process or others) and candidates wait."""
        if self._cublas is None and self.objective.uses_energy:
            return False  # energy decisions need cuBLAS's window first (a lane runs its own cuBLAS first anyway)
        while self._ready:
            lane = min(lanes, key=lambda lane: (lane.queued, lane.submitted))  # the least busy, in turn
            if lane.queued >= LANE_DEPTH:
                return False
            view = ledger.view()  # reserve() decides; this spares it trials it would release at once
            if view.held >= self.settings.trials:
                return True
            candidate = self._ready.popleft()
            if candidate.config.name in view.taken:
                continue  # another process has it
            with self.spent.on("slots"):
                slot = ledger.reserve(candidate.config, lane.device)
            if slot.admission is Admission.FULL:
                self._ready.appendleft(candidate)  # a slot may free up if another process died
                return True
            if slot.admission is Admission.DUPLICATE:
                continue  # another process has it
            candidate.trial_id = slot.trial_id
            lane.submit(candidate, functools.partial(self._evaluate, lane, candidate))
        return False

    def _fail_stale(self, ledger: StudyLedger) -> None:
        """Fail other processes' stale trials, at most once per heartbeat."""
        now = time.monotonic()
        if now - self._stale_checked >= self.settings.heartbeat_s:
            self._stale_checked = now
            ledger.fail_stale()

    def _reference_job(self, lane: GpuLane, worker) -> tuple[Measurement | Failure, EnergyWindow | Failure | None]:
        """cuBLAS timed on the lane's GPU (and metered on the first, for energy objectives). Lane thread."""
        task = CublasTask(self.problem, self.settings.seed, self.settings.warmup, self.settings.repeats)
        with self._gpu_span(lane, "cuBLAS"):
            result = worker.run(task, timeout_s=300.0)
        if isinstance(result, Failure):
            return result, None
        lane.cublas_ms = result.timing.median_ms
        window = self._energy_window(worker, None) if self.objective.uses_energy and lane.index == 0 else None
        return result, window

    def _evaluate(self, lane: GpuLane, candidate: _Candidate, worker):
        """Verify and time a candidate, racing it against the best so far; meter it where it matters.
        Runs in the lane's thread."""
        race = self._race()
        task = candidate.task if not race else dataclasses.replace(candidate.task, race=race, warmup=0)
        with self._gpu_span(lane, candidate.config.name):
            outcome = worker.run(task, timeout_s=self._candidate_timeout(lane.cublas_ms))
        window = None
        if isinstance(outcome, Measurement) and self.objective.uses_energy:
            with self._lock:
                wanted = self.objective.wants_window(outcome.timing.median_ms)
            if wanted:
                window = self._energy_window(worker, task)
        return task, outcome, window

    def _gpu_span(self, lane: GpuLane, name: str):
        return span(self.timeline, f"GPU {lane.device}", name)

    def _race(self) -> tuple[RaceStage, ...]:
        """The stages a candidate races through now: none before the first result, nor for energy objectives."""
        if not self.settings.race or self.objective.name != "time":
            return ()
        with self._lock:
            return () if self._best is None else race_stages(self._best[0], RACE_MARGINS)

    def _candidate_timeout(self, cublas_ms: float) -> float:
        """Generous for a kernel 50x slower than cuBLAS, short enough to catch a hang."""
        launches = self.settings.warmup + self.settings.repeats + 4
        return 15.0 + 50.0 * launches * cublas_ms / 1e3

    def _energy_window(self, worker, kernel: KernelTask | None) -> EnergyWindow | Failure:
        task = EnergyTask(kernel, self.problem, self.settings.seed, self.settings.energy_seconds)
        return worker.run(task, timeout_s=60.0 + 10.0 * self.settings.energy_seconds)

    def _stop_lanes(self, ledger: StudyLedger, lanes: list[GpuLane], progress: Progress) -> None:
        """Give back the slots of candidates not started, record the running ones, stop the threads."""
        for lane in lanes:
            for candidate in lane.cancel_waiting(lambda tag: isinstance(tag, _Candidate)):
                ledger.release(candidate.trial_id)
            lane.stop()  # its cuBLAS reference, if still waiting, runs first
        while any(lane.queued for lane in lanes):
            self._handle(ledger, self._events.get(), progress)
        while True:  # compile results that arrived meanwhile: nothing to do with them
            try:
                self._events.get_nowait()
            except queue.Empty:
                return

    # -- events ------------------------------------------------------------------------

    def _handle(self, ledger: StudyLedger, event, progress: Progress) -> None:
        if not isinstance(event, tuple):  # a compile future
            self._compiled(ledger, event)
            return
        lane, tag, result = event
        lane.queued -= 1
        if isinstance(result, BaseException):
            raise result
        if tag == REFERENCE:
            self._take_reference(lane, *result, progress)
            return
        task, outcome, window = result
        with self.spent.on("record"):
            self._record(ledger, tag, task, outcome, window)
        progress.evaluated += 1
        progress.last = tag.config.name
        self._note(progress, tag.config, outcome)
        self.on_progress(progress)

    def _take_reference(self, lane: GpuLane, result: Measurement | Failure, window, progress: Progress) -> None:
        if isinstance(result, Failure):
            raise SearchError(f"cuBLAS reference failed: {result.failure_class}: {result.message}")
        measurement_id = self.store.add_measurement(self.env, self.problem, None, None, result, self.name)
        if lane.index != 0:
            return
        self._cublas = result
        progress.cublas_ms = result.timing.median_ms
        if self.objective.uses_energy:
            if isinstance(window, Failure):
                raise SearchError(f"cuBLAS energy window failed: {window.failure_class}: {window.message}")
            self.store.add_energy(measurement_id, window)
            self._cublas_window = window
            progress.cublas_mj = _mj(window)
            with self._lock:
                self.objective.observe(result.timing.median_ms, None, window.mean_power_w)  # the power floor
        self.on_progress(progress)

    # -- recording -------------------------------------------------------------------

    def _record(self, ledger: StudyLedger, candidate: _Candidate, task: KernelTask,
                outcome: Measurement | Failure, window: EnergyWindow | Failure | None) -> None:
        """Store a GPU evaluation and close its slot in the study."""
        config = candidate.config
        if isinstance(outcome, Failure):
            self.failures[outcome.failure_class] = self.failures.get(outcome.failure_class, 0) + 1
            self.store.add_failure(self.env, self.problem, config, self.space.template_hash, outcome, self.name)
            ledger.finish(candidate.trial_id, {"failure": outcome.failure_class, "reason": outcome.message[:500]}, None)
            return
        measurement_id = self.store.add_measurement(
            self.env, self.problem, config, self.space.template_hash, outcome, self.name)
        ms = outcome.timing.median_ms
        attrs: dict = {"ms": ms} if self.objective.uses_energy else {}  # the time objective's value is ms
        if lost_race(outcome.timing.samples_ms, task.race):
            self.raced += 1  # its measurement holds the few launches it got
        mj = None
        if isinstance(window, Failure):
            attrs["energy_failure"] = f"{window.failure_class}: {window.message}"[:500]
        elif window is not None:
            self.store.add_energy(measurement_id, window)
            self.windows[config.name] = window
            mj = _mj(window)
            attrs.update(energy_mj=mj, power_w=window.mean_power_w, throttled=window.throttled)
        if self.objective.uses_energy and mj is None:
            attrs["energy_estimated"] = True
        with self._lock:
            if mj is not None:
                self.objective.observe(ms, mj, window.mean_power_w)
            values = self.objective.values(ms, mj)
            if self._best is None or ms < self._best[0]:
                self._best = (ms, config.name)
                self._best_task = (config.name, dataclasses.replace(  # the closing never races
                    task, race=(), warmup=self.settings.warmup))
        ledger.finish(candidate.trial_id, attrs, values)

    def _record_compile_failure(self, ledger: StudyLedger, config: Config, failure: Failure) -> None:
        self.failures[failure.failure_class] = self.failures.get(failure.failure_class, 0) + 1
        if ledger.record_compile_failure(config, failure.failure_class, failure.message):
            self.store.add_failure(self.env, self.problem, config, self.space.template_hash, failure, self.name)

    # -- bookkeeping -------------------------------------------------------------------

    def _start_environment(self) -> None:
        """Wait for the workers' hellos: every worker must see the same GPU model."""
        envs = [worker.environment() for worker in self.workers]
        different = [env for env in envs if env.gpu_name != envs[0].gpu_name]
        if different:
            raise SearchError(f"the GPU workers see different GPUs: {envs[0].gpu_name!r} and {different[0].gpu_name!r}")
        self.on_environment(envs[0])
        self.env = envs[0]

    def _start_progress(self, view: StudyView) -> Progress:
        """Progress from the trials already in the study; earlier measurements replayed into the objective
        (its front and power floor)."""
        progress = Progress(view.evaluated, self.settings.trials, None, None, None, self.problem)
        for trial in view.measured:
            self.objective.observe(trial_ms(trial), trial.user_attrs.get("energy_mj"), trial.user_attrs.get("power_w"))
        self._learn_best(view)
        if self._best is not None:
            progress.best_ms, progress.best_name = self._best
        self._note_energy(progress)
        return progress

    def _learn_best(self, view: StudyView) -> None:
        """The best time in the study, other processes' included: racing's yardstick."""
        fastest = min(view.measured, key=trial_ms, default=None)
        if fastest is None:
            return
        with self._lock:
            if self._best is None or trial_ms(fastest) < self._best[0]:
                self._best = (trial_ms(fastest), fastest.user_attrs.get("config"))

    def _note(self, progress: Progress, config: Config, outcome: Measurement | Failure) -> None:
        """Progress after one candidate."""
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

    def _best_trial(self, view: StudyView):
        """The trial to report: the fastest for time and pareto, the least objective value otherwise."""
        if self.objective.name in ("time", "pareto"):
            return min(view.measured, key=trial_ms)
        return min(view.measured, key=lambda t: t.values[0])

    # -- the closing measurement ------------------------------------------------------------

    def _result(self, view: StudyView, worker) -> SearchResult:
        """Measure the best config and cuBLAS again, side by side, for the reported ratio."""
        failures = dict(self.failures)
        common = dict(objective=self.objective.name, screened=self.proposer.rejected, raced=self.raced)
        if self._cublas is None:
            raise SearchError("the search ended before cuBLAS was measured")
        if not view.measured:
            return SearchResult(self.name, view.evaluated, None, None, self._cublas, failures,
                                cublas_window=self._cublas_window, **common)
        config = self.space.config(trial_params(self._best_trial(view)))
        task = self._closing_task(config)
        cublas_runs, kernel_runs = [], []
        for _ in range(FINAL_ROUNDS):  # alternated, so heat and power capping weigh on both alike
            cublas_runs.append(self._run_cublas(worker))
            run = worker.run(task, timeout_s=self._candidate_timeout(cublas_runs[-1].timing.median_ms))
            if isinstance(run, Failure):
                raise SearchError(f"the best config {config.name} failed when measured again: {run.message}")
            kernel_runs.append(run)
        final_cublas = pooled(self.problem, cublas_runs)
        cublas_id = self.store.add_measurement(self.env, self.problem, None, None, final_cublas, self.name)
        final = pooled(self.problem, kernel_runs)
        measurement_id = self.store.add_measurement(
            self.env, self.problem, config, self.space.template_hash, final, self.name)
        best_window = cublas_window = None
        if self.objective.uses_energy:
            cublas_window = self._closing_window(worker, None, "cuBLAS")
            self.store.add_energy(cublas_id, cublas_window)
            best_window = self._closing_window(worker, task, config.name)
            self.store.add_energy(measurement_id, best_window)
        return SearchResult(self.name, view.evaluated, config, final, final_cublas, failures,
                            best_window=best_window, cublas_window=cublas_window, front=self._front(view), **common)

    def _closing_task(self, config: Config) -> KernelTask:
        """The best config's task: kept from this run, or compiled here (from the cache, mostly)."""
        if self._best_task is not None and self._best_task[0] == config.name:
            return self._best_task[1]
        task = self._kernel_task(config, compile_kernel(render(self.space, config, self.gpu)))
        if isinstance(task, Failure):
            raise SearchError(f"the best config {config.name} failed when measured again: {task.message}")
        return task

    def _closing_window(self, worker, task: KernelTask | None, what: str) -> EnergyWindow:
        window = self._energy_window(worker, task)
        if isinstance(window, Failure):
            raise SearchError(f"energy window of {what} failed: {window.failure_class}: {window.message}")
        return window

    def _run_cublas(self, worker) -> Measurement:
        task = CublasTask(self.problem, self.settings.seed, self.settings.warmup, self.settings.repeats)
        result = worker.run(task, timeout_s=300.0)
        if isinstance(result, Failure):
            raise SearchError(f"cuBLAS reference failed: {result.failure_class}: {result.message}")
        return result

    def _front(self, view: StudyView) -> tuple[FrontPoint, ...]:
        """Measured points on the time/energy front (pareto), from this run's windows."""
        if self.objective.name != "pareto":
            return ()
        metered = [t for t in view.measured if "energy_mj" in t.user_attrs]
        points = {Point(trial_ms(t), t.user_attrs["energy_mj"]): t.user_attrs["config"] for t in metered}
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
    unbuilt = space.unbuilt_for(config, gpu, problem)
    if unbuilt:
        return Failure(FailureClass.LAUNCH_ERROR.value, unbuilt)
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


def _mj(window: EnergyWindow | None) -> float | None:
    return None if window is None else window.energy_per_gemm_j * 1e3


def _compile_result(future) -> CompiledKernel | CompileFailure:
    """The compile result; an error inside the compile process becomes a compile failure."""
    try:
        return future.result()
    except Exception as error:  # raised in the pool process: record it with the candidate, go on
        return CompileFailure("?", f"{type(error).__name__}: {error}", "")
