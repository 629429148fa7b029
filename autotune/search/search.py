"""The search: proposals, a compile pipeline ahead of the GPU, GPU lanes, a shared study.

    propose -> render -> compile (CPU pool) -> check the build -> GPU slot -> GPU lane
    (verify, time) -> record

* Configs come from :class:`~autotune.search.sampler.Proposer`: the space's seeds, then
  random feasible configs, then TPE over feasible configs (or, with ``sampler="random"``, more
  random ones; with ``sampler="genetic"``, children of the measured ones). A config that breaks a
  static rule is screened out for the cost of a rule check; it is never compiled
  and never becomes a trial.
* :mod:`autotune.search.compiling` keeps the compile pool busy ahead of the GPU; the
  opening (the seeds, then random configs, one per compile process) starts compiling
  before the study is read. Build failures never reach the GPU and do not use up the
  budget; they are stored as failures with their reason.
* :mod:`autotune.search.dispatch` hands built candidates to the GPU lanes
  (:mod:`autotune.search.lanes`, one per GPU worker), each with a candidate queued behind
  the running one, so a GPU never waits for the search's bookkeeping; it races
  clearly slower candidates (time objective) and meters those that could improve an
  energy objective (:mod:`autotune.search.objective` says how that is decided).
* :mod:`autotune.search.recording` stores each evaluation; :mod:`autotune.search.standing`
  is what the loop, the recording and the lanes share (the best time, the objective).
* ``--trials`` counts GPU evaluations in the study, every process sharing it
  together (:mod:`autotune.search.study`): a candidate runs only once it holds a slot.
  Running the same search again resumes the study until the budget is reached;
  several processes (on one host or many, through one database) share it.
* At the end, :mod:`autotune.search.closing` measures the best config and cuBLAS again,
  side by side, for the reported ratio.
"""

from __future__ import annotations

import dataclasses
import queue
import sys
import time
from collections.abc import Callable, Sequence

from autotune.errors import SearchError
from autotune.gpu.worker import GpuWorker
from autotune.gpu_specs import GpuSpec
from autotune.kernel.compile import CompilePool
from autotune.problem import GemmProblem
from autotune.records import EnergyWindow, Environment, Failure, Measurement
from autotune.results import ResultStore
from autotune.search.closing import ClosingMeasurement, FrontPoint
from autotune.search.compiling import CompilePipeline
from autotune.search.dispatch import REFERENCE, Dispatch
from autotune.search.draws import Opening, stream_seed
from autotune.search.evaluate import Measuring, Recorder
from autotune.search.lanes import GpuLane
from autotune.search.objective import Objective, make_objective, pareto_front
from autotune.search.recording import Recording, per_gemm_mj
from autotune.search.sampler import Proposer
from autotune.search.settings import SearchSettings
from autotune.search.standing import Standing
from autotune.search.study import StudyLedger, StudyView, trial_ms
from autotune.search.time_spent import TimeSpent
from autotune.search.timeline import SEARCH, Timeline, span
from autotune.space.family import Config, SearchSpace

IDLE_POLL_S = 0.5  # how often a search with nothing in flight looks at other processes' slots
LANE_SWITCH_S = 0.001  # the thread switch interval during a search (Python's default 5 ms would idle a GPU)


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


def study_name(space: SearchSpace, gpu_key: str, problem: GemmProblem, objective: str = "time",
               sampler: str = "tpe") -> str:
    """One study per family, GPU, problem (its layout too), template version and objective; a sampler other
    than TPE, and a space with pinned knobs (``--pin``), keep a study of their own."""
    layout = "" if problem.layout == "row" else f"/{problem.layout}"
    name = (
        f"{space.family}/{gpu_key}/{problem.shape}/{problem.dtype}{layout}/"
        f"alpha{problem.alpha:g}/beta{problem.beta:g}/{space.template_hash}"
    )
    name = name if objective == "time" else f"{name}/{objective}"
    if space.pins:
        name += "/pin:" + ";".join(f"{knob}={','.join(map(str, values))}" for knob, values in space.pins.items())
    return name if sampler == "tpe" else f"{name}/{sampler}"


