"""The optimisation ladder: fixed configs from naive to tensor cores, then the tuned best.

Every rung is rendered from the project's own templates, compiled, verified
against cuBLAS and timed exactly like a search candidate, in one run, next to
cuBLAS. The last rung is the best tuned config in the database for the GPU and
shape, measured again in this run.
"""

from __future__ import annotations

import dataclasses

from autotune.errors import InputError
from autotune.gpu.worker import GpuWorker
from autotune.gpu_specs import GpuSpec
from autotune.kernel.build import compile_result, finish_build
from autotune.kernel.compile import CompilePool
from autotune.kernel.render import render
from autotune.problem import GemmProblem
from autotune.records import Environment, Failure, Measurement
from autotune.results import ResultStore
from autotune.search.evaluate import Measuring, Recorder, run_cublas
from autotune.search.start import GpuRequest, attached_worker
from autotune.space.family import Config, load_space, shipped_families

LADDER_STUDY = "ladder"
RUNG_TIMEOUT_S = 600.0  # a rung's timeout: the naive rungs take far longer than cuBLAS


@dataclasses.dataclass(frozen=True)
class Step:
    label: str
    family: str
    params: dict[str, int]


_WMMA = {"BK": 32, "WARPS_M": 4, "WARPS_N": 4, "PAD": 0, "STAGES": 1, "CP_ASYNC": 0, "SMEM_OPT_IN": 0, "GROUP_M": 1}

LADDERS: dict[str, tuple[Step, ...]] = {
    "f32": (
        Step("naive", "naive_f32", {"BLOCK": 16, "HALF": 0}),
        Step("shared-memory tiling 16x16", "tiled_f32", {"TILE": 16, "HALF": 0}),
        Step("register blocking 4x4, 32x32 tile", "coarse_f32", {"BT": 32, "BK": 32, "CM": 4, "CN": 4, "HALF": 0}),
    ),
    "f16": (
        Step("naive", "naive_f16", {"BLOCK": 16, "HALF": 1}),
        Step("shared-memory tiling 32x32", "tiled_f16", {"TILE": 32, "HALF": 1}),
        Step("thread coarsening 4x4, 64x64 tile", "coarse_f16", {"BT": 64, "BK": 32, "CM": 4, "CN": 4, "HALF": 1}),
        Step("WMMA 16x16x16, 4x4 warps", "hgemm_wmma", {"BM": 64, "BN": 64, **_WMMA}),
        Step("WMMA, 4x4 warps of 2x2 fragments", "hgemm_wmma", {"BM": 128, "BN": 128, **_WMMA}),
    ),
}


@dataclasses.dataclass(frozen=True)
class Rung:
    """One step's outcome (a verified measurement, or why there is none)."""

    label: str
    config: Config | None
    outcome: Measurement | Failure | None  # None: no tuned result to measure


@dataclasses.dataclass(frozen=True)
class Ladder:
    """The ladder measured on one GPU: its rungs and cuBLAS."""

    env: Environment
    rungs: tuple[Rung, ...]
    cublas: Measurement


def climb_attached(gpu: GpuRequest, problem: GemmProblem, db: str | None, repeats: int = 20) -> Ladder:
    """Start a GPU worker (the GPU must be the one ``gpu`` asks for), open the results database at
    ``db`` and :func:`climb` the ladder there."""
    from autotune.results.opening import open_store

    store = open_store(db)
    with attached_worker(gpu) as (worker, spec):
        rungs, cublas = climb(worker, store, spec, problem, repeats=repeats)
        return Ladder(worker.environment(), tuple(rungs), cublas)


def climb(worker: GpuWorker, store: ResultStore, gpu: GpuSpec, problem: GemmProblem,
          seed: int = 0, warmup: int = 3, repeats: int = 20) -> tuple[list[Rung], Measurement]:
    """Measure every rung and cuBLAS in this run; returns the rungs and cuBLAS."""
    recorder = Recorder(store, worker.environment(), problem, LADDER_STUDY)
    measuring = Measuring(problem, seed, warmup, repeats)
    steps = [(step.label, load_space(step.family).config(step.params)) for step in LADDERS[problem.dtype]]
    tuned = _tuned_config(store, gpu, problem)
    steps.append(("tuned (best in the database)", tuned))
    cublas = run_cublas(worker, measuring)
    recorder.cublas(cublas)
    rungs = []
    with CompilePool(min(len(steps), 8)) as pool:
        futures = [(label, config, config and pool.submit(render(load_space(config.family), config, gpu)))
                   for label, config in steps]
        for label, config, future in futures:
            if config is None:
                rungs.append(Rung(label, None, None))
                continue
            space = load_space(config.family)
            built = finish_build(space, config, compile_result(future), gpu, problem)
            outcome = built if isinstance(built, Failure) else worker.run(measuring.task(built),
                                                                          timeout_s=RUNG_TIMEOUT_S)
            if isinstance(outcome, Measurement):
                recorder.measurement(space, config, outcome)
            rungs.append(Rung(label, config, outcome))
    return rungs, cublas


def _tuned_config(store: ResultStore, gpu: GpuSpec, problem: GemmProblem) -> Config | None:
    """The fastest recorded config of a shipped searchable family (not a ladder step) that still
    passes the rules. A row's family is a name, never a path: rows of families that do not ship
    with autotune, or whose knob values the family no longer has, are passed over."""
    rungs = {load_space(step.family).config(step.params).name for steps in LADDERS.values() for step in steps}
    for row in store.best(gpu.key, problem, limit=50):
        if row.config_name in rungs or row.family not in shipped_families():
            continue
        space = load_space(row.family)
        try:
            config = space.config(row.params)
        except InputError:
            continue
        if space.check(config, gpu, problem).feasible:
            return config
    return None
