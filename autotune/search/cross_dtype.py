"""Configs tuned in one dtype, measured in another: a first table for a dtype nobody searched yet.

    results of --from-dtype (each shape's fastest configs) -> the same configs built for --dtype
    -> verified and timed at the same shapes, with cuBLAS, as a search measures them -> the database

A family that serves several dtypes (``dtypes = ["f16", "bf16"]``) renders one template for each, so a
config fast in fp16 is a good first guess in bf16: the same tiles, the same pipeline, operands of the
same width. :class:`CrossDtype` takes, for every shape with results of ``from_dtype`` on the GPU, its
``top`` fastest distinct configs whose family serves ``dtype``, and measures them at that shape in
``dtype`` through the evaluation path every search uses (:mod:`autotune.search.evaluate`): cuBLAS
first (the reference, and the yardstick of the candidates' timeouts), then each config, each
compiled once for all shapes. Everything is stored as ordinary measurements under the study label
``cross-dtype/<from_dtype>``, so ``autotune table --dtype <dtype>`` builds a table from them. A run
again skips the (config, shape) pairs that have a result and the shapes whose cuBLAS is stored.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

from autotune.errors import InputError
from autotune.gpu.worker import GpuWorker
from autotune.gpu_specs import FAKE_SUFFIX, GpuSpec
from autotune.kernel.build import compile_result, finish_build
from autotune.kernel.compile import CompilePool
from autotune.kernel.render import render
from autotune.records import Failure
from autotune.results import ResultStore
from autotune.search.evaluate import Measuring, Recorder, run_candidate, run_cublas
from autotune.search.planned import Planned, fastest_configs
from autotune.search.settings import SearchSettings
from autotune.search.sweep import measured_configs
from autotune.space.family import load_space, shipped_families

STUDY = "cross-dtype"  # the study label of its measurements: "cross-dtype/<from_dtype>"
CROSS_DTYPE_TOP = 3  # configs per shape by default


@dataclasses.dataclass
class CrossDtypeProgress:
    evaluated: int  # GPU evaluations done: cuBLAS and candidates
    target: int
    elapsed_s: float = 0.0


@dataclasses.dataclass(frozen=True)
class CrossDtypeResult:
    shapes: int
    configs: int  # distinct configs compiled
    measured: int
    failed: int
    earlier: int  # pairs with a result before this run
    complete: bool  # False when the run stopped at its time limit


def source_gpu_key(gpu_key: str) -> str:
    """The GPU whose results give the configs: the attached one; the fake backend's stands in for the real
    GPU of its model (``h200-fake`` takes ``h200``'s results), whose configs it then times in simulation."""
    return gpu_key.removesuffix(FAKE_SUFFIX)


def plan(store: ResultStore, gpu: GpuSpec, source_key: str, from_dtype: str, dtype: str, top: int,
         shapes: Sequence[tuple[int, int, int]] | None = None, layout: str = "row") -> list[Planned]:
    """For each problem of ``layout`` with ``from_dtype`` results on ``source_key`` (only those of ``shapes``, when given):
    its ``top`` fastest distinct configs whose shipped family serves ``dtype``, built for ``dtype``, that
    the static rules admit on ``gpu`` at that problem.

    Raises:
        InputError: ``from_dtype`` equals ``dtype``, ``top`` is below 1, or no shipped family serves both.
    """
    if from_dtype == dtype:
        raise InputError("--from-dtype", from_dtype, f"a dtype other than --dtype {dtype}")
    if top < 1:
        raise InputError("--top", top, "a number of configs per shape >= 1")
    families = {name for name in shipped_families() if {from_dtype, dtype} <= set(load_space(name).dtypes)
                and layout in load_space(name).layouts}
    if not families:
        raise InputError("--from-dtype", from_dtype, f"a dtype whose families also serve {dtype}: "
                         + ", ".join(sorted({d for name in shipped_families() if dtype in load_space(name).dtypes
                                             for d in load_space(name).dtypes} - {dtype})))
    wanted = None if shapes is None else set(shapes)
    planned = []
    for source in store.problems(source_key, from_dtype, layout):
        if wanted is not None and (source.m, source.n, source.k) not in wanted:
            continue
        problem = dataclasses.replace(source, dtype=dtype)
        configs = fastest_configs(store, source_key, source, problem, gpu, families, top)
        if configs:
            planned.append(Planned(problem, tuple(configs)))
    return planned


class CrossDtype:
    """Measures a :func:`plan` on one GPU worker and one compile pool; ``on_progress`` hears each evaluation."""

    def __init__(self, planned: Sequence[Planned], gpu: GpuSpec, store: ResultStore, worker: GpuWorker,
                 pool: CompilePool, from_dtype: str, settings: SearchSettings = SearchSettings(),
                 timeout_s: float | None = None,
                 on_progress: Callable[[CrossDtypeProgress], None] = lambda progress: None):
        self.planned, self.gpu, self.store, self.worker, self.pool = list(planned), gpu, store, worker, pool
        self.study = f"{STUDY}/{from_dtype}"
        self.settings, self.timeout_s, self.on_progress = settings, timeout_s, on_progress

    def run(self) -> CrossDtypeResult:
        started = time.monotonic()
        env = self.worker.environment()
        pending, earlier = [], 0
        for shape in self.planned:
            by_family: dict[str, set[str]] = {}
            todo = []
            for space, config in shape.configs:
                if space.family not in by_family:
                    by_family[space.family] = measured_configs(self.store, env.gpu_key, shape.problem, space)
                if config.name in by_family[space.family]:
                    earlier += 1
                else:
                    todo.append((space, config))
            cublas_ms = self.store.cublas_reference(env.gpu_key, shape.problem)
            if todo or cublas_ms is None:
                pending.append((shape.problem, cublas_ms, todo))
        distinct = {config: space for _, _, todo in pending for space, config in todo}
        compiles = {config: self.pool.submit(render(space, config, self.gpu)) for config, space in distinct.items()}
        progress = CrossDtypeProgress(0, sum((cublas_ms is None) + len(todo) for _, cublas_ms, todo in pending))
        measured = failed = 0

        def evaluated() -> None:
            progress.evaluated += 1
            progress.elapsed_s = time.monotonic() - started
            self.on_progress(progress)

        for problem, cublas_ms, todo in pending:
            if self.timeout_s is not None and time.monotonic() - started >= self.timeout_s:
                for future in compiles.values():
                    future.cancel()
                return CrossDtypeResult(len(self.planned), len(distinct), measured, failed, earlier, False)
            measuring = Measuring.of(problem, self.settings)
            recorder = Recorder(self.store, env, problem, self.study)
            if cublas_ms is None:
                cublas = run_cublas(self.worker, measuring)
                recorder.cublas(cublas)
                cublas_ms = cublas.timing.median_ms
                evaluated()
            for space, config in todo:
                built = finish_build(space, config, compile_result(compiles[config]), self.gpu, problem)
                outcome = built if isinstance(built, Failure) else run_candidate(
                    self.worker, measuring.task(built), measuring, cublas_ms)
                recorder.outcome(space, config, outcome)
                failed += isinstance(outcome, Failure)
                measured += not isinstance(outcome, Failure)
                evaluated()
        return CrossDtypeResult(len(self.planned), len(distinct), measured, failed, earlier, True)
