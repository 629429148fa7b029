"""SQLAlchemy engines for the results database.

SQLite runs in WAL mode (readers never wait for the writer) with a busy timeout,
and autotune emits every BEGIN itself, so that DDL is transactional and a write
transaction takes the write lock up front (``BEGIN IMMEDIATE``): two writers
then queue instead of failing with "database is locked" when one upgrades its
read lock. ``synchronous=NORMAL`` in WAL mode: a power cut may lose the last
commits, a killed process never loses a committed one and never corrupts the file.

A read-only engine cannot change the database: SQLite opens the file without
creating it (``mode=rw``, falling back to reading where the file is write-protected)
with ``PRAGMA query_only``; PostgreSQL sessions are ``READ ONLY``.
"""

from __future__ import annotations

import importlib.util
import os
import sqlite3
from urllib.parse import quote

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL

BUSY_TIMEOUT_S = 10.0  # default: how long one SQLite statement waits for a lock before "database is locked"
BEGIN_MODE = "autotune_sqlite_begin"  # execution option: DEFERRED (reads), IMMEDIATE (writes), EXCLUSIVE
WRITE = {BEGIN_MODE: "IMMEDIATE"}
EXCLUSIVE = {BEGIN_MODE: "EXCLUSIVE"}


def create(url: URL, busy_timeout_s: float = BUSY_TIMEOUT_S, read_only: bool = False) -> Engine:
    """An engine for ``url``; connections are set up as the module docstring says.

    A plain ``postgresql://`` URL uses psycopg (3) when psycopg2 is not installed.
    ``busy_timeout_s``: how long one SQLite statement waits for a lock.

    Raises:
        sqlalchemy.exc.NoSuchModuleError: unknown dialect.
        ImportError: the dialect's driver is not installed.
        ValueError, TypeError: a query parameter of the URL its dialect cannot take (``?timeout=abc``).
    """
    url = with_installed_driver(url)
    if url.get_backend_name() != "sqlite":
        engine = create_engine(url)
        if read_only and url.get_backend_name() == "postgresql":
            event.listen(engine, "connect", _postgresql_read_only)
        return engine
    if read_only:
        url = _sqlite_without_creating(url)
    engine = create_engine(url, connect_args={"timeout": busy_timeout_s})
    event.listen(engine, "connect", _sqlite_read_only if read_only else _sqlite_connect)
    event.listen(engine, "begin", _sqlite_begin)
    return engine


def with_installed_driver(url: URL) -> URL:
    """``url``, with the psycopg driver named where it says only ``postgresql`` and psycopg2 is absent."""
    if url.drivername == "postgresql" and importlib.util.find_spec("psycopg2") is None \
            and importlib.util.find_spec("psycopg") is not None:
        return url.set(drivername="postgresql+psycopg")
    return url


def is_sqlite_file(engine: Engine) -> bool:
    """Whether ``engine`` opens a SQLite database file (not ``:memory:``)."""
    database = engine.url.database
    return engine.url.get_backend_name() == "sqlite" and bool(database) and database != ":memory:" \
        and "mode=memory" not in database


def use_wal(engine: Engine) -> None:
    """Switch a SQLite file to WAL mode (persistent: every later connection reads it from the file).

    A file that cannot be switched (read-only, or locked past the busy timeout)
    stays in its mode; busy timeouts and retried writes make either mode safe.
    """
    raw = engine.raw_connection()
    try:
        cursor = raw.driver_connection.cursor()
        if cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
            return
        cursor.execute("PRAGMA journal_mode=WAL")
    except sqlite3.Error:
        return
    finally:
        raw.close()
    engine.dispose()  # connections opened before the switch set synchronous for the old mode


def sync_commits_as_wal_needs(engine: Engine) -> None:
    """Set ``synchronous=NORMAL`` on each new connection of a SQLite ``engine`` made elsewhere (Optuna's)
    when the file is in WAL mode, as :func:`create` does for its own: a commit then skips the fsync that
    ``FULL`` costs. The connections it has already opened are closed."""
    if engine.url.get_backend_name() == "sqlite":
        event.listen(engine, "connect", _sync_as_wal_needs)
        engine.dispose()


def _sqlite_without_creating(url: URL) -> URL:
    """A SQLite file URL as a URI filename that opens the file only where it exists (``mode=rw``)."""
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return url  # memory holds nothing to protect; a URI filename says its own mode
    return url.set(database="file:" + quote(os.path.abspath(database)),
                   query={**url.query, "mode": "rw", "uri": "true"})


def _sqlite_read_only(dbapi_connection, connection_record) -> None:
    _sqlite_connect(dbapi_connection, connection_record)
    dbapi_connection.execute("PRAGMA query_only = ON")


def _postgresql_read_only(dbapi_connection, connection_record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
    cursor.close()
    dbapi_connection.commit()  # a SET in a transaction rolled back would be undone


def _sqlite_connect(dbapi_connection, connection_record) -> None:
    dbapi_connection.isolation_level = None  # the "begin" listener emits BEGIN, for DDL and SELECT too
    _sync_as_wal_needs(dbapi_connection, connection_record)


def _sync_as_wal_needs(dbapi_connection, connection_record) -> None:
    cursor = dbapi_connection.cursor()
    if cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
        cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _sqlite_begin(connection) -> None:
    mode = connection.get_execution_options().get(BEGIN_MODE, "DEFERRED")
    connection.exec_driver_sql(f"BEGIN {mode}")
