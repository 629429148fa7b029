"""``autotune sweep``: a search per shape of a set or a shape file, then the best kernels across the shapes."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO

from autotune.cli.arguments import (
    MAX_ROWS,
    MAX_TRIALS,
    Integer,
    add_gpu_argument,
    add_layout_argument,
    add_pin_argument,
    add_resumable_run_arguments,
    add_wide_argument,
    pins,
    requested_gpu,
)
from autotune.cli.text import ratio_text, table, terminal_width
from autotune.errors import InputError
from autotune.gpu_specs import GPUS
from autotune.problem import DTYPES, GemmProblem, make_problem
from autotune.search.settings import SWEEP_TOP, SWEEP_TRIALS, SearchSettings, SweepSettings
from autotune.search.start import GpuRequest, SweepRequest, choose_family, started_sweep
from autotune.shapes import SHAPE_SETS, read_shapes


def register(sub) -> None:
    sweep = sub.add_parser(
        "sweep", help="search every shape of a set or a shape file, then time the best kernels at every shape",
        epilog="example: autotune sweep --gpu h200 --dtype f16 --shapes llm --trials 24",
    )
    add_gpu_argument(sweep)
    sweep.add_argument("--dtype", default="f32", help=f"element type: {', '.join(DTYPES)} (default f32)")
    add_layout_argument(sweep)
    sweep.add_argument("--shapes", required=True,
                       help=f"a shape set ({', '.join(SHAPE_SETS)}), shapes written out (4096,77x4096x14336) or a "
                            "file with one shape (4096 or MxNxK) per line")
    sweep.add_argument("--trials", action=Integer, least=1, most=MAX_TRIALS, default=SWEEP_TRIALS,
                       help=f"GPU evaluations per shape (default {SWEEP_TRIALS})")
    sweep.add_argument("--family", help="kernel family: a shipped one's name, or the path of your own space file "
                                        "(default: the one for --dtype)")
    sweep.add_argument("--top", action=Integer, least=0, most=MAX_ROWS, default=SWEEP_TOP,
                       help=f"the best T configs of each shape are timed at every shape (default {SWEEP_TOP}; "
                            "0: none)")
    sweep.add_argument("--cross-from", metavar="SHAPES",
                       help="time the best configs of these tuned shapes (a set or file, as --shapes) at the swept "
                            "shapes, which are then not searched (cuBLAS is timed there): how kernels found on some "
                            "shapes do on others, e.g. on a held-out set")
    add_pin_argument(sweep)
    add_wide_argument(sweep)
    add_resumable_run_arguments(sweep)
    sweep.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.dtype not in DTYPES:
        raise InputError("--dtype", args.dtype, ", ".join(DTYPES))
    problems = [make_problem(f"{m}x{n}x{k}", args.dtype, layout=args.layout) for m, n, k in read_shapes(args.shapes)]
    sources = tuple(make_problem(f"{m}x{n}x{k}", args.dtype, layout=args.layout)
                    for m, n, k in read_shapes(args.cross_from)) \
        if args.cross_from else ()
    requested = requested_gpu(args.gpu)
    pinned = pins(args.pin)
    choose_family(args.family, args.dtype, requested or GPUS["h200"], args.layout, pinned)  # bad --family, --dtype, --layout, --pin: before the GPU
    if args.top < 0:
        raise InputError("--top", args.top, "a number >= 0 (0: no cross measurement)")
    if sources and args.top == 0:
        raise InputError("--top", args.top, "a number >= 1 with --cross-from (the configs timed at the swept shapes)")
    if args.device < 0:
        raise InputError("--device", args.device, "a CUDA device index >= 0")

    settings = SweepSettings(trials=args.trials, top=args.top, timeout_s=args.timeout, cross_from=sources,
                             search=SearchSettings(jobs=args.jobs))
    request = SweepRequest(tuple(problems), args.dtype, args.family,
                           GpuRequest(requested, args.gpu, args.device, args.backend), settings, args.db, args.layout,
                           pinned)
    line = SweepLine()
    with started_sweep(request, on_progress=line.progress, on_shape=line.shape) as sweep:
        env = sweep.worker.environment()
        what = (f"the best {args.top} configs of each shape of {args.cross_from} timed, not searched" if sources
                else f"{args.trials} trials each")
        print(f"sweeping {sweep.space.family} over {len(problems)} {args.dtype} shapes ({args.shapes}) on "
              f"{env.gpu_name} ({env.arch}), {what}, device {args.device}", file=sys.stderr)
        try:
            result = sweep.run()
        finally:
            line.finish()

    _print_result(result, sweep.store.shown_url, terminal_width(args.wide))
    return 0


class SweepLine:
    """The sweep's progress line on stderr (redrawn in place on a terminal; elsewhere, a line every
    ``every_s`` seconds and at the end), and a line per finished shape above it."""

    def __init__(self, stream: TextIO | None = None, every_s: float = 10.0):
        self.stream = stream if stream is not None else sys.stderr  # the stderr of the moment, not of the import
        self.every_s = every_s
        self.interactive = self.stream.isatty()
        self._shown = ""
        self._last_printed: tuple[int, float] | None = None  # (evaluations, time.monotonic()) of the last line

    def progress(self, progress) -> None:
        self._shown = self.format(progress)
        if self.interactive:
            self.stream.write("\r\033[K" + self._shown)
            self.stream.flush()
            return
        now = time.monotonic()
        last = self._last_printed
        due = last is None or now - last[1] >= self.every_s or progress.evaluated >= progress.target
        if due and (last is None or progress.evaluated != last[0]):
            self._last_printed = (progress.evaluated, now)
            print(self._shown, file=self.stream, flush=True)

    def shape(self, outcome) -> None:
        text = self.shape_text(outcome)
        if self.interactive:
            self.stream.write("\r\033[K" + text + "\n" + self._shown)
            self.stream.flush()
        else:
            print(text, file=self.stream, flush=True)

    def finish(self) -> None:
        if self.interactive and self._shown:
            self.stream.write("\n")

    @staticmethod
    def format(progress) -> str:
        eta = progress.eta_s
        return (f"[shapes {progress.shapes_done}/{progress.shapes_total}] {progress.evaluated}/{progress.target} "
                f"evaluations, {_duration(progress.elapsed_s)} elapsed, ETA "
                f"{'-' if eta is None else _duration(eta)}; {progress.phase}")

    @staticmethod
    def shape_text(outcome) -> str:
        done = " (done earlier)" if outcome.earlier else ""
        if not outcome.searched:
            return f"{outcome.problem.shape}: not searched; cuBLAS {outcome.cublas_ms:.4g} ms"
        if outcome.best_ms is None:
            return f"{outcome.problem.shape}: no config verified in {outcome.evaluated} evaluations{done}"
        warm = f", {outcome.warm_start} warm-start configs" if outcome.warm_start else ""
        return (f"{outcome.problem.shape}: best {outcome.best_ms:.4g} ms, "
                f"{ratio_text(outcome.best_ms, outcome.cublas_ms)} cuBLAS, "
                f"{outcome.evaluated} evaluations{warm}{done}")


def _print_result(result, url: str, width: int | None = None) -> None:
    rows = [[o.problem.shape, o.evaluated, o.best_ms, _tflops(o.problem, o.best_ms), o.cublas_ms,
             ratio_text(o.best_ms, o.cublas_ms), o.best_config] for o in result.shapes]
    print(table(["shape", "trials", "best ms", "TFLOP/s", "cuBLAS ms", "vs cuBLAS", "best config"], rows, width,
                wrap=["best config"]))
    if result.cross is not None:
        cross = result.cross
        print(f"cross measurement: {cross.configs} configs; {cross.measured} (config, shape) pairs measured, "
              f"{cross.failed} failed, {cross.earlier} in the database already, {cross.infeasible} infeasible")
    if not result.complete:
        print("stopped at --timeout; run the same command again to go on")
    print(f"results: {url}")


def _tflops(problem: GemmProblem, ms: float | None) -> float | None:
    return problem.tflops(ms) if ms else None


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
