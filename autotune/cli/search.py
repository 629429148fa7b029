"""``autotune search``: an Optuna study on the attached GPU."""

from __future__ import annotations

import argparse
import atexit
import gc
import sys
from pathlib import Path

from autotune.cli.arguments import (
    MAX_DEVICES,
    MAX_REPEATS,
    MAX_SEED,
    MAX_TRIALS,
    Integer,
    Seconds,
    add_backend_argument,
    add_db_argument,
    add_pin_argument,
    add_problem_arguments,
    add_wide_argument,
    add_worker_arguments,
    pins,
    requested_gpu,
)
from autotune.cli.text import ProgressLine, paragraph, ratio_text, table, terminal_width
from autotune.errors import InputError
from autotune.problem import GemmProblem, make_problem
from autotune.search.settings import SearchSettings
from autotune.search.start import GpuRequest, SearchRequest, started_search
from autotune.search.timeline import Timeline


def register(sub) -> None:
    search = sub.add_parser(
        "search", help="search for the fastest kernel on the attached GPU",
        epilog="example: autotune search --gpu h200 --shape 4096 --dtype f32 --trials 150",
    )
    add_problem_arguments(search)
    search.add_argument("--trials", action=Integer, least=1, most=MAX_TRIALS, default=100,
                        help="GPU evaluations in the study, every process sharing it together (default 100)")
    search.add_argument("--timeout", action=Seconds, help="stop this run after S seconds")
    add_pin_argument(search)
    add_db_argument(search)
    search.add_argument("--seed", action=Integer, least=0, most=MAX_SEED, default=0,
                        help="sampler and input seed (default 0): one process with the same seed proposes the "
                             "same configs given the same results")
    add_worker_arguments(search, "CUDA device index of the (first) GPU (default 0)")
    search.add_argument("--repeats", action=Integer, least=1, most=MAX_REPEATS, default=20,
                        help="timed launches per candidate (default 20)")
    search.add_argument("--workers", action=Integer, least=1, most=MAX_DEVICES, default=1,
                        help="GPU workers, one per device from --device on (default 1)")
    search.add_argument("--objective", default="time",
                        help="what to minimise: time (default), energy (J per GEMM), edp (energy x time), "
                             "or pareto (the time/energy front)")
    search.add_argument("--sampler", default="tpe",
                        help="what proposes configs after the opening: tpe (default), random (uniformly random "
                             "feasible configs, a yardstick for TPE), or genetic (children of the fastest configs "
                             "measured so far: tournament selection, crossover and mutation)")
    search.add_argument("--trace", metavar="FILE",
                        help="write the search's timeline to FILE: a Chrome trace (open it in ui.perfetto.dev) "
                             "with a row for the search loop, each GPU and each compile process")
    add_backend_argument(search)
    add_wide_argument(search)
    search.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.trace and not Path(args.trace).resolve().parent.is_dir():
        raise InputError("--trace", args.trace, "a file in an existing folder")
    timeline = Timeline() if args.trace else None
    problem = make_problem(args.shape, args.dtype, layout=args.layout)
    settings = SearchSettings(trials=args.trials, timeout_s=args.timeout, seed=args.seed, jobs=args.jobs,
                              repeats=args.repeats, objective=args.objective, sampler=args.sampler)
    request = SearchRequest(problem, args.family, GpuRequest(requested_gpu(args.gpu), args.gpu, args.device,
                                                             args.backend), settings, args.workers, args.db,
                            pins(args.pin))
    request.check()
    _leave_the_heap_to_the_os_at_exit()
    progress = ProgressLine()
    with started_search(request, timeline, on_progress=progress, on_environment=_announce) as search:
        try:
            result = search.run()
        finally:
            progress.finish()
            if timeline is not None:
                timeline.write(args.trace)
    _print_result(result, problem, search.store.shown_url, terminal_width(args.wide))
    return 0


