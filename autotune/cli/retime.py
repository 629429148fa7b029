"""``autotune retime``: each tuned shape's fastest configs measured again, in rounds beside cuBLAS, for the table."""

from __future__ import annotations

import argparse
import contextlib
import sys

from autotune.cli.arguments import (
    MAX_ROWS,
    Integer,
    add_gpu_argument,
    add_layout_argument,
    add_resumable_run_arguments,
    add_shapes_filter_argument,
)
from autotune.cli.gpu_job import check_requested_gpu, start_gpu_job
from autotune.errors import InputError
from autotune.problem import DTYPES, LAYOUT_CHOICES, LAYOUTS, check_dtype
from autotune.search.retime import RETIME_ROUNDS, RETIME_TOP
from autotune.shapes import read_shapes

MAX_ROUNDS = 100


def register(sub) -> None:
    retime = sub.add_parser(
        "retime", help="measure each tuned shape's fastest configs again, in rounds beside cuBLAS, flushed and "
                       "back to back: the table then picks by those times, each config by its worse ratio",
        epilog="example: autotune retime --gpu h200 --dtype f16 --top 3 --rounds 5; then "
               "autotune table --gpu h200 --dtype f16",
    )
    add_gpu_argument(retime)
    retime.add_argument("--dtype", required=True, help=f"element type: {', '.join(DTYPES)}")
    add_layout_argument(retime)
    retime.add_argument("--top", action=Integer, least=1, most=MAX_ROWS, default=RETIME_TOP,
                        help=f"the fastest T distinct configs of each shape (default {RETIME_TOP})")
    retime.add_argument("--rounds", action=Integer, least=1, most=MAX_ROUNDS, default=RETIME_ROUNDS,
                        help=f"times each config and cuBLAS are measured, flushed and back to back, the order "
                             f"rotated each round (default {RETIME_ROUNDS})")
    add_shapes_filter_argument(retime, "every shape with results")
    add_resumable_run_arguments(retime)
    retime.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from autotune.search.cross_dtype import source_gpu_key
    from autotune.search.retime import Retime, plan
    from autotune.search.settings import SearchSettings

    check_dtype(args.dtype)
    if args.layout not in LAYOUTS:
        raise InputError("--layout", args.layout, LAYOUT_CHOICES)
    check_requested_gpu(args, args.dtype)
    shapes = read_shapes(args.shapes) if args.shapes else None
    with contextlib.ExitStack() as stack:
        job = start_gpu_job(args, args.dtype, stack)
        env, gpu, store = job.env, job.gpu, job.store
        planned, earlier = plan(store, gpu, env.gpu_key, args.dtype, args.layout, args.top, shapes)
        if not planned and not earlier:
            shipped = "" if source_gpu_key(env.gpu_key) != env.gpu_key else \
                f", or import them: autotune results import tuned_db/{env.gpu_key}.jsonl"
            raise InputError("--dtype", args.dtype, f"a dtype with {args.layout} results on {env.gpu_key} in "
                                                    f"{store.shown_url} (search or sweep first{shipped})")
        configs = sum(len(shape.configs) for shape in planned)
        print(f"measuring {configs} configs of {len(planned)} shapes ({args.dtype}, {args.layout}) again with cuBLAS, "
              f"{args.rounds} rounds, on {env.gpu_name} ({env.arch}), device {args.device}; {earlier} shapes "
              "measured again before", file=sys.stderr)
        result = Retime(planned, gpu, store, job.worker, job.pool, args.rounds, earlier, SearchSettings(jobs=args.jobs),
                        args.timeout, on_progress=_progress).run()
        print(f"{result.shapes} shapes measured again ({result.configs} configs compiled, {result.failed} failed), "
              f"{result.earlier} before"
              + ("" if result.complete else "; stopped at --timeout: run again to go on")
              + f" ({store.shown_url}); next: autotune table --gpu {env.gpu_key} --dtype {args.dtype}"
              + ("" if args.layout == "row" else f" --layout {args.layout}"))
    return 0


def _progress(progress) -> None:
    if progress.evaluated == progress.target or progress.evaluated % 50 == 0:
        print(f"  {progress.evaluated}/{progress.target} evaluations, {progress.elapsed_s:.0f} s", file=sys.stderr,
              flush=True)
