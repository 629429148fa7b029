"""``autotune results``: tuned results as JSON lines, exported from or imported into a database."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autotune.cli.arguments import MAX_ROWS, Integer, add_db_argument, no_results_hint, open_store
from autotune.cli.progress import TerminalProgress
from autotune.cli.text import printable
from autotune.data_files import shipped_results
from autotune.errors import InputError
from autotune.gpu_specs import gpu_spec

ACTIONS = ("export", "import")


def register(sub) -> None:
    results = sub.add_parser(
        "results", help="export or import tuned results as JSON lines (tuned_db/)",
        epilog="example: autotune results import tuned_db/h200.jsonl (or --shipped); "
               "autotune results export --gpu h200 > h200.jsonl",
    )
    results.add_argument("action", nargs="?", choices=ACTIONS, help="import files into the database, or export "
                                                                   "a GPU's results as JSON lines")
    results.add_argument("files", nargs="*", help="import: tuned-results files")
    results.add_argument("--shipped", action="store_true",
                         help="import: the tuned results that ship with autotune (tuned_db/<gpu>.jsonl)")
    results.add_argument("--gpu", help="export: the GPU whose results to write")
    add_db_argument(results)
    results.add_argument("--per-problem", action=Integer, least=1, most=MAX_ROWS, default=None,
                         help="export: only the N fastest kernels per problem, every cuBLAS measurement and no "
                              "failures (default: everything, energy windows and failures included)")
    results.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from autotune.results import files as tuned

    if args.action is None:
        raise InputError("results", "(no action)", "import FILE... or import --shipped, or export --gpu NAME")

    if args.action == "export":
        if not args.gpu or args.files or args.shipped:
            given = " ".join(args.files) or ("--shipped" if args.shipped else "(no --gpu)")
            raise InputError("results export", given, "--gpu NAME and no files")
        gpu = gpu_spec(args.gpu)
        with open_store(args.db, read_only=True) as store:
            written = tuned.export(store, gpu.key, sys.stdout, args.per_problem)
            missing = "" if written.entries else f" ({no_results_hint(store)})"
        print(printable(_export_summary(written, gpu.key, args.per_problem) + missing), file=sys.stderr)
        return 0
    if args.per_problem is not None or args.gpu:
        raise InputError("results import", "--per-problem" if args.per_problem is not None else "--gpu",
                         "files or --shipped (--gpu and --per-problem are for export)")
    paths = [Path(name) for name in args.files] + (shipped_results() if args.shipped else [])
    if not paths:
        raise InputError("results import", "(no files)",
                         "one or more tuned-results files, e.g. tuned_db/h200.jsonl, or --shipped")
    with open_store(args.db) as store:
        with TerminalProgress() as progress:
            reports = tuned.import_files(store, paths, progress)
        for report in reports:
            print(printable(f"{report.path}: {report.measurements_added} measurements added, "
                            f"{report.measurements_present} already present; {report.energy_windows_added} energy "
                            f"windows and {report.failures_added} failures added, {report.failures_present} already "
                            f"present ({store.shown_url})"))
    return 0


def _export_summary(written, gpu_key: str, per_problem: int | None) -> str:
    from autotune.results import FailureEntry

    failures = sum(isinstance(entry, FailureEntry) for entry in written.entries)
    windows = sum(len(entry.energy_windows) for entry in written.entries if not isinstance(entry, FailureEntry))
    summary = (f"exported {len(written.entries) - failures} measurements ({windows} energy windows) and "
               f"{failures} failures for {gpu_key}")
    if per_problem is None:
        return summary
    return (f"{summary}; left out by --per-problem {per_problem}: {written.left_out_measurements} measurements of "
            f"slower kernels ({written.left_out_energy_windows} energy windows) and {written.left_out_failures} "
            "failures")
