"""The compile pipeline ahead of the GPU: proposed configs compiled by a pool of processes and built
into GPU tasks, so that a GPU never waits for a compile that could have started earlier.

    propose -> render -> compile (CPU pool) -> build checks (autotune.kernel.build) -> ready for a GPU

The opening (what the proposer gives first whatever the study holds) starts compiling before
the study is read. After that, every compile process is kept busy while the budget has room
and the proposer has a config to give: once the opening is handed out, compiling waits for its
results, which TPE's proposals are made from. A candidate whose build fails never reaches the
GPU and uses up no budget: it is recorded as a failure with its reason.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import queue
from collections.abc import Callable, Sequence

from autotune.errors import FailureClass, SearchError
from autotune.gpu.tasks import KernelTask
from autotune.gpu_specs import GpuSpec
from autotune.kernel.build import compile_result, finish_build
from autotune.kernel.compile import CompiledKernel, CompileFailure, CompilePool, nvrtc_version
from autotune.kernel.render import render
from autotune.records import Failure
from autotune.search.draws import opening_size
from autotune.search.evaluate import Measuring
from autotune.search.sampler import WAIT, Proposer
from autotune.search.settings import SearchSettings
from autotune.search.standing import Standing
from autotune.search.study import StudyLedger, StudyView
from autotune.search.time_spent import TimeSpent
from autotune.search.timeline import COMPILE, Timeline
from autotune.space.family import Config, SearchSpace

READY_PER_LANE = 4  # candidates TPE proposed, waiting per GPU lane, before compiling pauses
BUDGET_OVERSHOOT = 1.5  # compiles in flight near the end of the budget, per GPU evaluation left, where
                        # the pool cannot stop unfinished compiles (a sweep's, shared by its shapes)


@dataclasses.dataclass
class Candidate:
    """A built config on its way to a GPU."""

    config: Config
    task: KernelTask
    trial_id: int | None = None  # its slot in the study


class CompilePipeline:
    """Configs from the proposer, compiling (:attr:`compiling`) and built, ready for a GPU (:attr:`ready`).

    Each compile's future goes to ``events`` when it finishes; the search hands it back to
    :meth:`take`. ``on_failure(ledger, config, failure)`` records a candidate whose build failed.
    """

    def __init__(self, space: SearchSpace, gpu: GpuSpec, proposer: Proposer, measuring: Measuring,
                 settings: SearchSettings, standing: Standing, events: queue.Queue, spent: TimeSpent,
                 timeline: Timeline | None, on_failure: Callable[[StudyLedger, Config, Failure], None]):
        self.space, self.gpu, self.proposer, self.measuring = space, gpu, proposer, measuring
        self.settings, self.standing, self.events = settings, standing, events
        self.spent, self.timeline, self.on_failure = spent, timeline, on_failure
        self.compiling: dict = {}  # compile future -> config
        self.ready: collections.deque[Candidate] = collections.deque()
        self.exhausted = False  # the proposer found no feasible config left
        self.compiled_any = False

    @property
    def busy(self) -> bool:
        """Whether a config is compiling or a built candidate waits for a GPU."""
        return bool(self.compiling or self.ready)

    def open(self, pool: CompilePool, opening: Sequence[Config] | None = None) -> None:
        """Start compiling, before the study is read, the proposer's opening (what it gives first
        whatever the study holds: the warm-start configs and the space's seeds that the static rules
        admit, then random feasible configs), one per compile process; or ``opening``, drawn by the
        proposer's draws already. Those the study holds already (a resumed search) are dropped once
        compiled."""
        with self.spent.on("propose") as proposals:
            if opening is None:
                opening = self.proposer.opening(opening_size(pool.jobs, self.settings.trials,
                                                             self.proposer.n_startup))
            proposals.count = len(opening)
        for config in opening:
            self.submit(pool, config)

    def fill(self, ledger: StudyLedger, view: StudyView, pool: CompilePool, lanes: int) -> None:
        """Keep every compile process busy while the budget has room and the proposer has a config.

        Once the opening (seeds, warm-start configs, random draws) is handed out, the proposer
        waits for its results: what compiles after it is TPE's, however fast compiles run. Compiling
        then pauses while READY_PER_LANE candidates per lane that TPE proposed wait for a GPU: more
        would be proposed from older results. Near the end of the budget every process keeps
        compiling where the pool can stop them unfinished (the first to finish fill the budget); a
        pool that cannot keeps BUDGET_OVERSHOOT compiles per evaluation left."""
        left = self.settings.trials - view.held
        in_flight = math.inf if pool.stops_unfinished else math.ceil(left * BUDGET_OVERSHOOT)
        while (not self.exhausted and len(self.compiling) < pool.jobs and len(self.ready) < left
               and self.proposed_waiting() < READY_PER_LANE * lanes
               and len(self.compiling) + len(self.ready) < in_flight):
            local = [*self.compiling.values(), *(candidate.config for candidate in self.ready)]
            taken = view.taken | {config.name for config in local}
            with self.spent.on("propose"):
                config = self.proposer.next(ledger.study, view.learnable, taken, in_flight=local)
            if config is WAIT:
                return  # the next event (a result) calls again
            if config is None:
                self.exhausted = True
                return
            self.submit(pool, config)

    def proposed_waiting(self) -> int:
        """Built candidates waiting for a GPU that TPE proposed from the study's results."""
        return sum(candidate.config.name in self.proposer.learned for candidate in self.ready)

    def submit(self, pool: CompilePool, config: Config) -> None:
        future = pool.submit(render(self.space, config, self.gpu))
        self.compiling[future] = config
        future.add_done_callback(self.events.put)

    def take(self, ledger: StudyLedger, future) -> None:
        """A finished compile: built into a candidate ready for a GPU, or recorded as a failure."""
        config = self.compiling.pop(future, None)
        if config is None or future.cancelled():
            return
        compiled = compile_result(future)
        self.spent.add("compile", compiled.seconds)
        if self.timeline is not None and compiled.seconds:
            self.timeline.add(COMPILE, config.name, compiled.started, compiled.seconds,
                              failed=isinstance(compiled, CompileFailure))
        if config.name in ledger.view().taken:
            return  # the study holds it already: a seed of a resumed search, or another process took it
        built = finish_build(self.space, config, compiled, self.gpu, self.measuring.problem)
        if isinstance(built, Failure):
            with self.spent.on("record"):
                self.on_failure(ledger, config, built)
        else:
            self.ready.append(Candidate(config, self.measuring.task(built)))
        self._check_template_compiles(compiled)

    def _check_template_compiles(self, compiled: CompiledKernel | CompileFailure) -> None:
        """Stop a search whose template has compiled for no candidate yet, naming NVRTC's error."""
        if not isinstance(compiled, CompileFailure):
            self.compiled_any = True
            return
        failed = self.standing.failures.get(FailureClass.COMPILE_ERROR.value, 0)  # all of them, while none compiled
        if not self.compiled_any and failed >= self.settings.max_compile_errors:
            raise SearchError(
                f"{self.space.template} does not compile with NVRTC {nvrtc_version()} for "
                f"{self.space.target(self.gpu)}: {failed} candidates in a row failed, the last with: "
                f"{compiled.message}")
