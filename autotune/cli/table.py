"""``autotune table``: the selection table of a GPU and dtype (at most 16 kernels), with its measured quality."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import TYPE_CHECKING

from autotune.cli.arguments import MAX_KERNELS as MOST_KERNELS
from autotune.cli.arguments import (Integer, add_db_argument, add_gpu_argument, add_layout_argument, add_wide_argument,
                                    no_results_hint, open_store)
from autotune.cli.progress import TerminalProgress
from autotune.cli.text import paragraph, terminal_width
from autotune.cli.text import table as text_table
from autotune.errors import InputError
from autotune.gpu_specs import gpu_spec
from autotune.problem import DTYPES, LAYOUT_CHOICES, LAYOUTS
from autotune.select.cover import MAX_KERNELS
from autotune.shapes import SHAPE_SETS

if TYPE_CHECKING:  # autotune.select.selection loads the database layer: only the commands that build a table need it
    from autotune.select.kernel_table import DtypeTable, TableKernel
    from autotune.select.selection import HeldOut, Selection

LEAVE_ONE_OUT = "leave-one-out"
LEAVE_ONE_OUT_HEADER = "held out"  # the rules' column of leave-one-out picks
BUILDING = "building the table"  # what the progress line says
CUBLAS_SHOWN = "cuBLAS"  # a cuBLAS pick in the text, where a kernel's short name would stand


def register(sub) -> None:
    parser = sub.add_parser(
        "table", help="the selection table (at most 16 kernels, nearest training shape) and how good its picks are",
        epilog="example: autotune table --gpu h200 --dtype f16 --hold-out llm-held-out",
    )
    add_table_arguments(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    add_wide_argument(parser)
    parser.set_defaults(run=run)


def add_table_arguments(parser: argparse.ArgumentParser) -> None:
    """--gpu, --dtype, --layout, --hold-out, --max-kernels, --db: what a table is built from (``table`` and ``plot``)."""
    add_gpu_argument(parser)
    parser.add_argument("--dtype", default="f32", help=f"element type: {', '.join(DTYPES)} (default f32)")
    add_layout_argument(parser)
    parser.add_argument("--hold-out", metavar="FILE|SET",
                        help=f"shapes left out of the table and judged on: a shape file or {', '.join(SHAPE_SETS)} "
                             "(default: leave each training shape out in turn)")
    parser.add_argument("--max-kernels", action=Integer, least=1, most=MOST_KERNELS, default=MAX_KERNELS,
                        help=f"most kernels the table may use (default {MAX_KERNELS})")
    add_db_argument(parser)


@dataclasses.dataclass(frozen=True)
class Judged:
    """A built table with where its results came from and its held-out report."""

    selection: Selection
    source: str
    held_out_from: str  # the --hold-out value, or LEAVE_ONE_OUT
    report: tuple[HeldOut, ...]
    ignored: tuple[str, ...] = ()  # results left out of it, one line each
    missing: str = ""  # where the table is empty: what the database holds instead, and what to do

    @property
    def table(self) -> DtypeTable:
        return self.selection.table


def judged(args: argparse.Namespace) -> Judged:
    """The table ``args`` asks for, built from its database and judged on its held-out shapes."""
    from autotune.select.selection import build, held_out, ignored_environments, judge

    gpu = gpu_spec(args.gpu)  # --gpu auto is the attached GPU's model by now (autotune.cli.main)
    if args.dtype not in DTYPES:
        raise InputError("--dtype", args.dtype, ", ".join(DTYPES))
    if args.layout not in LAYOUTS:
        raise InputError("--layout", args.layout, LAYOUT_CHOICES)
    if args.max_kernels < 1:
        raise InputError("--max-kernels", args.max_kernels, "an integer >= 1")
    held = _hold_out_shapes(args.hold_out) if args.hold_out else []
    with TerminalProgress() as progress, open_store(args.db, read_only=True) as store:
        progress(BUILDING, 0, 2)
        built = build(store, gpu, gpu.key, args.dtype, args.max_kernels, hold_out=held, layout=args.layout)
        ignored = tuple(ignored_environments(store, gpu=gpu.key))
        missing = "" if built.training else no_results_hint(store)
        progress(BUILDING, 1, 2)  # then judged on the shapes left out
        report = judge(built, held) if args.hold_out else held_out(built)
        progress(BUILDING, 2, 2)
    return Judged(built, store.shown_url, args.hold_out or LEAVE_ONE_OUT, tuple(report), ignored, missing)


def _hold_out_shapes(spec: str) -> list[tuple[int, int, int]]:
    from autotune.shapes import read_shapes

    try:
        return read_shapes(spec)
    except InputError as error:
        if error.what == "--shapes":
            raise InputError("--hold-out", error.value, error.valid) from None
        raise


def run(args: argparse.Namespace) -> int:
    chosen = judged(args)
    for line in chosen.ignored:
        print(f"autotune: {line}", file=sys.stderr)
    if args.json:
        print(json.dumps(to_json(chosen), indent=2))
        return 0
    selection, table = chosen.selection, chosen.table
    width = terminal_width(args.wide)
    if not selection.training:
        print(paragraph(f"no tuned {selection.dtype} results for {selection.gpu.key} in {chosen.source}; "
                        f"{chosen.missing}", width))
        return 0
    print(paragraph(
        f"selection table for {selection.gpu.key} {selection.dtype}{_layout(selection)} ({chosen.source}): "
        f"{len(table.chosen)} kernels "
        f"(at most {selection.max_kernels}) for {len(selection.training)} training shapes; a shape gets, of the "
        "kernels measured at the nearest training shape, the one whose time there scaled by its busiest SM's work "
        "is least, or cuBLAS where that time is more than cuBLAS's there scaled by m*n*k "
        f"({_cublas_rules(table)} of {len(table.rules)} rules go to cuBLAS)", width))
    _print_rules(chosen, width, args.wide)
    if selection.unruled:
        print(paragraph(f"{len(selection.unruled)} training shapes have no rule (none of the {len(table.chosen)} "
                        "kernels was measured there): " + ", ".join("x".join(map(str, s)) for s in selection.unruled),
                        width))
    _print_kernels(chosen, width, args.wide)
    if chosen.held_out_from != LEAVE_ONE_OUT:
        _print_held_out(chosen, width)
    print(paragraph(quality_line(chosen), width))
    return 0


def _print_rules(chosen: Judged, width: int | None, wide: bool) -> None:
    """One row per rule; ``wide``: with the values of the knobs that differ between the kernels."""
    table, measured = chosen.table, chosen.selection.results.shapes
    varying = _varying_knobs(chosen) if wide else []
    loo = {h.problem: h for h in chosen.report} if chosen.held_out_from == LEAVE_ONE_OUT else None
    headers = ["shape", "kernel", *(name.lower() for name in varying), "ms", "of best", "vs cuBLAS", "runs"]
    rows = []
    for rule in table.rules:
        problem, params = measured[rule.shape].problem, _params(chosen, rule.kernel)
        row = [problem.shape, table.short_name(rule.kernel), *(params.get(name, "-") for name in varying),
               rule.ms, f"{rule.fraction_of_best:.3f}", _ratio(rule.ratio_to_cublas),
               CUBLAS_SHOWN if table.goes_to_cublas(rule) else table.short_name(rule.kernel)]
        if loo is not None:
            row.append(_loo_verdict(loo[problem], table))
        rows.append(row)
    if loo is not None:
        headers.append(LEAVE_ONE_OUT_HEADER)
        print(paragraph(f"{LEAVE_ONE_OUT_HEADER}: the pick of the table built without this shape", width))
    print(text_table(headers, rows, width, wrap=[LEAVE_ONE_OUT_HEADER]))


def _print_kernels(chosen: Judged, width: int | None, wide: bool) -> None:
    """The kernels with their configs, and (unless ``wide``: the rules show them) the knobs that differ."""
    table = chosen.table
    rows = [[table.short_name(k.name), table.served(k.name), k.family, k.name] for k in table.chosen]
    print(paragraph("kernels, in the order the cover chose them (each adds the most to the geometric mean of "
                    "best/pick):", width))
    print(text_table(["kernel", "rules", "family", "config"], rows, width, wrap=["config"]))
    varying = _varying_knobs(chosen)
    if wide or not varying or len(table.chosen) < 2:
        return
    params = {k.name: _params(chosen, k.name) for k in table.chosen}
    print("the knobs whose values differ between the kernels:")
    print(text_table(["knob", *(table.short_name(k.name) for k in table.chosen)],
                     [[name.lower(), *(params[k.name].get(name, "-") for k in table.chosen)] for name in varying],
                     width))


def _print_held_out(chosen: Judged, width: int | None) -> None:
    table = chosen.table
    rows = [[h.problem.shape, _picked(table, h),
             h.picked_from.shape if h.picked_from else "-", h.pick_ms, h.best_ms, h.cublas_ms,
             _ratio(h.fraction_of_best, "x"), _ratio(h.ratio_to_cublas)] for h in chosen.report]
    print(paragraph(f"held out ({chosen.held_out_from}): the table's pick at shapes it was not built from", width))
    print(text_table(["shape", "pick", "from", "pick ms", "best ms", "cuBLAS ms", "best/pick", "cuBLAS/pick"], rows,
                     width))


def quality_line(chosen: Judged) -> str:
    """One line: geometric means and worst of best/pick and cuBLAS/pick, and the shapes without a measured pick."""
    from autotune.select.selection import quality

    q = quality(chosen.report)
    text = f"held-out picks measured on {q.measured} of {q.shapes} shapes ({chosen.held_out_from})"
    if q.measured:
        text += (f": best/pick geomean {q.geomean_fraction_of_best:.3f}, worst {q.worst_fraction_of_best:.3f}")
    if q.geomean_ratio_to_cublas is not None:
        text += f"; cuBLAS/pick geomean {q.geomean_ratio_to_cublas:.3f}, worst {q.worst_ratio_to_cublas:.3f}"
    text += f"; {q.unmeasured} with no measured pick"
    if q.no_results:
        text += f"; {q.no_results} with no results at all"
    return text


def to_json(chosen: Judged) -> dict:
    """Everything ``autotune table`` shows, machine-readably."""
    from autotune.select.kernel_table import SELECTION_RULE
    from autotune.select.selection import CUBLAS, quality

    selection, table, measured = chosen.selection, chosen.table, chosen.selection.results.shapes
    loo = chosen.held_out_from == LEAVE_ONE_OUT
    by_problem = {h.problem: h for h in chosen.report}
    rules = []
    for rule in table.rules:
        problem = measured[rule.shape].problem
        row = {"shape": problem.shape, "alpha": problem.alpha, "beta": problem.beta,
               "kernel": table.short_name(rule.kernel), "config": rule.kernel, "family": table.kernel(rule.kernel).family,
               "cublas": table.goes_to_cublas(rule),
               "params": _params(chosen, rule.kernel), "ms": rule.ms, "best_ms": rule.best_ms,
               "best_config": measured[rule.shape].best_config, "cublas_ms": rule.cublas_ms,
               "fraction_of_best": rule.fraction_of_best, "ratio_to_cublas": rule.ratio_to_cublas,
               "measured_on": rule.measured_on}
        if loo:
            held = by_problem[problem]
            row["held_out_pick"] = held.config_name
            row["held_out_fraction_of_best"] = held.fraction_of_best
        rules.append(row)
    return {
        "gpu": selection.gpu.key, "arch": selection.gpu.sm, "dtype": selection.dtype, "layout": selection.layout,
        "source": chosen.source,
        "max_kernels": selection.max_kernels,
        "selection": SELECTION_RULE,
        "cublas_rules": _cublas_rules(table),
        "training_shapes": ["x".join(map(str, s)) for s in selection.training],
        "unruled_shapes": ["x".join(map(str, s)) for s in selection.unruled],
        "kernels": [{"kernel": table.short_name(k.name), "config": k.name, "family": k.family,
                     "params": _params(chosen, k.name),
                     "rules": table.served(k.name), "launch": k.launch.to_dict()} for k in table.chosen],
        "rules": rules,
        "held_out": {
            "from": chosen.held_out_from,
            "shapes": [{"shape": h.problem.shape, "pick": h.config_name, "cublas": h.cublas,
                        "kernel": CUBLAS if h.cublas else _short_name(table, h.kernel),
                        "picked_from": h.picked_from.shape if h.picked_from else None, "pick_ms": h.pick_ms,
                        "best_ms": h.best_ms, "cublas_ms": h.cublas_ms, "fraction_of_best": h.fraction_of_best,
                        "ratio_to_cublas": h.ratio_to_cublas} for h in chosen.report],
            "quality": quality(chosen.report).to_dict(),
        },
    }


def _params(chosen: Judged, kernel: str) -> dict[str, int]:
    """The knob values of ``kernel`` as its measurements recorded them."""
    configs = chosen.selection.results.configs
    return configs[kernel].params if kernel in configs else chosen.table.kernel(kernel).params


def _varying_knobs(chosen: Judged) -> list[str]:
    """The knobs whose values differ among the chosen kernels, in the first kernel's order."""
    params = [_params(chosen, kernel.name) for kernel in chosen.table.chosen]
    ordered = list(dict.fromkeys(name for values in params for name in values))
    return [n for n in ordered if len({values.get(n) for values in params}) > 1]