class Search:
    """One study over one space, GPU model and problem, on one or more GPU workers.

    ``worker`` is a :class:`~autotune.gpu.worker.GpuWorker` or a list of them (one per GPU,
    all of one model); workers may still be starting (:meth:`GpuWorker.begin`).
    ``on_environment`` is called with the GPU's environment once the first worker has
    started, before anything is measured; it may raise to stop the search. ``pool`` is a
    compile pool the caller started early (and closes); by default the search makes its own.
    ``warm_start`` configs (e.g. the best of nearby tuned shapes) are tried before the space's
    seeds, each once; those the static rules reject for this problem are skipped.
    ``opening`` is the opening drawn (and compiling in ``pool``) before the search was made
    (:mod:`autotune.search.start`): the search takes it, its warm start and its draws over.
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
        opening: Opening | None = None,
    ):
        self.space, self.gpu, self.problem = space, gpu, problem
        self.pool = pool
        self._store = store
        self.settings = settings
        self.workers = list(worker) if isinstance(worker, (list, tuple)) else [worker]
        self.on_progress, self.on_environment = on_progress, on_environment
        self.env: Environment | None = None
        self.name = study_name(space, gpu.key, problem, settings.objective, settings.sampler)
        self.proposer = Proposer(space, gpu, problem, seed=stream_seed(settings.seed, self.workers[0].device),
                                 warm_start=opening.draws.warm_start if opening else warm_start,
                                 sampler=settings.sampler)
        self.opening: tuple[Config, ...] | None = None  # drawn before the search was made
        if opening is not None:
            self.proposer.take_over(opening.draws)
            self.opening = opening.configs
        self.timeline = timeline
        self.spent = TimeSpent(timeline)
        self.measuring = Measuring.of(problem, settings)
        self.standing = Standing(make_objective(settings.objective))
        self.events: queue.Queue = queue.Queue()  # finished compiles (futures) and lane results
        self.compiles = CompilePipeline(space, gpu, self.proposer, self.measuring, settings, self.standing,
                                        self.events, self.spent, timeline, self._build_failed)
        self.dispatch = Dispatch(settings, self.measuring, self.standing, self.spent, timeline)
        self.recording: Recording | None = None  # once the GPU's environment is known
        self._stale_checked = time.monotonic()  # when other processes' stale trials were last failed

    @property
    def store(self) -> ResultStore:
        """The results database (opened here on first use when the search was given an opener)."""
        if not isinstance(self._store, ResultStore):
            with span(self.timeline, SEARCH, "open database"):
                self._store = self._store()
        return self._store

    @property
    def objective(self) -> Objective:
        """What the search minimises (:mod:`autotune.search.objective`)."""
        return self.standing.objective

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
        self.compiles.open(pool, self.opening)  # while the study opens and the GPU workers start
        lanes = [GpuLane(i, worker, self.events) for i, worker in enumerate(self.workers)]
        hellos = self.dispatch.start_references(lanes)  # each lane's yardstick, measured while the study opens
        ledger: StudyLedger | None = None
        try:
            with span(self.timeline, SEARCH, "open study"):
                ledger = StudyLedger(self.store.url, self.name, list(self.objective.directions),
                                     self.proposer.distributions, self.settings.trials, self.settings.heartbeat_s,
                                     self.settings.grace_s, sampler=self.proposer.sampler)
            ledger.fail_stale()
            view = ledger.view()
            progress = self._start_progress(view)
            self.compiles.fill(ledger, view, pool, lanes=1)  # while the GPU workers start
            self._start_environment(hellos)
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
            self.standing.learn(view)
            if view.evaluated >= self.settings.trials or self._out_of_time(started):
                return
            full = self.dispatch.hand_out(ledger, lanes, self.compiles.ready)  # the GPUs first: compiles can wait
            self.compiles.fill(ledger, ledger.view(), pool, len(lanes))
            idle = not (self.compiles.busy or any(lane.queued for lane in lanes))
            if idle:  # nothing of ours in flight: decide on the study as it is now
                view = ledger.view(fresh=True)
                if view.evaluated >= self.settings.trials:
                    continue
                if not view.running_elsewhere:
                    if self.compiles.exhausted:
                        return  # every feasible config is taken
                    continue  # the budget has room again
            if idle or full:  # waiting for slots held elsewhere: they finish, or their process died
                self._fail_stale(ledger)
            try:
                event = self.events.get(timeout=IDLE_POLL_S if idle else self.settings.heartbeat_s)
            except queue.Empty:
                continue
            self._handle(ledger, event, progress)

    def _stop_lanes(self, ledger: StudyLedger, lanes: list[GpuLane], progress: Progress) -> None:
        """Give back the slots of candidates not started, record the running ones, stop the threads."""
        self.dispatch.withdraw(ledger, lanes)
        while any(lane.queued for lane in lanes):
            self._handle(ledger, self.events.get(), progress)
        while True:  # compile results that arrived meanwhile: nothing to do with them
            try:
                self.events.get_nowait()
            except queue.Empty:
                return

    def _fail_stale(self, ledger: StudyLedger) -> None:
        """Fail other processes' stale trials, at most once per heartbeat."""
        now = time.monotonic()
        if now - self._stale_checked >= self.settings.heartbeat_s:
            self._stale_checked = now
            ledger.fail_stale()

    def _out_of_time(self, started: float) -> bool:
        return self.settings.timeout_s is not None and time.monotonic() - started > self.settings.timeout_s

    # -- events ------------------------------------------------------------------------

    def _handle(self, ledger: StudyLedger, event, progress: Progress) -> None:
        """A finished compile (its future), or a lane's result: ``(lane, tag, result)``."""
        if not isinstance(event, tuple):
            self.compiles.take(ledger, event)
            return
        lane, tag, result = event
        lane.queued -= 1
        if isinstance(result, BaseException):
            raise result
        if tag == REFERENCE:
            self.recording.reference(*result, first=lane.index == 0)
            if lane.index == 0:
                progress.cublas_ms = self.standing.cublas.timing.median_ms
                progress.cublas_mj = per_gemm_mj(self.standing.cublas_window)
                self.on_progress(progress)
            return
        task, outcome, window = result
        with self.spent.on("record"):
            self.recording.evaluation(ledger, tag, task, outcome, window)
        progress.evaluated += 1
        progress.last = tag.config.name
        self._note(progress, tag.config, outcome)
        self.on_progress(progress)

    def _build_failed(self, ledger: StudyLedger, config: Config, failure: Failure) -> None:
        """A candidate whose build failed (the compile pipeline's report): recorded, never run."""
        self.recording.compile_failure(ledger, config, failure)

    # -- bookkeeping -------------------------------------------------------------------

    def _start_environment(self, hellos: list) -> None:
        """Wait for the workers' hellos (the futures of their lanes): every worker must see the same GPU model."""
        envs = [hello.result() for hello in hellos]
        different = [env for env in envs if env.gpu_name != envs[0].gpu_name]
        if different:
            raise SearchError(f"the GPU workers see different GPUs: {envs[0].gpu_name!r} and {different[0].gpu_name!r}")
        self.on_environment(envs[0])
        self.env = envs[0]
        recorder = Recorder(self.store, self.env, self.problem, self.name)
        self.recording = Recording(recorder, self.space, self.standing, self.settings.warmup)

    def _start_progress(self, view: StudyView) -> Progress:
        """Progress from the trials already in the study; earlier measurements replayed into the objective
        (its front and power floor)."""
        progress = Progress(view.evaluated, self.settings.trials, None, None, None, self.problem)
        for trial in view.measured:
            self.objective.observe(trial_ms(trial), trial.user_attrs.get("energy_mj"), trial.user_attrs.get("power_w"))
        self.standing.learn(view)
        if self.standing.best is not None:
            progress.best_ms, progress.best_name = self.standing.best
        self._note_energy(progress)
        return progress

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

    # -- the result ------------------------------------------------------------------------

    def _result(self, view: StudyView, worker: GpuWorker) -> SearchResult:
        """The study's outcome, with the best config and cuBLAS measured again side by side."""
        standing = self.standing
        common = dict(objective=self.objective.name, screened=self.proposer.rejected, raced=standing.raced)
        failures = dict(standing.failures)
        if standing.cublas is None:
            raise SearchError("the search ended before cuBLAS was measured")
        if not view.measured:
            return SearchResult(self.name, view.evaluated, None, None, standing.cublas, failures,
                                cublas_window=standing.cublas_window, **common)
        closing = ClosingMeasurement(self.space, self.gpu, self.measuring, standing, self.recording.recorder)
        final = closing.run(view, worker)
        return SearchResult(self.name, view.evaluated, final.config, final.best, final.cublas, failures,
                            best_window=final.best_window, cublas_window=final.cublas_window, front=final.front,
                            **common)
