"""Database URLs fit to print: every password masked, whichever way the URL carries it."""

from __future__ import annotations

import re

_PASSWORD_IN_AUTHORITY = re.compile(r"(://[^/?#@:\s]*:)[^@/\s]*@")
_SECRET_IN_QUERY = re.compile(r"([?&][^=&#\s]*(?:password|passwd|pwd|secret|token)[^=&#\s]*=)[^&#\s]*", re.IGNORECASE)


def shown_url(url: str) -> str:
    """``url`` fit to print: any password (``user:PASSWORD@host``, or a query parameter named like
    one) replaced by ``***``. Works on text that does not parse as a URL too."""
    text = _PASSWORD_IN_AUTHORITY.sub(r"\1***@", str(url))
    return _SECRET_IN_QUERY.sub(r"\1***", text)


def without_secrets(text: str, url: str) -> str:
    """``text`` (an error message, say) with ``url`` shown masked, and any password of ``url`` that
    still shows in it (a driver may repeat it, decoded) replaced by ``***``."""
    text = shown_url(text.replace(url, shown_url(url)))
    for secret in _secrets(url):
        text = text.replace(secret, "***")
    return text


def _secrets(url: str) -> list[str]:
    from urllib.parse import unquote

    found = [m.group(0)[len(m.group(1)):-1] for m in _PASSWORD_IN_AUTHORITY.finditer(url)]
    found += [m.group(0)[len(m.group(1)):] for m in _SECRET_IN_QUERY.finditer(url)]
    return [s for secret in found if secret for s in {secret, unquote(secret)} if len(s) >= 3]
