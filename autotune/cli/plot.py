"""``autotune plot``: PNG plots of the selection table of a GPU and dtype (needs ``pip install autotune[plot]``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autotune.cli.table import LEAVE_ONE_OUT, add_table_arguments, judged, quality_line


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
    chosen = judged(args)
    for line in chosen.ignored:
        print(f"autotune: {line}", file=sys.stderr)
    selection = chosen.selection
    if not selection.table.rules:
        from autotune.select.plot import PlotError

        raise PlotError(f"nothing to plot: no tuned {selection.dtype} results for {selection.gpu.key} "
                        f"in {chosen.source}" + (f"; {chosen.missing}" if chosen.missing else ""))
    title = f"{selection.gpu.key} {selection.dtype}, {len(selection.table.chosen)} kernels"
    paths = write_plots(selection, chosen.report, chosen.held_out_from != LEAVE_ONE_OUT,
                        Path(args.out), title, f"{selection.gpu.key}_{selection.dtype}")
    print(quality_line(chosen))
    for path in paths:
        print(path)
    return 0