def _announce(search, env) -> None:
    problem, devices = search.problem, ", ".join(str(worker.device) for worker in search.workers)
    layout = f" {problem.layout}" if problem.layout != "row" else ""
    print(f"searching {search.space.family} for {problem.shape} {problem.dtype}{layout} on {env.gpu_name} ({env.arch}), "
          f"driver {env.driver}, CUDA {env.cuda_runtime}, NVRTC {env.nvrtc}, CuPy {env.cupy}, "
          f"device{'s' if len(search.workers) > 1 else ''} {devices}", file=sys.stderr)


def _leave_the_heap_to_the_os_at_exit() -> None:
    """Freeze the objects still alive at exit: the collector would walk them again and again while the
    interpreter shuts down (tenths of a second after a search), to free memory the OS frees anyway.
    The search closes its databases and processes before then."""
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)


def _print_result(result, problem: GemmProblem, url: str, width: int | None = None) -> None:
    cublas_ms = result.cublas.timing.median_ms
    print(f"study {result.study_name}: {result.evaluated} configs evaluated on the GPU")
    if result.failures:
        print("failures: " + ", ".join(f"{name} {n}" for name, n in sorted(result.failures.items())))
    if result.screened or result.raced:
        print(paragraph(f"screened out by the static rules: {result.screened} sampled configs (never compiled); "
                        f"timing stopped early: {result.raced} clearly slower candidates", width))
    if result.time_spent:
        print(paragraph(time_spent_text(result.time_spent), width))
    if result.best is None:
        print(f"no config verified; cuBLAS {cublas_ms:.4f} ms ({problem.tflops(cublas_ms):.1f} TFLOP/s)")
        return
    best_ms = result.best.timing.median_ms
    print(f"best: {result.best_config.name}")
    print(paragraph(" ".join(f"{k}={v}" for k, v in result.best_config.params), width, indent="  "))
    print(paragraph(f"{best_ms:.4f} ms, {result.best.tflops:.1f} TFLOP/s, {ratio_text(best_ms, cublas_ms)} cuBLAS "
                    f"({cublas_ms:.4f} ms, {problem.tflops(cublas_ms):.1f} TFLOP/s), measured side by side in this run",
                    width, indent="  "))
    if result.best_window and result.cublas_window:
        for label, window in (("best", result.best_window), ("cuBLAS", result.cublas_window)):
            print(f"  {label}: {_energy_text(window, problem)}")
    if result.front:
        print(f"time/energy front ({len(result.front)} points):")
        print(table(["config", "ms", "mJ", "W", "SM MHz", "throttled"],
                    [[p.config_name, p.ms, p.mj, p.window.mean_power_w, p.window.sm_clock_mhz_mean,
                      "yes" if p.window.throttled else "no"] for p in result.front], width, wrap=["config"]))
    print(f"results: {url}")


def time_spent_text(spent: dict) -> str:
    """One line: where a search's wall time went (see :class:`autotune.search.time_spent.TimeSpent`)."""

    def s(name: str) -> float:
        return spent.get(name, {}).get("seconds", 0.0)

    wall = s("wall")
    compiles = spent.get("compile", {}).get("count", 0)
    return (f"time: {wall:.1f} s; GPU busy {s('gpu busy'):.1f} s, idle {s('gpu waiting'):.1f} s between "
            f"candidates; this process: proposing {s('propose'):.1f} s, slots {s('slots'):.1f} s, recording "
            f"{s('record'):.1f} s, closing measurement {s('closing'):.1f} s; {compiles} compiles took "
            f"{s('compile'):.1f} CPU s")


def _energy_text(window, problem: GemmProblem) -> str:
    throttled = ", throttled" if window.throttled else ""
    return (f"{window.energy_per_gemm_j * 1e3:.2f} mJ per GEMM at {window.mean_power_w:.0f} W "
            f"(idle {window.idle_power_w or 0:.0f} W), {window.gflop_per_joule(problem.flops):.1f} GFLOP/J, "
            f"SM {window.sm_clock_mhz_mean or 0:.0f} MHz{throttled}")
