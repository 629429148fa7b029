"""Database URLs: what ``--db`` and ``$AUTOTUNE_DB`` name, and URLs fit to print (every password masked)."""

from __future__ import annotations

import os
import re

from autotune.errors import InputError

_SCHEME = r"[A-Za-z][A-Za-z0-9+.\-]*"
# ``user:PASSWORD@`` after a scheme, however the scheme is written (``scheme://``, and the mistyped ``scheme:/``,
# ``scheme:`` and ``scheme//``); the password runs to the last ``@`` of the word, so that an unencoded ``/``,
# ``?``, ``#`` or ``@`` in it is masked too.
_PASSWORD_IN_AUTHORITY = re.compile(rf"({_SCHEME}(?::/{{0,3}}|/{{2,3}})[^\s/:@]*:)\S*@")
_SECRET_IN_QUERY = re.compile(r"([?&][^=&#\s]*(?:password|passwd|pwd|secret|token)[^=&#\s]*=)[^&#\s]*", re.IGNORECASE)
_URL_WITHOUT_SLASHES = re.compile(rf"{_SCHEME}:")
_DRIVE = re.compile(r"[A-Za-z]:[\\/]")  # C:\results.db is a path


def shown_url(url: str) -> str:
    """``url`` fit to print: any password (``user:PASSWORD@host``, or a query parameter named like
    one) replaced by ``***``. Works on text that does not parse as a URL too, and on a message
    that holds a URL somewhere in it."""
    text = _PASSWORD_IN_AUTHORITY.sub(r"\1***@", str(url))
    return _SECRET_IN_QUERY.sub(r"\1***", text)


def without_secrets(text: str, url: str) -> str:
    """``text`` (an error message, say) with ``url`` shown masked, and any password of ``url`` that
    still shows in it (a driver may repeat it, decoded) replaced by ``***``."""
    text = shown_url(text.replace(url, shown_url(url)))
    for secret in _secrets(url):
        text = text.replace(secret, "***")
    return text


def database_url(value: str, what: str = "--db") -> str:
    """The SQLAlchemy URL that a ``--db`` or ``$AUTOTUNE_DB`` value names: a URL (it holds ``://``) as
    it is, anything else a SQLite file path (``~`` expanded).

    Raises:
        InputError: a value that starts like a URL but is not one (``postgresql:/host/db``), shown masked.
    """
    if "://" in value:
        return value
    if _URL_WITHOUT_SLASHES.match(value) and not _DRIVE.match(value):
        raise InputError(what, shown_url(value), "a database URL such as postgresql://user@host/db or "
                         "sqlite:///results.db, or a file path (./NAME for a file whose name holds a colon)")
    return "sqlite:///" + os.path.expanduser(value)


def _secrets(url: str) -> list[str]:
    from urllib.parse import unquote

    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    found = [m.group(0)[len(m.group(1)):-1] for m in _PASSWORD_IN_AUTHORITY.finditer(url)]
    found += [m.group(0)[len(m.group(1)):] for m in _SECRET_IN_QUERY.finditer(url)]
    try:
        found.append(make_url(url).password or "")  # one the patterns miss (a space in it, say)
    except (ArgumentError, ValueError):
        pass
    return [s for secret in found if secret for s in {secret, unquote(secret)} if len(s) >= 3]
