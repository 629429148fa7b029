"""``autotune table``: the selection table of a GPU and dtype (at most 16 kernels), with its measured quality."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import TYPE_CHECKING

from autotune.cli.arguments import MAX_KERNELS as MOST_KERNELS
from autotune.cli.arguments import Integer, add_db_argument, open_store
from autotune.cli.text import table as text_table
from autotune.errors import InputError
from autotune.gpu_specs import GPUS, GpuSpec, gpu_spec
from autotune.problem import DTYPES
from autotune.select.cover import MAX_KERNELS
from autotune.shapes import SHAPE_SETS

if TYPE_CHECKING:  # autotune.select.selection loads the database layer: only the commands that build a table need it
    from autotune.select.selection import HeldOut, Results, SelectionTable

LEAVE_ONE_OUT = "leave-one-out"


def register(sub) -> None:
    parser = sub.add_parser(
        "table", help="the selection table (at most 16 kernels, nearest training shape) and how good its picks are",
        epilog="example: autotune table --gpu h200 --dtype f16 --hold-out llm-held-out",
    )
    add_table_arguments(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(run=run)


def add_table_arguments(parser: argparse.ArgumentParser) -> None:
    """--gpu, --dtype, --hold-out, --max-kernels, --db: what a table is built from (``table`` and ``plot``)."""
    parser.add_argument("--gpu", required=True, help=f"GPU model: {', '.join(GPUS)}")
    parser.add_argument("--dtype", default="f32", help=f"element type: {', '.join(DTYPES)} (default f32)")
    parser.add_argument("--hold-out", metavar="FILE|SET",
                        help=f"shapes left out of the table and judged on: a shape file or {', '.join(SHAPE_SETS)} "
                             "(default: leave each training shape out in turn)")
    parser.add_argument("--max-kernels", action=Integer, least=1, most=MOST_KERNELS, default=MAX_KERNELS,
                        help=f"most kernels the table may use (default {MAX_KERNELS})")
    add_db_argument(parser)


@dataclasses.dataclass(frozen=True)
class Selection:
    """A built table with everything measured and its held-out report."""

    gpu: GpuSpec
    dtype: str
    source: str
    table: SelectionTable
    results: Results
    held_out_from: str  # the --hold-out value, or LEAVE_ONE_OUT
    report: tuple[HeldOut, ...]


def selection(args: argparse.Namespace) -> Selection:
    """The table ``args`` asks for, built from its database and judged on its held-out shapes."""
    from autotune.select.selection import build, held_out, judge

    gpu = gpu_spec(args.gpu)
    if args.dtype not in DTYPES:
        raise InputError("--dtype", args.dtype, ", ".join(DTYPES))
    if args.max_kernels < 1:
        raise InputError("--max-kernels", args.max_kernels, "an integer >= 1")
    held = _hold_out_shapes(args.hold_out) if args.hold_out else []
    store = open_store(args.db, read_only=True)
    with store:
        table, results = build(store, gpu, gpu.key, args.dtype, args.max_kernels, hold_out=held)
    report = judge(table, results, held, args.dtype) if args.hold_out else held_out(table, results)
    return Selection(gpu, args.dtype, store.shown_url, table, results, args.hold_out or LEAVE_ONE_OUT, tuple(report))


def _hold_out_shapes(spec: str) -> list[tuple[int, int, int]]:
    from autotune.shapes import read_shapes

    try:
        return read_shapes(spec)
    except InputError as error:
        if error.what == "--shapes":
            raise InputError("--hold-out", error.value, error.valid) from None
        raise


def run(args: argparse.Namespace) -> int:
    chosen = selection(args)
    if args.json:
        print(json.dumps(to_json(chosen), indent=2))
        return 0
    table = chosen.table
    if not table.training:
        print(f"no tuned {chosen.dtype} results for {chosen.gpu.key} in {chosen.source}")
        return 0
    print(f"selection table for {chosen.gpu.key} {chosen.dtype} ({chosen.source}): {len(table.kernels)} kernels "
          f"(at most {table.max_kernels}) for {len(table.training)} training shapes; a shape gets, of the kernels "
          "measured at the nearest training shape, the one whose time there scaled by its busiest SM's work is least")
    _print_rules(chosen)
    if table.unruled:
        print(f"{len(table.unruled)} training shapes have no rule (none of the {len(table.kernels)} kernels was "
              f"measured there): {', '.join('x'.join(map(str, s)) for s in table.unruled)}")
    _print_kernels(table)
    if chosen.held_out_from != LEAVE_ONE_OUT:
        _print_held_out(chosen)
    print(quality_line(chosen))
    return 0


def _print_rules(chosen: Selection) -> None:
    table = chosen.table
    varying = _varying_knobs(table)
    loo = {h.problem: h for h in chosen.report} if chosen.held_out_from == LEAVE_ONE_OUT else None
    headers = ["shape", "kernel", " ".join(varying) or "knobs", "ms", "of best", "vs cuBLAS"]
    rows = []
    for rule in table.rules:
        row = [rule.problem.shape, table.short_name(rule.kernel), " ".join(str(rule.kernel.params.get(k, "-"))
                                                                           for k in varying),
               rule.ms, f"{rule.fraction_of_best:.3f}", _ratio(rule.ratio_to_cublas)]
        if loo is not None:
            row.append(_loo_verdict(loo[rule.problem], table))
        rows.append(row)
    if loo is not None:
        headers.append("held out: the pick of the table built without this shape")
    print(text_table(headers, rows))


def _print_kernels(table: SelectionTable) -> None:
    rows = [[table.short_name(k), table.served(k), k.family, k.name] for k in table.kernels]
    print("kernels, in the order the cover chose them (each adds the most to the geometric mean of best/pick):")
    print(text_table(["kernel", "rules", "family", "config"], rows))


def _print_held_out(chosen: Selection) -> None:
    table = chosen.table
    rows = [[h.problem.shape, table.short_name(h.kernel) if h.kernel else "-",
             h.picked_from.shape if h.picked_from else "-", h.pick_ms, h.best_ms, h.cublas_ms,
             _ratio(h.fraction_of_best, "x"), _ratio(h.ratio_to_cublas)] for h in chosen.report]
    print(f"held out ({chosen.held_out_from}): the table's pick at shapes it was not built from")
    print(text_table(["shape", "pick", "from", "pick ms", "best ms", "cuBLAS ms", "best/pick", "cuBLAS/pick"], rows))


def quality_line(chosen: Selection) -> str:
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


def to_json(chosen: Selection) -> dict:
    """Everything ``autotune table`` shows, machine-readably."""
    from autotune.select.selection import quality

    table = chosen.table
    loo = chosen.held_out_from == LEAVE_ONE_OUT
    by_problem = {h.problem: h for h in chosen.report}
    rules = []
    for rule in table.rules:
        row = {"shape": rule.problem.shape, "alpha": rule.problem.alpha, "beta": rule.problem.beta,
               "kernel": table.short_name(rule.kernel), "config": rule.kernel.name, "family": rule.kernel.family,
               "params": rule.kernel.params, "ms": rule.ms, "best_ms": rule.best_ms, "best_config": rule.best_config,
               "cublas_ms": rule.cublas_ms, "fraction_of_best": rule.fraction_of_best,
               "ratio_to_cublas": rule.ratio_to_cublas, "measured_on": rule.measured_on}
        if loo:
            held = by_problem[rule.problem]
            row["held_out_pick"] = held.config_name
            row["held_out_fraction_of_best"] = held.fraction_of_best
        rules.append(row)
    return {
        "gpu": chosen.gpu.key, "arch": chosen.gpu.sm, "dtype": chosen.dtype, "source": chosen.source,
        "max_kernels": table.max_kernels,
        "training_shapes": ["x".join(map(str, s)) for s in table.training],
        "unruled_shapes": ["x".join(map(str, s)) for s in table.unruled],
        "kernels": [{"kernel": table.short_name(k), "config": k.name, "family": k.family, "params": k.params,
                     "rules": table.served(k), "launch": _launch(k, chosen.gpu)} for k in table.kernels],
        "rules": rules,
        "held_out": {
            "from": chosen.held_out_from,
            "shapes": [{"shape": h.problem.shape, "pick": h.config_name,
                        "kernel": table.short_name(h.kernel) if h.kernel else None,
                        "picked_from": h.picked_from.shape if h.picked_from else None, "pick_ms": h.pick_ms,
                        "best_ms": h.best_ms, "cublas_ms": h.cublas_ms, "fraction_of_best": h.fraction_of_best,
                        "ratio_to_cublas": h.ratio_to_cublas} for h in chosen.report],
            "quality": quality(chosen.report).to_dict(),
        },
    }


def _varying_knobs(table: SelectionTable) -> list[str]:
    """The knobs whose values differ among the chosen kernels, in the first kernel's order."""
    names = [name for kernel in table.kernels for name in kernel.params]
    ordered = list(dict.fromkeys(names))
    return [n for n in ordered if len({k.params.get(n) for k in table.kernels}) > 1]


def _loo_verdict(held: HeldOut, table: SelectionTable) -> str:
    if held.picked_from is None:
        return "no other shape"
    if held.fraction_of_best is None:
        return f"{_name(table, held.kernel)} from {held.picked_from.shape}: not measured here"
    return f"{held.fraction_of_best:.3f} of best ({_name(table, held.kernel)} from {held.picked_from.shape})"


def _name(table: SelectionTable, kernel) -> str:
    """The kernel's short name where the table holds it, else its config name."""
    return table.short_name(kernel) if kernel in table.kernels else kernel.name


def _ratio(value: float | None, suffix: str = "x") -> str:
    return f"{value:.3f}{suffix}" if value is not None else "-"


def _launch(kernel, gpu) -> dict | None:
    """The kernel's launch contract (block, grid over M, N, K, shared memory, tensor maps)."""
    from autotune.errors import AutotuneError
    from autotune.select.kernel_table import table_kernel

    try:
        return table_kernel(kernel.family, kernel.params, gpu).launch.to_dict()
    except AutotuneError:  # a config the current space no longer holds
        return None
