"""The GPU side of a search: built candidates handed to the GPU lanes, each holding a slot of the study,
and the jobs the lanes run.

Each lane (:mod:`autotune.search.lanes`, one per GPU worker) runs cuBLAS first, its
yardstick, as soon as its worker is up; then candidates, with one queued behind the
running one. A candidate races (time objective) against the best time so far: its
timing stops at the first of RACE_MARGINS' stages where it is clearly slower (one launch
over 1.5x the best, three over 1.2x, ten over 1.05x); its two verification launches are
its warm-up. With an energy objective, the first lane meters cuBLAS, and candidates that
could improve the objective get an energy window too.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import functools

from autotune.gpu.race import RaceStage
from autotune.gpu.worker import GpuWorker
from autotune.records import EnergyWindow, Environment, Failure, Measurement
from autotune.search.compiling import Candidate
from autotune.search.evaluate import Measuring, energy_window, run_candidate, run_cublas
from autotune.search.lanes import GpuLane
from autotune.search.settings import SearchSettings
from autotune.search.standing import Standing
from autotune.search.study import Admission, StudyLedger
from autotune.search.time_spent import TimeSpent
from autotune.search.timeline import Timeline, span

RACE_MARGINS = ((1, 1.5), (3, 1.2), (10, 1.05))  # (timed launches, margin over the best): where a candidate stops
LANE_DEPTH = 2  # jobs per GPU lane: the running one and one queued behind it
REFERENCE = "reference"  # the lane job that measures cuBLAS


class Dispatch:
    """Candidates onto GPU lanes, and the jobs the lanes' threads run."""

    def __init__(self, settings: SearchSettings, measuring: Measuring, standing: Standing, spent: TimeSpent,
                 timeline: Timeline | None):
        self.settings, self.measuring, self.standing = settings, measuring, standing
        self.spent, self.timeline = spent, timeline

    def start_references(self, lanes: list[GpuLane]) -> list[concurrent.futures.Future]:
        """Queue cuBLAS on every lane: each runs it as soon as its worker is up. A lane's thread is the
        one that waits for its worker's hello (a worker is started from one thread only): the futures
        give each worker's environment, or the error that stopped it starting."""
        hellos = []
        for lane in lanes:
            hello: concurrent.futures.Future = concurrent.futures.Future()
            lane.submit(REFERENCE, functools.partial(self._reference_job, lane, hello))
            hellos.append(hello)
        return hellos

    def hand_out(self, ledger: StudyLedger, lanes: list[GpuLane], ready: collections.deque[Candidate]) -> bool:
        """Give each lane a candidate to run next, each holding a slot of the study; True when the
        budget is held in full (by this process or others) and candidates wait."""
        if self.standing.cublas is None and self.standing.objective.uses_energy:
            return False  # energy decisions need cuBLAS's window first (a lane runs its own cuBLAS first anyway)
        while ready:
            lane = min(lanes, key=lambda lane: (lane.queued, lane.submitted))  # the least busy, in turn
            if lane.queued >= LANE_DEPTH:
                return False
            view = ledger.view()  # reserve() decides; this spares it trials it would release at once
            if view.held >= self.settings.trials:
                return True
            candidate = ready.popleft()
            if candidate.config.name in view.taken:
                continue  # another process has it
            with self.spent.on("slots"):
                slot = ledger.reserve(candidate.config, lane.device)
            if slot.admission is Admission.FULL:
                ready.appendleft(candidate)  # a slot may free up if another process died
                return True
            if slot.admission is Admission.DUPLICATE:
                continue  # another process has it
            candidate.trial_id = slot.trial_id
            lane.submit(candidate, functools.partial(self._evaluate, lane, candidate))
        return False

    def withdraw(self, ledger: StudyLedger, lanes: list[GpuLane]) -> None:
        """Give back the slots of candidates not started yet; each lane ends after its running job
        (and its cuBLAS reference, if still waiting)."""
        for lane in lanes:
            for candidate in lane.cancel_waiting(lambda tag: isinstance(tag, Candidate)):
                ledger.release(candidate.trial_id)
            lane.stop()

    # -- the lanes' jobs (run in the lanes' threads) ---------------------------------------------

    def _reference_job(self, lane: GpuLane, hello: concurrent.futures.Future,
                       worker: GpuWorker) -> tuple[Measurement, EnergyWindow | Failure | None]:
        """The worker's hello, then cuBLAS timed on the lane's GPU (and metered on the first, for energy
        objectives)."""
        with self._gpu_span(lane, "cuBLAS"):
            _greet(worker, hello)
            cublas = run_cublas(worker, self.measuring)
        lane.cublas_ms = cublas.timing.median_ms
        metered = self.standing.objective.uses_energy and lane.index == 0
        return cublas, energy_window(worker, self.measuring, None) if metered else None

    def _evaluate(self, lane: GpuLane, candidate: Candidate, worker: GpuWorker):
        """Verify and time a candidate, racing it against the best so far; meter it where it matters."""
        race = self._race()
        task = candidate.task if not race else dataclasses.replace(candidate.task, race=race, warmup=0)
        with self._gpu_span(lane, candidate.config.name):
            outcome = run_candidate(worker, task, self.measuring, lane.cublas_ms)
        window = None
        if isinstance(outcome, Measurement) and self.standing.objective.uses_energy:
            if self.standing.wants_window(outcome.timing.median_ms):
                window = energy_window(worker, self.measuring, task)
        return task, outcome, window

    def _race(self) -> tuple[RaceStage, ...]:
        """The stages a candidate races through now: none before the first result, nor for energy objectives."""
        if not self.settings.race or self.standing.objective.name != "time":
            return ()
        return self.standing.race(RACE_MARGINS)

    def _gpu_span(self, lane: GpuLane, name: str):
        return span(self.timeline, f"GPU {lane.device}", name)


def _greet(worker: GpuWorker, hello: concurrent.futures.Future) -> Environment:
    """Wait for the worker's hello (starting it if need be) and pass its environment on through ``hello``."""
    try:
        env = worker.environment()
    except BaseException as error:
        hello.set_exception(error)
        raise
    hello.set_result(env)
    return env
