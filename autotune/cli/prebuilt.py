"""``python -m autotune.cli.prebuilt``: build the prebuilt tables of the shipped results into ``tuned_db/``.

The runtime's table on a GPU with shipped results (and ``autotune export --shipped``'s) is read from
``tuned_db/<scope>.table.json`` and ``tuned_db/<arch>.cubins.tar.xz`` while they are current
(:mod:`autotune.export.prebuilt`). Run this after changing ``tuned_db/*.jsonl``, a template, a search
space or the selection, and commit what it writes; ``tests/test_prebuilt.py`` fails until then.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from autotune.cli.progress import TerminalProgress
from autotune.cli.text import printable
from autotune.errors import AutotuneError, InputError

COMMAND = "python -m autotune.cli.prebuilt"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description="build the prebuilt tables of the shipped results "
                                     "(tuned_db/<scope>.table.json, <arch>.cubins.tar.xz)")
    parser.add_argument("--out", help="the folder to write into (default: this autotune's tuned_db/)")
    parser.add_argument("--jobs", type=int, help="compile processes (default: one per core, at most 16)")
    args = parser.parse_args(argv)
    try:
        if args.jobs is not None and args.jobs < 1:
            raise InputError("--jobs", args.jobs, "an integer >= 1")
        from autotune.export.prebuilt import folder, write_prebuilt

        out = Path(args.out) if args.out else folder()
        with TerminalProgress() as progress:
            written = write_prebuilt(out, progress, args.jobs)
    except AutotuneError as error:
        print(f"autotune: error: {printable(str(error))}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KB)")
    print(f"{len(written)} files written to {out}" if written else f"the prebuilt tables in {out} are current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
