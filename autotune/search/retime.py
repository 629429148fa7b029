"""The fastest kernels of each tuned shape measured again, in rounds beside cuBLAS: what a table picks by.

    results (each shape's fastest configs, each measured once by a search) -> the same configs and
    cuBLAS, verified and timed in rounds, the order rotated each round -> the database (study "retime")

A search keeps each config's one measurement, and its fastest config is the fastest of many that
are close: the luckiest measurement as much as the fastest kernel. A table built from those times
promises more than the kernels give, and where the promise beats cuBLAS by less than the luck, it
sends the shape to a kernel that is slower than cuBLAS there. :class:`Retime` measures each shape's
``top`` fastest distinct configs and cuBLAS again, ``rounds`` times each, through the evaluation
path every search uses (:mod:`autotune.search.evaluate`); in each round the order is rotated, so
that no kernel always runs first. The rounds are stored under the study label
:data:`~autotune.results.RETIMED`, and a table judges a shape measured again by those kernels'
median times alone, against cuBLAS's median there (:meth:`ResultStore.retimed`). A run again measures
only the configs not measured again before (with cuBLAS), and skips a shape where there are none.
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
from autotune.results import RETIMED, ResultStore
from autotune.search.evaluate import Measuring, Recorder, run_candidate, run_cublas
from autotune.search.planned import Planned, fastest_configs
from autotune.search.settings import SearchSettings
from autotune.space.family import shipped_families

RETIME_TOP = 3  # configs per shape by default
RETIME_ROUNDS = 5  # rounds by default: each config and cuBLAS measured this many times


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
    the static rules still admit on ``gpu`` (:func:`fastest_configs`), those not measured again before; and how
    many problems had every one of them measured again before (and are left out).

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
        measured = {row.config_name for row in store.retimed(gpu_key, problem)}
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
        progress = RetimeProgress(0, sum(self.rounds * (1 + len(shape.configs)) for shape in self.planned))
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
            failed += self._shape(shape, compiles, Recorder(self.store, env, shape.problem, RETIMED), evaluated)
            done += 1
        return RetimeResult(done, len(distinct), failed, self.earlier, True)

    def _shape(self, shape: Planned, compiles: dict, recorder: Recorder, evaluated: Callable[[], None]) -> int:
        """Measure one shape's configs and cuBLAS, round after round; how many configs failed."""
        problem = shape.problem
        measuring = Measuring.of(problem, self.settings)
        tasks, failed = {}, 0
        for space, config in shape.configs:
            built = finish_build(space, config, compile_result(compiles[config]), self.gpu, problem)
            if isinstance(built, Failure):
                recorder.failure(space, config, built)
                failed += 1
            else:
                tasks[config] = (space, measuring.task(built))
        cublas_ms = 0.0  # round 0 starts with cuBLAS, whose time sets the candidates' timeout
        for turn in range(self.rounds):
            for config in rotated([None, *tasks], turn):
                if config is None:
                    cublas = run_cublas(self.worker, measuring)
                    recorder.cublas(cublas)
                    cublas_ms = cublas.timing.median_ms
                elif config in tasks:
                    space, task = tasks[config]
                    outcome = run_candidate(self.worker, task, measuring, cublas_ms)
                    recorder.outcome(space, config, outcome)
                    if isinstance(outcome, Failure):
                        del tasks[config]  # its other rounds are skipped
                        failed += 1
                evaluated()
        return failed
