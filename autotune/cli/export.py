"""``autotune export``: the tuned kernels of a GPU or an architecture, for programs to use.

Each ``--format`` is a writer of :mod:`autotune.export.writers`: ``cuda`` (a
CMake project of a C library with the kernels' cubins embedded), ``python`` (the
table with cubins, as JSON that ``autotune.load`` reads, so a deployment needs no
database and no compiler) and ``json`` (the table itself: launch contracts and
measured quality, no cubins).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.cli.arguments import add_db_argument, no_results_hint, open_store
from autotune.cli.progress import TerminalProgress
from autotune.cli.text import printable, terminal_width
from autotune.cli.text import table as text_table
from autotune.errors import InputError
from autotune.gpu_specs import expected_archs
from autotune.export.shipped import SOURCE
from autotune.export.writers import WRITERS, writer
from autotune.gpu_specs import GPUS, gpu_spec
from autotune.problem import DTYPES

if TYPE_CHECKING:
    from autotune.select.kernel_table import KernelTable


def register(sub) -> None:
    parser = sub.add_parser(
        "export", help="export the tuned kernels of a GPU or architecture: a C library, a runtime table, JSON",
        epilog="example: autotune export --gpu h200 --dtype f32,f16 --format cuda --out h200_gemm",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="formats:\n" + "\n".join(f"  {w.name}: {w.writes}" for w in WRITERS.values()),
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--gpu", help=f"the GPU model whose results to export: {', '.join(GPUS)}")
    target.add_argument("--arch", help="every GPU of an architecture, e.g. sm_90")
    parser.add_argument("--dtype", default=",".join(DTYPES),
                        help=f"element types, comma-separated (default {','.join(DTYPES)})")
    parser.add_argument("--format", default="cuda", help=f"{', '.join(WRITERS)} (default cuda; see formats above)")
    parser.add_argument("--out", required=True, help="output directory (created if missing)")
    add_db_argument(parser)
    parser.add_argument("--shipped", action="store_true",
                        help="export from the tuned results that ship with autotune instead of a database")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from autotune.export.files import check_destination
    from autotune.select.kernel_table import spec_for_arch

    chosen = writer(args.format)
    dtypes = tuple(d.strip() for d in args.dtype.split(",") if d.strip())
    for dtype in dtypes or (args.dtype,):
        if dtype not in DTYPES:
            raise InputError("--dtype", dtype, "a comma-separated list of " + ", ".join(DTYPES))
    gpu = gpu_spec(args.gpu).key if args.gpu else None
    if args.arch:
        spec_for_arch(args.arch)  # an unknown architecture is an error naming the known ones
    out = Path(args.out)
    check_destination(out)  # before minutes of compiling
    with TerminalProgress() as progress:
        table = _prebuilt(gpu or args.arch, dtypes) if args.shipped else None
        if table is None:
            table = _built(args, gpu, dtypes, progress)
        if chosen.compiles:
            from autotune.export.compile import compile_table

            table = compile_table(table, progress)
    written = chosen.write(table, out)
    _summary(table, chosen.name, out, written)
    return 0


def _prebuilt(scope: str, dtypes: tuple[str, ...]) -> KernelTable | None:
    """The shipped table of ``scope`` with ``dtypes``, as it comes prebuilt with autotune (its kernels compiled),
    where it is current; None otherwise (it is then built from the shipped results)."""
    from autotune.export.prebuilt import read_prebuilt

    prebuilt = read_prebuilt(scope)
    if prebuilt is None or any(dtype not in prebuilt.table.dtypes for dtype in dtypes):
        return None
    for line in prebuilt.ignored:
        print(f"autotune: {line}", file=sys.stderr)
    table = prebuilt.table
    return dataclasses.replace(table, dtypes={dtype: table.dtypes[dtype] for dtype in dtypes}, other_layouts={
        layout: {dtype: t for dtype, t in tables.items() if dtype in dtypes}
        for layout, tables in table.other_layouts.items() if set(tables) & set(dtypes)})


def _built(args: argparse.Namespace, gpu: str | None, dtypes: tuple[str, ...], progress) -> KernelTable:
    """The table of ``gpu`` (or ``--arch``) built from the database, or from the shipped results."""
    from autotune.export.shipped import shipped_hold_out
    from autotune.runtime.sources import shipped_store
    from autotune.select.selection import build_table, ignored_environments

    store = shipped_store(progress) if args.shipped else open_store(args.db, read_only=True)
    source = SOURCE if args.shipped else store.shown_url
    with store:
        gpus = store.gpus()
        held = sorted({key for key, _, _ in gpus})
        if gpu and gpu not in held:
            archs = expected_archs(gpu) or ()
            kin = sorted({key for key, _, arch in gpus if arch in archs})
            hint = f"; {', '.join(kin)} ({archs[0]}, the same architecture) has some: --arch {archs[0]}" if kin else ""
            raise InputError("--gpu", gpu, f"a GPU with tuned results in {source}: "
                             + (", ".join(held) if held else no_results_hint(store)) + hint)
        for line in ignored_environments(store, gpu=gpu, arch=args.arch):
            print(f"autotune: {line}", file=sys.stderr)
        table = build_table(store, dtypes, gpu=gpu, arch=args.arch, progress=progress,
                            hold_out=shipped_hold_out() if args.shipped else ())
        table = dataclasses.replace(table, source=source)
        others = sorted({key for key, _, arch in store.gpus() if arch == table.arch and key != gpu})
    if not any(t.rules for _, _, t in table.dtype_tables()):
        hint = (f"; {', '.join(others)} ({table.arch}, the same architecture) has some: --arch {table.arch}"
                if gpu and others else "; `autotune results import --shipped` loads the shipped ones, or pass --shipped")
        raise InputError("--gpu" if gpu else "--arch", gpu or args.arch,
                         f"a GPU or architecture with tuned {'/'.join(dtypes)} results in {source}{hint}")
    return table


def _summary(table, fmt: str, out: Path, written: list[Path]) -> None:
    print(f"exported {fmt} for {table.scope} ({table.arch}; measured on {printable(', '.join(table.measured_on))}) "
          f"from {table.source} to {out}")
    rows = []
    for layout, dtype, dtype_table in table.dtype_tables():
        for rule in dtype_table.rules:
            ratio = rule.ratio_to_cublas
            runs = "cuBLAS" if dtype_table.pick(rule.m, rule.n, rule.k).cublas else "kernel"
            rows.append([dtype if layout == "row" else f"{dtype} {layout}", f"{rule.m}x{rule.n}x{rule.k}", runs,
                         rule.kernel, rule.ms,
                         f"{ratio:.3f}x" if ratio else "-"])
    print(text_table(["dtype", "tuned shape", "runs", "kernel", "ms", "kernel vs cuBLAS"], rows,
                     width=terminal_width(), wrap=["kernel"]))
    print(f"{len(written)} files written, e.g. {written[0]}")
