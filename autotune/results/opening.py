"""Opening the results database a command names (``--db``), its errors fit to print."""

from __future__ import annotations

from autotune.errors import DatabaseError
from autotune.results.store import ResultStore, default_path, default_url
from autotune.results.urls import database_url, without_secrets


def open_store(db: str | None, *, read_only: bool = False) -> ResultStore:
    """The result store ``--db`` names: a URL, or a SQLite file path (as ``$AUTOTUNE_DB``); by default
    :func:`autotune.results.default_url`. Its errors never show the URL's password.

    ``read_only``: for the commands that only read. Nothing is written, not even the default
    database's folder: a database that does not exist yet reads as empty.

    Raises:
        InputError: ``db`` starts like a URL but is not one.
        DatabaseError: as :class:`ResultStore`.
    """
    if db:
        url = database_url(db)
    else:
        url = default_url(create_directory=not read_only)
        if read_only and url == "sqlite:///" + str(default_path()) and not default_path().parent.is_dir():
            return ResultStore.empty(url)
    try:
        return ResultStore(url, read_only=read_only)
    except DatabaseError as error:
        raise DatabaseError(without_secrets(str(error), url)) from None
