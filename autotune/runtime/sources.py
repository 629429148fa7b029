"""Where the runtime finds its kernel table for a GPU.

In this order: a table file the program loaded (:func:`autotune.load`, or the
``AUTOTUNE_TABLE`` environment variable); the user's results database
(``AUTOTUNE_DB``, else the default database, if it exists); the tuned results
that ship with autotune. In each, results measured on this GPU model come
first; results of another GPU of the same architecture are used when this model
has none, and the choice says so. The table of the shipped results comes
prebuilt with autotune, its kernels compiled (:mod:`autotune.export.prebuilt`);
where that one is not current, it is built from the shipped results and kept in
the disk cache (``<cache>/tables``), named after a hash of those results and of
autotune's version, so only the first process after an install builds it.
"""

from __future__ import annotations

import os
from pathlib import Path

from autotune.errors import AutotuneError
from autotune.export.prebuilt import shipped_table
from autotune.export.shipped import SOURCE, results_digest, shipped_hold_out, shipped_store
from autotune.gpu_specs import spec_for_device
from autotune.problem import DTYPES
from autotune.runtime.dispatch import TableChoice
from autotune.select.kernel_table import KernelTable, TableError, read_table

TABLE_VARIABLE = "AUTOTUNE_TABLE"


def check_arch(table: KernelTable, where: str, gpu_name: str, arch: str, device: int) -> None:
    """Refuse a table built for another architecture, naming both."""
    if table.arch != arch:
        raise TableError(f"{where} holds kernels for {table.arch} ({table.scope}); "
                         f"device {device}, {gpu_name}, is {arch}")


def choose_table(gpu_name: str, arch: str, device: int, loaded: tuple[KernelTable, str] | None = None) -> TableChoice:
    """The table for the GPU ``gpu_name`` (``arch``), and a note on where it came from."""
    spec = spec_for_device(gpu_name)
    key = spec.key if spec else None
    if loaded is None and os.environ.get(TABLE_VARIABLE):
        path = os.environ[TABLE_VARIABLE]
        loaded = (read_table(Path(path)), f"{TABLE_VARIABLE}={path}")
    if loaded is not None:
        table, where = loaded
        check_arch(table, where, gpu_name, arch, device)
        return TableChoice(table, _note(table, key, gpu_name, where))
    user = _user_store()
    if user is not None:
        with user:
            choice = _from_store(user, USER, key, gpu_name, arch)
        if choice is not None:
            return choice
    choice = _shipped_choice(key, gpu_name, arch)
    if choice is not None:
        return choice
    return TableChoice(None, f"no tuned results for {gpu_name} ({arch}) in the user's database or those shipped")


def _from_store(store, where: str, key: str | None, gpu_name: str, arch: str,
                hold_out: tuple[tuple[int, int, int], ...] = ()) -> TableChoice | None:
    from autotune.select.selection import build_table  # the database layer loads only where a table is built

    known = store.gpus()
    if key is not None and any(k == key for k, _, _ in known):
        table = build_table(store, DTYPES, gpu=key, hold_out=hold_out)
    elif any(sm == arch for _, _, sm in known):
        table = build_table(store, DTYPES, arch=arch, hold_out=hold_out)
    else:
        return None
    return TableChoice(table, _note(table, key, gpu_name, where))


def _note(table: KernelTable, key: str | None, gpu_name: str, where: str) -> str:
    measured = ", ".join(table.measured_on) or "no GPU"
    if table.gpu is not None and table.gpu == key:
        return f"tuned on {measured}, from {where}"
    return f"no results for {gpu_name} itself: using results of the same architecture ({table.arch}) measured " \
           f"on {measured}, from {where}"


USER, SHIPPED = "the results database", SOURCE
PREBUILT = f"{SHIPPED} (prebuilt)"


def _user_store():
    """The user's results database if it exists and opens, else None."""
    from autotune.results import ResultStore, default_url

    url = default_url() if os.environ.get("AUTOTUNE_DB") else _existing_default()
    if url is None:
        return None
    try:
        return ResultStore(url, read_only=True)
    except AutotuneError:
        return None  # an unreadable database is the CLI's business; the runtime falls through to shipped results


def _shipped_choice(key: str | None, gpu_name: str, arch: str) -> TableChoice | None:
    """The table of the shipped results for this GPU: the prebuilt one where it is current, else the one in
    the disk cache, else built (and cached)."""
    prebuilt = shipped_table(key, arch)
    if prebuilt is not None:
        return TableChoice(prebuilt, _note(prebuilt, key, gpu_name, PREBUILT))
    cached = shipped_table_path(key, arch)
    if cached.exists():
        try:
            table = read_table(cached)
        except AutotuneError:
            table = None  # a damaged cache file: build the table again
        else:
            return TableChoice(table, _note(table, key, gpu_name, SHIPPED))
    with shipped_store() as store:
        choice = _from_store(store, SHIPPED, key, gpu_name, arch, hold_out=shipped_hold_out())
    if choice is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(f".tmp{os.getpid()}")
        choice.table.write(partial, with_cubins=False)
        partial.replace(cached)
    return choice


def shipped_table_path(key: str | None, arch: str) -> Path:
    """Where the table of the shipped results for GPU ``key`` (or, without one, ``arch``) is cached."""
    from autotune import __version__
    from autotune.kernel.compile import cache_dir
    from autotune.select.kernel_table import SCHEMA_VERSION, SELECTION_RULE

    digest = results_digest(__version__, key, arch, SCHEMA_VERSION, SELECTION_RULE,  # a new rule: built anew
                            shipped_hold_out())[:16]
    return cache_dir() / "tables" / f"shipped-{key or arch}-{digest}.json"


def _existing_default() -> str | None:
    from autotune.results.store import default_path

    path = default_path()
    return "sqlite:///" + str(path) if path.exists() else None
