"""``autotune export``: the tuned kernels of a GPU or an architecture, for programs to use.

Formats: ``cuda`` (a CMake project of a C library with the kernels' cubins
embedded), ``python`` (a table file with cubins that ``autotune.load`` reads,
so a deployment needs no database and no compiler) and ``json`` (the table
itself: launch contracts and measured quality, no cubins).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from autotune.cli.arguments import add_db_argument, open_store
from autotune.cli.text import printable
from autotune.cli.text import table as text_table
from autotune.errors import InputError
from autotune.gpu_specs import GPUS, gpu_spec
from autotune.problem import DTYPES

FORMATS = ("cuda", "python", "json")


def register(sub) -> None:
    parser = sub.add_parser(
        "export", help="export the tuned kernels of a GPU or architecture: a C library, a runtime table, JSON",
        epilog="example: autotune export --gpu h200 --dtype f32,f16 --format cuda --out h200_gemm",
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--gpu", help=f"the GPU model whose results to export: {', '.join(GPUS)}")
    target.add_argument("--arch", help="every GPU of an architecture, e.g. sm_90")
    parser.add_argument("--dtype", default="f32,f16", help="element types, comma-separated (default f32,f16)")
    parser.add_argument("--format", default="cuda", help=f"{', '.join(FORMATS)} (default cuda)")
    parser.add_argument("--out", required=True, help="output directory (created if missing)")
    add_db_argument(parser)
    parser.add_argument("--shipped", action="store_true",
                        help="export from the tuned results that ship with autotune instead of a database")
    parser.set_defaults(run=run)


def file_name(fmt: str, scope: str) -> str:
    """The table file of a ``python`` or ``json`` export."""
    return f"autotune_kernels_{scope}.json" if fmt == "python" else f"autotune_table_{scope}.json"


def run(args: argparse.Namespace) -> int:
    from autotune.runtime.sources import shipped_store
    from autotune.select.kernel_table import build_table, spec_for_arch

    if args.format not in FORMATS:
        raise InputError("--format", args.format, ", ".join(FORMATS))
    dtypes = tuple(d.strip() for d in args.dtype.split(",") if d.strip())
    for dtype in dtypes or (args.dtype,):
        if dtype not in DTYPES:
            raise InputError("--dtype", dtype, "a comma-separated list of " + ", ".join(DTYPES))
    gpu = gpu_spec(args.gpu).key if args.gpu else None
    if args.arch:
        spec_for_arch(args.arch)  # an unknown architecture is an error naming the known ones
    store = shipped_store() if args.shipped else open_store(args.db, read_only=True)
    source = "the results shipped with autotune" if args.shipped else store.shown_url
    with store:
        table = dataclasses.replace(build_table(store, dtypes, gpu=gpu, arch=args.arch), source=source)
        others = sorted({key for key, _, arch in store.gpus() if arch == table.arch and key != gpu})
    if not any(t.rules for t in table.dtypes.values()):
        hint = (f"; {', '.join(others)} ({table.arch}, the same architecture) has some: --arch {table.arch}"
                if gpu and others else "; `autotune results import --shipped` loads the shipped ones, or pass --shipped")
        raise InputError("--gpu" if gpu else "--arch", gpu or args.arch,
                         f"a GPU or architecture with tuned {'/'.join(dtypes)} results in {source}{hint}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.format == "json":
        written = [out / file_name("json", table.scope)]
        table.write(written[0], with_cubins=False)
    else:
        table = table.compiled()
        if args.format == "python":
            written = [out / file_name("python", table.scope)]
            table.write(written[0], with_cubins=True)
        else:
            from autotune.export.cuda import write_library

            written = write_library(table, out)
    _summary(table, args.format, out, written)
    return 0


def _summary(table, fmt: str, out: Path, written: list[Path]) -> None:
    print(printable(f"exported {fmt} for {table.scope} ({table.arch}; measured on {', '.join(table.measured_on)}) "
                    f"from {table.source} to {out}"))
    rows = []
    for dtype, dtype_table in table.dtypes.items():
        for rule in dtype_table.rules:
            ratio = rule.ratio_to_cublas
            rows.append([dtype, f"{rule.m}x{rule.n}x{rule.k}", rule.kernel, rule.ms,
                         f"{ratio:.3f}x" if ratio else "-"])
    print(text_table(["dtype", "tuned shape", "kernel", "ms", "vs cuBLAS"], rows))
    print(printable(f"{len(written)} files written, e.g. {written[0]}"))
