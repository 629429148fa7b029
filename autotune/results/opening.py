"""Opening the results database a command names (``--db``), its errors fit to print."""

from __future__ import annotations

from autotune.errors import DatabaseError
from autotune.results.store import ResultStore, default_url
from autotune.results.urls import without_secrets


def open_store(url: str | None) -> ResultStore:
    """The result store at ``url`` (by default :func:`autotune.results.default_url`); its errors never
    show the URL's password."""
    url = url or default_url()
    try:
        return ResultStore(url)
    except DatabaseError as error:
        raise DatabaseError(without_secrets(str(error), url)) from None