def _loo_verdict(held: HeldOut, table: DtypeTable) -> str:
    if held.picked_from is None:
        return "no other shape"
    name = _picked(table, held)
    if held.fraction_of_best is None:
        return f"{name} from {held.picked_from.shape}: not measured here"
    return f"{held.fraction_of_best:.3f} of best ({name} from {held.picked_from.shape})"


def _layout(selection) -> str:
    return "" if selection.layout == "row" else f" (layout {selection.layout}: B stored N x K)"


def _cublas_rules(table: DtypeTable) -> int:
    """How many of the table's rules go to cuBLAS (their kernel was slower than cuBLAS there)."""
    return sum(1 for rule in table.rules if table.goes_to_cublas(rule))


def _picked(table: DtypeTable, held: HeldOut) -> str:
    """What a held-out shape gets, as the table's text shows it: cuBLAS, a kernel's short name, or -."""
    if held.cublas:
        return CUBLAS_SHOWN
    return table.short_name(held.kernel.name) if held.kernel else "-"


def _short_name(table: DtypeTable, kernel: TableKernel | None) -> str | None:
    """The table's short name of ``kernel``; None where it is not one of the table's kernels (a leave-one-out
    table may choose others)."""
    return table.short_name(kernel.name) if kernel and kernel.name in {k.name for k in table.kernels} else None


def _ratio(value: float | None, suffix: str = "x") -> str:
    return f"{value:.3f}{suffix}" if value is not None else "-"
