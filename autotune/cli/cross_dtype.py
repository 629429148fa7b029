"""``autotune cross-dtype``: the configs tuned in one dtype, verified and timed in another, for a first table."""

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
from autotune.search.cross_dtype import CROSS_DTYPE_TOP
from autotune.shapes import read_shapes


def register(sub) -> None:
    cross = sub.add_parser(
        "cross-dtype", help="time the best configs of each shape tuned in one dtype in another (a first table)",
        epilog="example: autotune cross-dtype --gpu h200 --dtype bf16 --from-dtype f16 --top 3; then "
               "autotune table --gpu h200 --dtype bf16",
    )
    add_gpu_argument(cross)
    cross.add_argument("--dtype", required=True, help=f"the dtype to measure in: {', '.join(DTYPES)}")
    cross.add_argument("--from-dtype", required=True,
                       help="the dtype whose results (in the database, on this GPU) give each shape's configs")
    add_layout_argument(cross)
    cross.add_argument("--top", action=Integer, least=1, most=MAX_ROWS, default=CROSS_DTYPE_TOP,
                       help=f"the fastest T distinct configs of each shape (default {CROSS_DTYPE_TOP})")
    add_shapes_filter_argument(cross, "every shape with --from-dtype results")
    add_resumable_run_arguments(cross)
    cross.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from autotune.search.cross_dtype import CrossDtype, plan, source_gpu_key
    from autotune.search.settings import SearchSettings

    check_dtype(args.dtype)
    check_dtype(args.from_dtype, "--from-dtype")
    if args.layout not in LAYOUTS:
        raise InputError("--layout", args.layout, LAYOUT_CHOICES)
    if args.dtype == args.from_dtype:
        raise InputError("--from-dtype", args.from_dtype, f"a dtype other than --dtype {args.dtype}")
    check_requested_gpu(args, args.dtype)
    shapes = read_shapes(args.shapes) if args.shapes else None
    with contextlib.ExitStack() as stack:
        job = start_gpu_job(args, args.dtype, stack)
        env, gpu, store = job.env, job.gpu, job.store
        source = source_gpu_key(env.gpu_key)
        planned = plan(store, gpu, source, args.from_dtype, args.dtype, args.top, shapes, args.layout)
        if not planned:
            raise InputError("--from-dtype", args.from_dtype,
                             f"a dtype with results on {source} in {store.shown_url} whose families serve "
                             f"{args.dtype} (import them first: autotune results import tuned_db/{source}.jsonl)")
        pairs = sum(len(shape.configs) for shape in planned)
        print(f"timing {pairs} {args.from_dtype} configs of {len(planned)} shapes in {args.dtype} on "
              f"{env.gpu_name} ({env.arch}), with cuBLAS, device {args.device}", file=sys.stderr)
        result = CrossDtype(planned, gpu, store, job.worker, job.pool, args.from_dtype, SearchSettings(jobs=args.jobs),
                            args.timeout, on_progress=_progress).run()
        print(f"{result.shapes} shapes, {result.configs} configs compiled: {result.measured} measured, "
              f"{result.failed} failed, {result.earlier} measured before"
              + ("" if result.complete else "; stopped at --timeout: run again to go on")
              + f" ({store.shown_url}); next: autotune table --gpu {env.gpu_key} --dtype {args.dtype}")
    return 0


def _progress(progress) -> None:
    if progress.evaluated == progress.target or progress.evaluated % 20 == 0:
        print(f"  {progress.evaluated}/{progress.target} evaluations, {progress.elapsed_s:.0f} s", file=sys.stderr,
              flush=True)
