"""Retrying a transaction that lost a race: lock contention, a unique-key race, a dropped connection.

Every write of :class:`autotune.results.ResultStore` is one transaction that looks up
what it would add by its unique key first, so running it again after any of
these errors is safe: it adds what is missing and finds what is there.
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError

Result = TypeVar("Result")

# SQLite primary result codes (the low byte of an extended code).
_SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_CONSTRAINT = 5, 6, 19
_SQLITE_UNIQUE_NAMES = ("SQLITE_CONSTRAINT_UNIQUE", "SQLITE_CONSTRAINT_PRIMARYKEY")
# PostgreSQL SQLSTATEs: serialization failure, deadlock, lock not available, unique violation.
_PG_CONTENTION = ("40001", "40P01", "55P03")
_PG_UNIQUE = "23505"
MAX_KEY_RACES = 8  # a unique-key race is won by someone at once; more in a row is a real conflict


class GaveUp(Exception):
    """Retries ran out; ``attempts`` and ``seconds`` say how far they went, ``__cause__`` why."""

    def __init__(self, attempts: int, seconds: float):
        self.attempts, self.seconds = attempts, seconds
        super().__init__(f"gave up after {attempts} attempts in {seconds:.1f} s")


def run(transaction: Callable[[], Result], timeout_s: float) -> Result:
    """Run ``transaction`` until it succeeds, retrying transient errors with jittered exponential backoff.

    Raises:
        SQLAlchemyError: a permanent error (for example a CHECK constraint), at once.
        GaveUp: transient errors for ``timeout_s`` seconds, or a unique-key race
            that kept coming back; chained to the last error.
    """
    start = time.monotonic()
    attempts = key_races = 0
    while True:
        attempts += 1
        try:
            return transaction()
        except SQLAlchemyError as error:
            kind = transient(error)
            if kind is None:
                raise
            key_races += kind == "key race"
            elapsed = time.monotonic() - start
            if elapsed >= timeout_s or key_races >= MAX_KEY_RACES:
                raise GaveUp(attempts, elapsed) from error
            time.sleep(min(backoff_s(attempts), max(0.0, timeout_s - elapsed)))


def backoff_s(attempt: int) -> float:
    """Sleep before retry ``attempt`` (1-based): 2 ms doubling up to 0.5 s, times 0.5-1.5 at random."""
    return min(0.5, 0.002 * 2 ** min(attempt - 1, 16)) * random.uniform(0.5, 1.5)


def transient(error: SQLAlchemyError) -> str | None:
    """``"contention"``, ``"key race"`` or ``"connection"`` when running again may succeed; else None."""
    if isinstance(error, DBAPIError) and error.connection_invalidated:
        return "connection"
    orig = getattr(error, "orig", None)
    if isinstance(orig, sqlite3.Error):
        code = getattr(orig, "sqlite_errorcode", None)
        if code is not None and code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED):
            return "contention"
        if code is None and "database is locked" in str(orig):
            return "contention"
        if isinstance(error, IntegrityError) and getattr(orig, "sqlite_errorname", "") in _SQLITE_UNIQUE_NAMES:
            return "key race"
        return None
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if state in _PG_CONTENTION:
        return "contention"
    if state == _PG_UNIQUE:
        return "key race"
    return None
