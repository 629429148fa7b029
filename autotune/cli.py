"""The ``autotune`` command line: space, search, query, gpus.

Any :class:`AutotuneError` becomes one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import sys
from collections.abc import Sequence

from autotune import __version__
from autotune.errors import AutotuneError, GpuMismatchError, InputError
from autotune.gpus import AUTO, GPUS, GpuSpec, gpu_spec
from autotune.objective import Point, make_objective, pareto_front
from autotune.problem import DTYPES, GemmProblem, make_problem
from autotune.records import Measurement
from autotune.report import ProgressLine, ratio_text, table
from autotune.space import SearchSpace, Verdict, families_for_dtype, load_space

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument as one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"autotune: error: {message}\n")


def _common(parser: argparse.ArgumentParser, gpu_default: str | None = None) -> None:
    parser.add_argument("--gpu", required=gpu_default is None, default=gpu_default,
                        help=f"GPU model: {', '.join(GPUS)} or {AUTO} (the attached GPU)")
    parser.add_argument("--shape", required=True, help="problem size: 4096 (square) or MxNxK")
    parser.add_argument("--dtype", default="f32", help=f"element type: {', '.join(DTYPES)} (default f32)")
    parser.add_argument("--family", help="kernel family (default: the one for --dtype)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="autotune", description="Autotune CUDA GEMM kernels per shape and GPU.")
    parser.add_argument("--version", action="version", version=f"autotune {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    space = sub.add_parser(
        "space", help="enumerate and compile a search space offline (no GPU needed)",
        epilog="example: autotune space --gpu t4 --shape 4096 --compile 16",
    )
    _common(space)
    space.add_argument("--compile", default="24", metavar="N|all",
                       help="how many feasible configs to compile and report (default 24; seeds first)")
    space.add_argument("--json", action="store_true", help="machine-readable output")
    space.set_defaults(run=cmd_space)

    search = sub.add_parser(
        "search", help="search for the fastest kernel on the attached GPU",
        epilog="example: autotune search --gpu h200 --shape 4096 --dtype f32 --trials 150",
    )
    _common(search)
    search.add_argument("--trials", type=int, default=100, help="GPU evaluations in the study (default 100)")
    search.add_argument("--timeout", type=float, help="stop this run after S seconds")
    search.add_argument("--db", help="SQLAlchemy URL of the results database (default: see README)")
    search.add_argument("--seed", type=int, default=0, help="sampler and input seed (default 0)")
    search.add_argument("--jobs", type=int, help="parallel compile processes (default: CPU count, at most 16)")
    search.add_argument("--repeats", type=int, default=30, help="timed launches per candidate (default 30)")
    search.add_argument("--objective", default="time",
                        help="what to minimise: time (default), energy (J per GEMM), edp (energy x time), "
                             "or pareto (the time/energy front)")
    search.add_argument("--backend", default="cupy", choices=["cupy", "fake"],
                        help="GPU backend: cupy (default), or fake to exercise the pipeline with no GPU")
    search.set_defaults(run=cmd_search)

    query = sub.add_parser(
        "query", help="show the best recorded configs for a GPU and shape",
        epilog="example: autotune query --gpu h200 --shape 4096 --dtype f32",
    )
    _common(query)
    query.add_argument("--db", help="SQLAlchemy URL of the results database (default: see README)")
    query.add_argument("--limit", type=int, default=10, help="rows to show (default 10)")
    query.add_argument("--objective", default="time",
                       help="order by time (default) or energy, or show the pareto front of time and energy")
    query.add_argument("--json", action="store_true", help="machine-readable output")
    query.set_defaults(run=cmd_query)

    ladder = sub.add_parser(
        "ladder", help="naive -> tiled -> coarsened -> tensor cores -> tuned, measured side by side",
        epilog="example: autotune ladder --gpu h200 --dtype f16 --shape 4096",
    )
    ladder.add_argument("--gpu", required=True, help=f"GPU model: {', '.join(GPUS)} or {AUTO}")
    ladder.add_argument("--shape", required=True, help="problem size: 4096 (square) or MxNxK")
    ladder.add_argument("--dtype", default="f32", help=f"element type: {', '.join(DTYPES)} (default f32)")
    ladder.add_argument("--db", help="SQLAlchemy URL of the results database (default: see README)")
    ladder.add_argument("--repeats", type=int, default=20, help="timed launches per rung (default 20)")
    ladder.add_argument("--backend", default="cupy", choices=["cupy", "fake"],
                        help="GPU backend: cupy (default), or fake to exercise the pipeline with no GPU")
    ladder.set_defaults(run=cmd_ladder)

    results = sub.add_parser(
        "results", help="export or import tuned results as JSON lines (tuned_db/)",
        epilog="example: autotune results import tuned_db/h200.jsonl",
    )
    results.add_argument("action", choices=["export", "import"])
    results.add_argument("files", nargs="*", help="import: tuned-results files")
    results.add_argument("--gpu", help="export: the GPU whose results to write")
    results.add_argument("--db", help="SQLAlchemy URL of the results database (default: see README)")
    results.add_argument("--per-problem", type=int, default=10, help="export: kernels per problem (default 10)")
    results.set_defaults(run=cmd_results)

    gpus = sub.add_parser("gpus", help="list the GPU models autotune knows", epilog="example: autotune gpus")
    gpus.set_defaults(run=cmd_gpus)
    return parser


# -- helpers ---------------------------------------------------------------------


def _family_space(args: argparse.Namespace, gpu: GpuSpec) -> SearchSpace:
    """``--family``, or the highest-priority family for ``--dtype`` that can run on ``gpu``."""
    if args.family:
        space = load_space(args.family)
        if space.dtype != args.dtype:
            raise InputError("--family", args.family, f"a family for {args.dtype}: "
                             + ", ".join(families_for_dtype(args.dtype)))
        return space
    families = families_for_dtype(args.dtype)
    if not families:
        raise InputError("--dtype", args.dtype, "a dtype with a search space: "
                         + ", ".join(sorted({load_space(f).dtype for f in _all_families()})))
    for family in families:
        space = load_space(family)
        if next(iter(space.feasible(gpu)), None) is not None:
            return space
    return load_space(families[0])


def _all_families() -> list[str]:
    from autotune.data_files import data_dir

    return sorted(p.stem for p in data_dir("search_spaces").glob("*.toml"))


def _offline_gpu(name: str) -> GpuSpec:
    """``--gpu`` for offline commands: a named model, or ``auto`` through NVML."""
    if name.lower() != AUTO:
        return gpu_spec(name)
    from autotune.detect import attached_gpu

    return attached_gpu()


def _positive(what: str, value: int | float | None) -> None:
    if value is not None and value <= 0:
        raise InputError(what, value, "a number > 0")


def _open_store(url: str | None):
    from autotune.db import ResultStore, default_url

    return ResultStore(url or default_url())


# -- space -----------------------------------------------------------------------


def cmd_space(args: argparse.Namespace) -> int:
    gpu = _offline_gpu(args.gpu)
    problem = make_problem(args.shape, args.dtype)
    space = _family_space(args, gpu)
    limit = _compile_limit(args.compile)

    verdicts = list(space.verdicts(gpu, problem))
    feasible = [v for v in verdicts if v.feasible]
    rejected = _group_rejections(space, verdicts)
    chosen = _sample(space, feasible, limit)
    compiled = _compile_report(space, gpu, problem, chosen)

    if args.json:
        print(json.dumps({
            "family": space.family, "gpu": gpu.key, "arch": gpu.sm, "problem": problem.shape,
            "dtype": problem.dtype, "configs": space.size, "feasible": len(feasible),
            "rejected": [{"count": n, "example": example} for example, n in rejected],
            "compiled": compiled,
        }, indent=2))
        return 0

    print(f"{space.family} on {gpu.key} ({gpu.sm}), problem {problem.shape} {problem.dtype}: "
          f"{space.size} configs, {len(feasible)} pass the static rules, {space.size - len(feasible)} rejected")
    print("\nrejected (count, example reason):")
    for example, n in rejected:
        print(f"  {n:>7}  {example}")
    ok = sum(1 for row in compiled if row["status"] == "ok")
    print(f"\ncompiled {len(compiled)} of {len(feasible)} feasible configs for {gpu.sm} "
          f"({ok} fit; --compile N or all for more):")
    rows = [[row["config"], row["threads"], row["registers"], _kb(row["smem_bytes"]), row["spill_bytes"],
             row["status"]] for row in compiled]
    print(table(["config", "threads", "regs", "smem KB", "spills B", "status"], rows))
    return 0


def _compile_limit(text: str) -> int | None:
    if text == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        raise InputError("--compile", text, "a number >= 0 or all") from None
    if value < 0:
        raise InputError("--compile", text, "a number >= 0 or all")
    return value


def _group_rejections(space: SearchSpace, verdicts: list[Verdict]) -> list[tuple[str, int]]:
    """Rejections grouped by rule (the shared-memory rule by its limit), most common first."""
    groups: dict[str, list] = collections.defaultdict(lambda: [0, None])
    for verdict in verdicts:
        if verdict.feasible:
            continue
        key = verdict.reason.split(" KB > ")[-1] if verdict.reason.startswith("smem ") else _rule_key(verdict)
        groups[key][0] += 1
        groups[key][1] = groups[key][1] or verdict.reason
    return sorted(((example, n) for n, example in groups.values()), key=lambda item: -item[1])


def _rule_key(verdict: Verdict) -> str:
    """Reasons of one rule differ only in their numbers."""
    return "".join(ch for ch in verdict.reason if not ch.isdigit())


def _sample(space: SearchSpace, feasible: list[Verdict], limit: int | None) -> list:
    configs = [v.config for v in feasible]
    if limit is None or limit >= len(configs):
        return configs
    seeds = [s for s in space.seeds if s in set(configs)][:limit]
    rest = [c for c in configs if c not in set(seeds)]
    wanted = limit - len(seeds)
    step = len(rest) / wanted if wanted else 0
    return seeds + [rest[int(i * step)] for i in range(wanted)]


def _compile_report(space: SearchSpace, gpu: GpuSpec, problem: GemmProblem, configs: list) -> list[dict]:
    from autotune.check import resource_violation
    from autotune.compile import CompileFailure, CompilePool
    from autotune.render import render

    if not configs:
        return []
    rows = []
    jobs = min(len(configs), 16)
    with CompilePool(jobs) as pool:
        results = pool.map((render(space, c, gpu) for c in configs), gpu.sm)
        for config, result in zip(configs, results):
            launch = space.launch(config, gpu, problem)
            row = {"config": config.name, "params": config.as_dict(), "threads": launch.block[0],
                   "grid": list(launch.grid), "registers": None, "smem_bytes": None, "spill_bytes": None}
            if isinstance(result, CompileFailure):
                row["status"] = f"compile_error: {result.message}"
            else:
                res = result.resources
                res = type(res)(**{**res.__dict__, "smem_dynamic": launch.dynamic_smem})
                row.update(registers=res.registers, smem_bytes=res.smem_total,
                           spill_bytes=res.spill_stores + res.spill_loads)
                violation = resource_violation(res, launch.block[0], gpu, launch.opt_in)
                row["status"] = f"resource: {violation}" if violation else "ok"
            rows.append(row)
    return rows


def _kb(value: int | None) -> float | None:
    return None if value is None else round(value / 1024, 1)


# -- search ------------------------------------------------------------------------


def cmd_search(args: argparse.Namespace) -> int:
    problem = make_problem(args.shape, args.dtype)
    requested = None if args.gpu.lower() == AUTO else gpu_spec(args.gpu)
    _family_space(args, requested or GPUS["h200"])  # bad --family / --dtype fail before any GPU work
    _positive("--trials", args.trials)
    _positive("--timeout", args.timeout)
    _positive("--repeats", args.repeats)
    _positive("--jobs", args.jobs)
    make_objective(args.objective)
    store = _open_store(args.db)

    from autotune.study import Search, SearchSettings
    from autotune.worker import GpuWorker

    with GpuWorker(backend=args.backend) as worker:
        env = worker.environment()
        if requested is not None and requested.key != env.gpu_key:
            raise GpuMismatchError(requested.key, env.gpu_key, env.gpu_name)
        gpu = requested or GPUS.get(env.gpu_key)
        if gpu is None:
            raise InputError("--gpu", args.gpu, f"one of {', '.join(GPUS)} (the attached {env.gpu_name!r} is unknown)")
        space = _family_space(args, gpu)
        settings = SearchSettings(trials=args.trials, timeout_s=args.timeout, seed=args.seed,
                                  jobs=args.jobs, repeats=args.repeats, objective=args.objective)
        print(f"searching {space.family} for {problem.shape} {problem.dtype} on {env.gpu_name} ({env.arch}), "
              f"driver {env.driver}, CUDA {env.cuda_runtime}, NVRTC {env.nvrtc}, CuPy {env.cupy}", file=sys.stderr)
        progress = ProgressLine()
        search = Search(space, gpu, problem, store, worker, settings, on_progress=progress)
        try:
            result = search.run()
        finally:
            progress.finish()

    _print_result(result, problem, store.url)
    return 0


def _print_result(result, problem: GemmProblem, url: str) -> None:
    cublas_ms = result.cublas.timing.median_ms
    print(f"study {result.study_name}: {result.evaluated} configs evaluated on the GPU")
    if result.failures:
        print("failures: " + ", ".join(f"{name} {n}" for name, n in sorted(result.failures.items())))
    if result.best is None:
        print(f"no config verified; cuBLAS {cublas_ms:.4f} ms ({problem.tflops(cublas_ms):.1f} TFLOP/s)")
        return
    best_ms = result.best.timing.median_ms
    print(f"best: {result.best_config.name}")
    print("  " + " ".join(f"{k}={v}" for k, v in result.best_config.params))
    print(f"  {best_ms:.4f} ms, {result.best.tflops:.1f} TFLOP/s, {ratio_text(best_ms, cublas_ms)} cuBLAS "
          f"({cublas_ms:.4f} ms, {problem.tflops(cublas_ms):.1f} TFLOP/s), measured side by side in this run")
    if result.best_window and result.cublas_window:
        for label, window in (("best", result.best_window), ("cuBLAS", result.cublas_window)):
            print(f"  {label}: {_energy_text(window, problem)}")
    if result.front:
        print(f"time/energy front ({len(result.front)} points):")
        print(table(["config", "ms", "mJ", "W", "SM MHz", "throttled"],
                    [[p.config_name, p.ms, p.mj, p.window.mean_power_w, p.window.sm_clock_mhz_mean,
                      "yes" if p.window.throttled else "no"] for p in result.front]))
    print(f"results: {url}")


def _energy_text(window, problem: GemmProblem) -> str:
    throttled = ", throttled" if window.throttled else ""
    return (f"{window.energy_per_gemm_j * 1e3:.2f} mJ per GEMM at {window.mean_power_w:.0f} W "
            f"(idle {window.idle_power_w or 0:.0f} W), {window.gflop_per_joule(problem.flops):.1f} GFLOP/J, "
            f"SM {window.sm_clock_mhz_mean or 0:.0f} MHz{throttled}")


# -- query -------------------------------------------------------------------------


def cmd_query(args: argparse.Namespace) -> int:
    problem = make_problem(args.shape, args.dtype)
    gpu = gpu_spec(args.gpu) if args.gpu.lower() != AUTO else _offline_gpu(args.gpu)
    _positive("--limit", args.limit)
    if args.objective not in ("time", "energy", "pareto"):
        raise InputError("--objective", args.objective, "time, energy or pareto")
    store = _open_store(args.db)
    if args.objective != "time":
        return _query_energy(store, gpu, problem, args)
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


# -- ladder ------------------------------------------------------------------------


def cmd_ladder(args: argparse.Namespace) -> int:
    from autotune.ladder import climb
    from autotune.worker import GpuWorker

    problem = make_problem(args.shape, args.dtype)
    requested = None if args.gpu.lower() == AUTO else gpu_spec(args.gpu)
    _positive("--repeats", args.repeats)
    store = _open_store(args.db)
    with GpuWorker(backend=args.backend) as worker:
        env = worker.environment()
        if requested is not None and requested.key != env.gpu_key:
            raise GpuMismatchError(requested.key, env.gpu_key, env.gpu_name)
        gpu = requested or GPUS.get(env.gpu_key)
        if gpu is None:
            raise InputError("--gpu", args.gpu, f"one of {', '.join(GPUS)} (the attached {env.gpu_name!r} is unknown)")
        rungs, cublas = climb(worker, store, gpu, problem, repeats=args.repeats)
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


# -- results -----------------------------------------------------------------------


def cmd_results(args: argparse.Namespace) -> int:
    from pathlib import Path

    from autotune import tuned

    if args.action == "export":
        if not args.gpu or args.files:
            raise InputError("results export", " ".join(args.files) or "(no --gpu)", "--gpu NAME and no files")
        gpu = gpu_spec(args.gpu)
        _positive("--per-problem", args.per_problem)
        lines = tuned.export(_open_store(args.db), gpu.key, sys.stdout, args.per_problem)
        print(f"exported {lines} measurements for {gpu.key}", file=sys.stderr)
        return 0
    if not args.files:
        raise InputError("results import", "(no files)", "one or more tuned-results files, e.g. tuned_db/h200.jsonl")
    store = _open_store(args.db)
    for path in map(Path, args.files):
        added, present = tuned.import_file(store, path)
        print(f"{path}: {added} measurements added, {present} already present ({store.url})")
    return 0


# -- gpus --------------------------------------------------------------------------


def cmd_gpus(args: argparse.Namespace) -> int:
    rows = [[s.key, s.sm, s.sms, s.smem_per_block // 1024, s.smem_per_block_optin // 1024,
             s.max_threads_per_sm, s.l2_bytes // (1024 * 1024)] for s in GPUS.values()]
    print(table(["gpu", "arch", "SMs", "smem KB", "opt-in KB", "threads/SM", "L2 MB"], rows))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except AutotuneError as error:
        print(f"autotune: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("autotune: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into a reader that stopped early (head, less)
        sys.stderr.close()
        return 0
