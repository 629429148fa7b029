"""``autotune query``: the best recorded configs, by time or energy, or the time/energy front."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math

from autotune.cli.arguments import (
    MAX_ROWS,
    Integer,
    add_db_argument,
    add_problem_arguments,
    add_wide_argument,
    no_results_hint,
    offline_gpu,
    open_store,
)
from autotune.cli.text import paragraph, printable, ratio_text, same_in_every_row, table, terminal_width
from autotune.errors import InputError
from autotune.gpu_specs import AUTO, GpuSpec, gpu_spec
from autotune.problem import GemmProblem, make_problem
from autotune.search.objective import Point, pareto_front
from autotune.space.family import resolve_family


def register(sub) -> None:
    query = sub.add_parser(
        "query", help="show the best recorded configs for a GPU and shape",
        epilog="example: autotune query --gpu h200 --shape 4096 --dtype f32",
    )
    add_problem_arguments(query, gpu_required=False)
    query.add_argument("--arch", help="answer from every GPU of an architecture, e.g. sm_90 (instead of --gpu)")
    add_db_argument(query)
    query.add_argument("--limit", action=Integer, least=1, most=MAX_ROWS, default=10, help="rows to show (default 10)")
    query.add_argument("--objective", default="time",
                       help="order by time (default) or energy, or show the pareto front of time and energy")
    query.add_argument("--json", action="store_true", help="machine-readable output")
    add_wide_argument(query)
    query.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    problem = make_problem(args.shape, args.dtype, layout=args.layout)
    if (args.gpu is None) == (args.arch is None):
        raise InputError("--gpu/--arch", args.gpu or args.arch or "(neither)", "exactly one of --gpu NAME or --arch sm_XY")
    gpu = None
    if args.gpu is not None:
        gpu = gpu_spec(args.gpu) if args.gpu.lower() != AUTO else offline_gpu(args.gpu)
    if args.objective not in ("time", "energy", "pareto"):
        raise InputError("--objective", args.objective, "time, energy or pareto")
    with open_store(args.db, read_only=True) as store:
        return _answer(store, gpu, problem, args)


def _answer(store, gpu: GpuSpec | None, problem: GemmProblem, args: argparse.Namespace) -> int:
    """Print the best configs (or energy rows) ``args`` asks for, from ``store``."""
    if args.objective != "time":
        if gpu is None:
            raise InputError("--arch", args.arch, "--gpu NAME with --objective energy or pareto")
        return _query_energy(store, gpu, problem, args)
    if args.family:
        args.family = resolve_family(args.family).family  # a shipped name or a path; anything else is an error
    arch = gpu.sm if gpu else _known_arch(args.arch)
    keys = [gpu.key] if gpu else _keys_of_arch(store, arch)
    rows = _best(store, keys, problem, args)
    stand_in = []
    if not rows and gpu is not None:  # no results for this model: those of its architecture, marked
        stand_in = [key for key in _keys_of_arch(store, arch) if key != gpu.key]
        rows = _best(store, stand_in, problem, args)
    scope = gpu.key if gpu else arch
    if args.json:
        print(json.dumps([{
            "config": r.config_name, "family": r.family, "params": r.params, "median_ms": r.median_ms,
            "tflops": r.tflops, "cublas_median_ms": r.cublas_median_ms, "ratio_to_cublas": r.ratio_to_cublas,
            "gpu_name": r.gpu_name, "arch": r.arch, "driver": r.driver, "measured_at": str(r.measured_at),
            "same_architecture_stand_in": bool(stand_in),
        } for r in rows], indent=2))
        return 0
    width = terminal_width(args.wide)
    if not rows:
        print(paragraph(f"no results for {scope} {problem.shape} {problem.dtype} in {store.shown_url}; "
                        f"{_elsewhere(store, keys + stand_in, problem)}", width))
        return 0
    if stand_in:
        print(paragraph(f"no results for {gpu.key} {problem.shape} {problem.dtype}; the nearest are those of "
                        f"{', '.join(stand_in)} (same {arch}), marked *", width))
    print(paragraph(f"best configs for {scope} {problem.shape} {problem.dtype} ({store.shown_url}):", width))
    mark = "*" if stand_in else ""
    headers, cells, same = same_in_every_row(
        ["config", "gpu", "ms", "TFLOP/s", "vs cuBLAS", "driver", "measured"],
        [[r.config_name, r.gpu_name + mark, r.median_ms, r.tflops, ratio_text(r.median_ms, r.cublas_median_ms),
          r.driver, str(r.measured_at)[:19]] for r in rows],
        () if width is None else ("gpu", "driver"))  # fitting a terminal: what every row shares, said once
    if same:
        print(paragraph(f"all measured on {same}", width))
    print(table(headers, cells, width, wrap=["config"]))
    return 0


def _elsewhere(store, keys: list[str], problem: GemmProblem) -> str:
    """Where the results a query found none of are: the shapes the GPUs ``keys`` have results for, or else
    what the database holds."""
    shapes = {p.shape: p for key in keys for p in store.problems(key, problem.dtype)}
    if not shapes:
        return no_results_hint(store)
    nearest = sorted(shapes, key=lambda shape: abs(math.log(shapes[shape].m * shapes[shape].n * shapes[shape].k
                                                            / (problem.m * problem.n * problem.k))))
    return (f"{problem.dtype} results are there for {len(shapes)} other shapes, the nearest in size "
            f"{', '.join(nearest[:3])} (autotune table --gpu {keys[0]} --dtype {problem.dtype} lists them all)")


def _known_arch(arch: str) -> str:
    from autotune.select.kernel_table import spec_for_arch

    return spec_for_arch(arch).sm


def _keys_of_arch(store, arch: str) -> list[str]:
    return sorted({key for key, _, sm in store.gpus() if sm == arch})


def _best(store, keys: list[str], problem: GemmProblem, args: argparse.Namespace) -> list:
    """The fastest rows over the GPUs ``keys`` (of ``--family`` if given), fastest first."""
    limit = 10_000 if args.family else args.limit
    rows = [row for key in keys for row in store.best(key, problem, limit=limit)]
    if args.family:
        rows = [row for row in rows if row.family == args.family]
    return sorted(rows, key=lambda row: row.median_ms)[: args.limit]


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
        print(printable(f"no energy measurements for {gpu.key} {problem.shape} {problem.dtype} in {store.shown_url}"))
        return 0
    title = "time/energy front" if args.objective == "pareto" else "most frugal configs"
    print(printable(f"{title} for {gpu.key} {problem.shape} {problem.dtype} ({store.shown_url}):"))
    table_rows = [[r.config_name, r.median_ms, r.energy_per_gemm_j * 1e3, r.mean_power_w, r.sm_clock_mhz_mean,
                   "yes" if r.throttled else "no"] for r in shown + ([reference] if reference else [])]
    print(table(["config", "ms", "mJ", "W", "SM MHz", "throttled"], table_rows))
    return 0
