"""The fastest kernels of each tuned shape measured again, in rounds beside cuBLAS: what a table picks by.

    results (each shape's fastest configs, each measured once by a search) -> the same configs and
    cuBLAS, verified and timed in rounds, the order rotated each round -> the database (study "retime")

A search keeps each config's one measurement, and its fastest config is the fastest of many that
are close: the luckiest measurement as much as the fastest kernel. A table built from those times
promises more than the kernels give, and where the promise beats cuBLAS by less than the luck, it
sends the shape to a kernel that is slower than cuBLAS there. :class:`Retime` measures each shape's
``top`` fastest distinct configs and cuBLAS again, ``rounds`` times each, through the evaluation
path every search uses (:mod:`autotune.search.evaluate`); in each round the order is rotated, so
that no kernel always runs first. Each round times every kernel twice: flushed, as a search does, and
back to back (:data:`BACK_TO_BACK` launches between one pair of events, no L2 flush), as a model runs its
GEMMs; flushed timing leaves the GPU idle while the flush runs, and a kernel that draws more power than
cuBLAS can look faster flushed than it is in a model. The rounds are stored under the study labels
:data:`~autotune.results.RETIMED` and :data:`~autotune.results.RETIMED_BACK_TO_BACK`, and a table judges a
shape measured again by those kernels' median times alone, against cuBLAS's median there, each kernel by the
worse of its two ratios to cuBLAS (:meth:`ResultStore.retimed`). A run again measures only the configs not
measured again both ways before (with cuBLAS), and skips a shape where there are none.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

from autotune.errors import InputError
from autotune.gpu.worker import GpuWorker
from autotune.gpu_specs import GpuSpec
from autotune.kernel.build import compile_result, finish_build
from autotune.kernel.compile import CompilePool
from autotune.kernel.render import render
from autotune.records import Failure
from autotune.results import RETIMED, RETIMED_BACK_TO_BACK, ResultStore
from autotune.search.evaluate import Measuring, Recorder, run_candidate, run_cublas
from autotune.search.planned import Planned, fastest_configs
from autotune.search.settings import SearchSettings
from autotune.space.family import shipped_families

RETIME_TOP = 3  # configs per shape by default
RETIME_ROUNDS = 5  # rounds by default: each config and cuBLAS measured this many times
BACK_TO_BACK = 10  # launches per sample of the rounds timed back to back
MIN_BACK_TO_BACK_SAMPLES = 5  # back to back, a quarter of the flushed samples, at least this many


@dataclasses.dataclass
class RetimeProgress:
    evaluated: int  # GPU evaluations done: cuBLAS and candidates, every round
    target: int
    elapsed_s: float = 0.0


@dataclasses.dataclass(frozen=True)
class RetimeResult:
    shapes: int  # shapes measured again in this run
    configs: int  # distinct configs compiled
    failed: int  # configs that failed when measured again (recorded; their other rounds skipped)
    earlier: int  # shapes measured again before this run
    complete: bool  # False when the run stopped at its time limit


def plan(store: ResultStore, gpu: GpuSpec, gpu_key: str, dtype: str, layout: str, top: int,
         shapes: Sequence[tuple[int, int, int]] | None = None) -> tuple[list[Planned], int]:
    """For each problem of ``dtype`` and ``layout`` with candidate results on ``gpu_key`` (only those of
    ``shapes``, when given), the smallest first (a run stopped at its time limit has covered the most shapes, and
    the short kernels, whose times vary most): of its ``top`` fastest distinct configs of a shipped family that
    the static rules still admit on ``gpu`` (:func:`fastest_configs`), those not measured again both ways before;
    and how many problems had every one of them measured again before (and are left out).

    Raises:
        InputError: ``top`` is below 1.
    """
    if top < 1:
        raise InputError("--top", top, "a number of configs per shape >= 1")
    families = set(shipped_families())
    wanted = None if shapes is None else set(shapes)
    planned, earlier = [], 0
    for problem in sorted(store.problems(gpu_key, dtype, layout), key=lambda p: (p.m * p.n * p.k, p.shape)):
        if wanted is not None and (problem.m, problem.n, problem.k) not in wanted:
            continue
        measured = store.retimed_both_ways(gpu_key, problem)
        configs = fastest_configs(store, gpu_key, problem, problem, gpu, families, top)
        missing = tuple((space, config) for space, config in configs if config.name not in measured)
        if measured and not missing:
            earlier += 1
        elif missing:
            planned.append(Planned(problem, missing))
    return planned, earlier


def rotated(items: Sequence, turn: int) -> list:
    """``items`` rotated left by ``turn``: round r starts with the r-th item."""
    if not items:
        return []
    turn %= len(items)
    return [*items[turn:], *items[:turn]]


class Retime:
    """Measures a :func:`plan` again on one GPU worker and one compile pool, ``rounds`` times;
    ``on_progress`` hears each evaluation."""

    def __init__(self, planned: Sequence[Planned], gpu: GpuSpec, store: ResultStore, worker: GpuWorker,
                 pool: CompilePool, rounds: int = RETIME_ROUNDS, earlier: int = 0,
                 settings: SearchSettings = SearchSettings(), timeout_s: float | None = None,
                 on_progress: Callable[[RetimeProgress], None] = lambda progress: None):
        if rounds < 1:
            raise InputError("--rounds", rounds, "a number of rounds >= 1")
        self.planned, self.gpu, self.store, self.worker, self.pool = list(planned), gpu, store, worker, pool
        self.rounds, self.earlier = rounds, earlier
        self.settings, self.timeout_s, self.on_progress = settings, timeout_s, on_progress

    def run(self) -> RetimeResult:
        started = time.monotonic()
        env = self.worker.environment()
        distinct = {config: space for shape in self.planned for space, config in shape.configs}
        compiles = {config: self.pool.submit(render(space, config, self.gpu)) for config, space in distinct.items()}
        progress = RetimeProgress(0, sum(2 * self.rounds * (1 + len(shape.configs)) for shape in self.planned))
        done = failed = 0

        def evaluated() -> None:
            progress.evaluated += 1
            progress.elapsed_s = time.monotonic() - started
            self.on_progress(progress)

        for shape in self.planned:
            if self.timeout_s is not None and time.monotonic() - started >= self.timeout_s:
                for future in compiles.values():
                    future.cancel()
                return RetimeResult(done, len(distinct), failed, self.earlier, False)
            recorders = (Recorder(self.store, env, shape.problem, RETIMED),
                         Recorder(self.store, env, shape.problem, RETIMED_BACK_TO_BACK))
            failed += self._shape(shape, compiles, recorders, evaluated)
            done += 1
        return RetimeResult(done, len(distinct), failed, self.earlier, True)

    def _shape(self, shape: Planned, compiles: dict, recorders: tuple[Recorder, Recorder],
               evaluated: Callable[[], None]) -> int:
        """Measure one shape's configs and cuBLAS, round after round, each round flushed and then back to back
        (``recorders`` store each way's); how many configs failed."""
        problem = shape.problem
        flushed = Measuring.of(problem, self.settings)
        ways = (flushed, dataclasses.replace(flushed, back_to_back=BACK_TO_BACK,
                                             repeats=max(MIN_BACK_TO_BACK_SAMPLES, flushed.repeats // 4)))
        tasks, failed = {}, 0
        for space, config in shape.configs:
            built = finish_build(space, config, compile_result(compiles[config]), self.gpu, problem)
            if isinstance(built, Failure):
                recorders[0].failure(space, config, built)
                failed += 1
            else:
                tasks[config] = (space, [measuring.task(built) for measuring in ways])
        cublas_ms = [0.0, 0.0]  # round 0 starts with cuBLAS, whose time sets the candidates' timeout
        for turn in range(self.rounds):
            for way, (measuring, recorder) in enumerate(zip(ways, recorders)):
                for config in rotated([None, *tasks], turn):
                    if config is None:
                        cublas = run_cublas(self.worker, measuring)
                        recorder.cublas(cublas)
                        cublas_ms[way] = cublas.timing.median_ms
                    elif config in tasks:
                        space, timed = tasks[config]
                        outcome = run_candidate(self.worker, timed[way], measuring, cublas_ms[way])
                        recorder.outcome(space, config, outcome)
                        if isinstance(outcome, Failure):
                            del tasks[config]  # its other rounds are skipped
                            failed += 1
                    evaluated()
        return failed
