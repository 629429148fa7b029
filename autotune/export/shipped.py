"""The tuned results that ship with autotune (``tuned_db/<gpu key>.jsonl``): their digest and a database of them.

The database is built once into the disk cache (``<cache>/shipped``, named after the results' digest and
autotune's version) and opened from there; the runtime and ``autotune export --shipped`` build tables from
it where no current prebuilt table serves (:mod:`autotune.export.prebuilt`).
"""

from __future__ import annotations

import hashlib
import json
import os

from autotune.progress import ProgressCallback, no_progress

SOURCE = "the results shipped with autotune"  # a shipped table's source, as tables and notes show it
HELD_OUT = "llm-held-out"  # the shape set that judges the shipped tables, so left out of them
IMPORTING = "importing the shipped results"  # what shipped_store reports its progress as


def results_digest(*extra) -> str:
    """A SHA-256 of the shipped results files (their names and bytes), and of ``extra`` (JSON values) first."""
    from autotune.data_files import shipped_results

    digest = hashlib.sha256(json.dumps(list(extra)).encode())
    for path in shipped_results():
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def shipped_hold_out() -> tuple[tuple[int, int, int], ...]:
    """The shapes the shipped tables are built without (those of ``HELD_OUT``): a shipped table is judged on
    them (``autotune table --hold-out llm-held-out``), so it never takes their measurements into its rules."""
    from autotune.shapes import read_shapes

    return tuple(read_shapes(HELD_OUT))


def shipped_store(progress: ProgressCallback = no_progress):
    """A database holding the tuned results that ship with autotune, built once into the disk cache
    (``<cache>/shipped``, named after a hash of those results and autotune's version) and opened from there;
    ``progress`` hears of each file imported into it (``importing the shipped results``)."""
    from autotune import __version__
    from autotune.data_files import shipped_results
    from autotune.kernel.compile import cache_dir
    from autotune.results import ResultStore
    from autotune.results import files as tuned

    path = cache_dir() / "shipped" / f"results-{results_digest(__version__)[:16]}.db"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.stem}.tmp{os.getpid()}.db")
        files = shipped_results()
        progress(IMPORTING, 0, len(files))
        with ResultStore(f"sqlite:///{partial}") as building:
            for done, results in enumerate(files, 1):
                tuned.import_file(building, results)
                progress(IMPORTING, done, len(files))
        partial.replace(path)
    return ResultStore(f"sqlite:///{path}")
