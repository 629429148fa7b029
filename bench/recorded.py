"""The best config recorded in a results database, as a GPU task (shared by the bench scripts)."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator

from autotune.gpu.worker import GpuWorker
from autotune.gpu_specs import GPUS
from autotune.kernel.build import build_kernel
from autotune.problem import make_problem
from autotune.records import Failure
from autotune.results import ResultStore, default_url
from autotune.search.evaluate import Measuring
from autotune.space.family import families_for_dtype, load_space


def add_problem_arguments(parser: argparse.ArgumentParser, shape: str, dtype: str) -> None:
    """``--shape``, ``--dtype`` and ``--db``, with the script's defaults."""
    parser.add_argument("--shape", default=shape)
    parser.add_argument("--dtype", default=dtype)
    parser.add_argument("--db", default=None)


@contextlib.contextmanager
def best_recorded(args: argparse.Namespace, warmup: int = 3, repeats: int = 10) -> Iterator[tuple]:
    """``(worker, problem, config, task)``: a GPU worker and the best recorded config's task for the
    attached GPU and ``args``' problem; prints which config it is."""
    problem = make_problem(args.shape, args.dtype)
    store = ResultStore(args.db or default_url())
    with GpuWorker() as worker:
        gpu = GPUS[worker.environment().gpu_key]
        config, task = best_task(store, gpu, problem, warmup, repeats)
        print(f"{problem.shape} {problem.dtype} on {gpu.key}: {config.name}")
        yield worker, problem, config, task


def best_task(store, gpu, problem, warmup: int = 3, repeats: int = 10):
    """``(config, task)`` of the fastest config recorded for ``gpu`` and ``problem`` (any searchable
    family) that still compiles clean here, else of the first seed of the dtype's default family."""
    rows = [r for r in store.best(gpu.key, problem, limit=20) if load_space(r.family).priority >= 0]
    fallback = load_space(families_for_dtype(problem.dtype)[0])
    candidates = [(load_space(r.family), load_space(r.family).config(r.params)) for r in rows] \
        or [(fallback, fallback.seeds[0])]
    for space, config in candidates:
        built = build_kernel(space, config, gpu, problem)
        if not isinstance(built, Failure):
            return config, Measuring(problem, 0, warmup, repeats).task(built)
        print(f"skipped {config.name}: {built.message}")
    raise SystemExit("no recorded config compiles clean here")
