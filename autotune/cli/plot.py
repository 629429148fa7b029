"""``autotune plot``: PNG plots of the selection table of a GPU and dtype (needs ``pip install autotune[plot]``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from autotune.cli.table import LEAVE_ONE_OUT, add_table_arguments, quality_line, selection


def register(sub) -> None:
    parser = sub.add_parser(
        "plot", help="plot the selection table: TFLOP/s per shape against the tuned best and cuBLAS, "
                     "and which kernel it picks where",
        epilog="example: autotune plot --gpu h200 --dtype f16 --hold-out llm-held-out --out plots",
    )
    add_table_arguments(parser)
    parser.add_argument("--out", required=True, help="output directory (created if missing)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from autotune.select.plot import pyplot, write_plots

    pyplot()  # no matplotlib: one line naming the extra, before the database is read
    chosen = selection(args)
    if not chosen.table.rules:
        from autotune.select.plot import PlotError

        raise PlotError(f"nothing to plot: no tuned {chosen.dtype} results for {chosen.gpu.key} in {chosen.source}")
    title = f"{chosen.gpu.key} {chosen.dtype}, {len(chosen.table.kernels)} kernels"
    paths = write_plots(chosen.table, chosen.results, chosen.report, chosen.held_out_from != LEAVE_ONE_OUT,
                        Path(args.out), title, f"{chosen.gpu.key}_{chosen.dtype}")
    print(quality_line(chosen))
    for path in paths:
        print(path)
    return 0
