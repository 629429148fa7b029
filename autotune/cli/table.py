"""``autotune table``: the per-shape selection table for a GPU and dtype, with its measured quality."""

from __future__ import annotations

import argparse
import json

from autotune.cli.arguments import add_db_argument, open_store
from autotune.gpus import GPUS, gpu_spec
from autotune.problem import DTYPES
from autotune.report import ratio_text, table


def register(sub) -> None:
    parser = sub.add_parser(
        "table", help="the per-shape selection table (nearest tuned shape) and how good its picks are",
        epilog="example: autotune table --gpu h200 --dtype f32",
    )
    parser.add_argument("--gpu", required=True, help=f"GPU model: {', '.join(GPUS)}")
    parser.add_argument("--dtype", default="f32", help=f"element type: {', '.join(DTYPES)} (default f32)")
    add_db_argument(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from autotune.problem import make_problem
    from autotune.select import build, held_out

    gpu = gpu_spec(args.gpu)
    make_problem("1", args.dtype)  # an unknown dtype is an error naming the choices
    store = open_store(args.db)
    selection, times = build(store, gpu.key, args.dtype)
    quality = {h.problem: h for h in held_out(selection, times)}
    if args.json:
        print(json.dumps([{
            "gpu": gpu.key, "arch": gpu.sm, "dtype": args.dtype, "shape": e.problem.shape, "alpha": e.problem.alpha, "beta": e.problem.beta, "family": e.family,
            "config": e.config_name, "params": e.params, "ms": e.ms, "cublas_ms": e.cublas_ms,
            "launch": _launch(e, gpu), "held_out_pick": quality[e.problem].config_name,
            "held_out_fraction_of_best": quality[e.problem].fraction_of_best,
        } for e in selection.entries], indent=2))
        return 0
    if not selection.entries:
        print(f"no tuned {args.dtype} results for {gpu.key} in {store.shown_url}")
        return 0
    rows = []
    for entry in selection.entries:
        held = quality[entry.problem]
        if held.picked_from is None:
            verdict = "no other shape"
        elif held.fraction_of_best is None:
            verdict = f"pick from {held.picked_from.shape} not measured here"
        else:
            verdict = f"{held.fraction_of_best:.3f} of best (pick from {held.picked_from.shape})"
        rows.append([entry.problem.shape, entry.config_name, entry.ms, ratio_text(entry.ms, entry.cublas_ms), verdict])
    print(f"selection table for {gpu.key} {args.dtype} ({store.shown_url}): a shape gets the config of the nearest "
          "tuned shape")
    print(table(["shape", "config", "ms", "vs cuBLAS", "held out: the table's pick without this shape"], rows))
    measured = [h.fraction_of_best for h in quality.values() if h.fraction_of_best is not None]
    if measured:
        print(f"held-out picks measured on {len(measured)} of {len(quality)} shapes: mean {sum(measured) / len(measured):.3f} "
              "of the tuned best")
    return 0


def _launch(entry, gpu) -> dict | None:
    """The entry's launch contract (block, grid over M, N, K, shared memory, tensor maps)."""
    from autotune.errors import AutotuneError
    from autotune.export.table import table_kernel

    try:
        return table_kernel(entry.family, entry.params, gpu).launch.to_dict()
    except AutotuneError:  # a family this autotune does not ship
        return None
