"""Where the kernel templates, search-space files, shipped tuned results and examples live.

They sit at the top of the source tree (``templates/``, ``search_spaces/``, ``tuned_db/``,
``examples/``), linked from inside the package (``autotune/templates`` -> ``../templates``, ...),
and a wheel installs them inside the package: one source of truth, found in either place.
``tuned_db/`` holds one file per GPU, ``<gpu key>.jsonl`` (``h200.jsonl``).
"""

from __future__ import annotations

from pathlib import Path

from autotune.gpu_specs import GPUS

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """The directory ``templates``, ``search_spaces``, ``tuned_db`` or ``examples``, installed or in the source tree."""
    for candidate in (_PACKAGE / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate.resolve()  # in a source tree, the folder the link leads to
    raise FileNotFoundError(f"autotune data directory {name!r} not found next to {_PACKAGE}")


def shipped_results() -> list[Path]:
    """The tuned-results files that ship with autotune: ``tuned_db/<gpu key>.jsonl`` of each GPU that has one."""
    folder = data_dir("tuned_db")
    return [folder / f"{key}.jsonl" for key in GPUS if (folder / f"{key}.jsonl").is_file()]
