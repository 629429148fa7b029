"""``autotune query``: the best recorded configs, by time or energy, or the time/energy front."""

from __future__ import annotations

import argparse
import dataclasses
import json

from autotune.cli.arguments import (
    add_db_argument,
    add_problem_arguments,
    offline_gpu,
    open_store,
    require_positive,
)
from autotune.errors import InputError
from autotune.gpus import AUTO, GpuSpec, gpu_spec
from autotune.objective import Point, pareto_front
from autotune.problem import GemmProblem, make_problem
from autotune.report import ratio_text, table
from autotune.space import load_space


def register(sub) -> None:
    query = sub.add_parser(
        "query", help="show the best recorded configs for a GPU and shape",
        epilog="example: autotune query --gpu h200 --shape 4096 --dtype f32",
    )
    add_problem_arguments(query)
    add_db_argument(query)
    query.add_argument("--limit", type=int, default=10, help="rows to show (default 10)")
    query.add_argument("--objective", default="time",
                       help="order by time (default) or energy, or show the pareto front of time and energy")
    query.add_argument("--json", action="store_true", help="machine-readable output")
    query.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    problem = make_problem(args.shape, args.dtype)
    gpu = gpu_spec(args.gpu) if args.gpu.lower() != AUTO else offline_gpu(args.gpu)
    require_positive("--limit", args.limit)
    if args.objective not in ("time", "energy", "pareto"):
        raise InputError("--objective", args.objective, "time, energy or pareto")
    store = open_store(args.db)
    if args.objective != "time":
        return _query_energy(store, gpu, problem, args)
    if args.family:
        load_space(args.family)  # an unknown family is an error that lists the known ones
        rows = [r for r in store.best(gpu.key, problem, limit=10_000) if r.family == args.family][: args.limit]
    else:
        rows = store.best(gpu.key, problem, limit=args.limit)
    if args.json:
        print(json.dumps([{
            "config": r.config_name, "family": r.family, "params": r.params, "median_ms": r.median_ms,
            "tflops": r.tflops, "cublas_median_ms": r.cublas_median_ms, "ratio_to_cublas": r.ratio_to_cublas,
            "gpu_name": r.gpu_name, "arch": r.arch, "driver": r.driver, "measured_at": str(r.measured_at),
        } for r in rows], indent=2))
        return 0
    if not rows:
        print(f"no results for {gpu.key} {problem.shape} {problem.dtype} in {store.url}")
        return 0
    print(f"best configs for {gpu.key} {problem.shape} {problem.dtype} ({store.url}):")
    print(table(["config", "ms", "TFLOP/s", "vs cuBLAS", "driver", "measured"],
                [[r.config_name, r.median_ms, r.tflops, ratio_text(r.median_ms, r.cublas_median_ms), r.driver,
                  str(r.measured_at)[:19]] for r in rows]))
    return 0


def _query_energy(store, gpu: GpuSpec, problem: GemmProblem, args: argparse.Namespace) -> int:
    """Energy windows for a shape: the most frugal first, or the time/energy front."""
    rows = store.energy(gpu.key, problem)
    candidates = [r for r in rows if r.config_name != "cublas"]
    cublas = [r for r in rows if r.config_name == "cublas"]
    if args.objective == "pareto":
        by_point = {Point(r.median_ms, r.energy_per_gemm_j * 1e3): r for r in candidates}
        shown = [by_point[p] for p in pareto_front(list(by_point))]
    else:
        shown = sorted(candidates, key=lambda r: r.energy_per_gemm_j)[: args.limit]
    reference = cublas[-1] if cublas else None
    if args.json:
        print(json.dumps({
            "objective": args.objective,
            "rows": [dataclasses.asdict(r) for r in shown],
            "cublas": dataclasses.asdict(reference) if reference else None,
        }, indent=2))
        return 0
    if not shown:
        print(f"no energy measurements for {gpu.key} {problem.shape} {problem.dtype} in {store.url}")
        return 0
    title = "time/energy front" if args.objective == "pareto" else "most frugal configs"
    print(f"{title} for {gpu.key} {problem.shape} {problem.dtype} ({store.url}):")
    table_rows = [[r.config_name, r.median_ms, r.energy_per_gemm_j * 1e3, r.mean_power_w, r.sm_clock_mhz_mean,
                   "yes" if r.throttled else "no"] for r in shown + ([reference] if reference else [])]
    print(table(["config", "ms", "mJ", "W", "SM MHz", "throttled"], table_rows))
    return 0
