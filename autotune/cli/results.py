"""``autotune results``: tuned results as JSON lines, exported from or imported into a database."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autotune.cli.arguments import add_db_argument, open_store, require_positive
from autotune.errors import InputError
from autotune.gpus import gpu_spec


def register(sub) -> None:
    results = sub.add_parser(
        "results", help="export or import tuned results as JSON lines (tuned_db/)",
        epilog="example: autotune results import tuned_db/h200.jsonl",
    )
    results.add_argument("action", choices=["export", "import"])
    results.add_argument("files", nargs="*", help="import: tuned-results files")
    results.add_argument("--gpu", help="export: the GPU whose results to write")
    add_db_argument(results)
    results.add_argument("--per-problem", type=int, default=10, help="export: kernels per problem (default 10)")
    results.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:

    from autotune import tuned

    if args.action == "export":
        if not args.gpu or args.files:
            raise InputError("results export", " ".join(args.files) or "(no --gpu)", "--gpu NAME and no files")
        gpu = gpu_spec(args.gpu)
        require_positive("--per-problem", args.per_problem)
        lines = tuned.export(open_store(args.db), gpu.key, sys.stdout, args.per_problem)
        print(f"exported {lines} measurements for {gpu.key}", file=sys.stderr)
        return 0
    if not args.files:
        raise InputError("results import", "(no files)", "one or more tuned-results files, e.g. tuned_db/h200.jsonl")
    store = open_store(args.db)
    for path in map(Path, args.files):
        added, present = tuned.import_file(store, path)
        print(f"{path}: {added} measurements added, {present} already present ({store.url})")
    return 0
