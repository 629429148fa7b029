"""``autotune ladder``: naive to tensor cores to tuned, each rung verified and timed next to cuBLAS."""

from __future__ import annotations

import argparse

from autotune.cli.arguments import (
    MAX_REPEATS,
    Integer,
    add_backend_argument,
    add_db_argument,
    add_problem_arguments,
    requested_gpu,
)
from autotune.cli.text import ratio_text, table
from autotune.errors import InputError
from autotune.problem import make_problem
from autotune.records import Measurement
from autotune.search.start import GpuRequest


def register(sub) -> None:
    ladder = sub.add_parser(
        "ladder", help="naive -> tiled -> coarsened -> tensor cores -> tuned, measured side by side",
        epilog="example: autotune ladder --gpu h200 --dtype f16 --shape 4096",
    )
    add_problem_arguments(ladder, family=False)
    add_db_argument(ladder)
    ladder.add_argument("--repeats", action=Integer, least=1, most=MAX_REPEATS, default=20,
                        help="timed launches per rung (default 20)")
    add_backend_argument(ladder)
    ladder.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from autotune.search.ladder import LADDERS, climb_attached

    problem = make_problem(args.shape, args.dtype)
    if problem.dtype not in LADDERS:  # bf16's kernels are the fp16 families': its ladder would be f16's
        raise InputError("--dtype", problem.dtype, f"a dtype with a ladder: {', '.join(LADDERS)}")
    requested = requested_gpu(args.gpu)
    ladder = climb_attached(GpuRequest(requested, args.gpu, backend=args.backend), problem, args.db, args.repeats)
    env, rungs, cublas = ladder.env, ladder.rungs, ladder.cublas
    cublas_ms = cublas.timing.median_ms
    print(f"ladder for {problem.shape} {problem.dtype} on {env.gpu_name} ({env.arch}), driver {env.driver}, "
          f"CUDA {env.cuda_runtime}, CuPy {env.cupy}; every rung verified against cuBLAS")
    rows, previous = [], None
    for rung in rungs:
        if isinstance(rung.outcome, Measurement):
            ms = rung.outcome.timing.median_ms
            speedup = f"{previous / ms:.2f}x" if previous else "-"
            rows.append([rung.label, ms, rung.outcome.tflops, speedup, ratio_text(ms, cublas_ms)])
            previous = ms
        else:
            why = "no tuned result in the database: run autotune search first" if rung.outcome is None \
                else f"{rung.outcome.failure_class}: {rung.outcome.message}"
            rows.append([rung.label, None, None, "-", why])
    rows.append(["cuBLAS", cublas_ms, cublas.tflops, "-", "1.000x"])
    print(table(["step", "ms", "TFLOP/s", "vs previous", "vs cuBLAS"], rows))
    for rung in rungs:
        if rung.config is not None:
            print(f"  {rung.label}: {rung.config.name}")
    return 0
