"""Bringing a database to the newest schema, safely when many processes open it at once.

A database already at the newest revision is only read. Otherwise the upgrade
runs in one transaction that holds the database's migration lock: SQLite's
exclusive lock (``BEGIN EXCLUSIVE``; SQLite DDL is transactional), PostgreSQL's
transaction-scoped advisory lock. Whoever gets the lock first migrates; the
others then find the newest revision and do nothing. A process killed at any
moment leaves the database as it was before its transaction or fully migrated.

A SQLite file that holds tables but neither autotune's nor Optuna's is not a
results database: it is refused and left untouched. SQLite files that an
autotune without transactional migrations left half-migrated (killed during the
first open: tables created, revision not recorded) are repaired when the tables
it left are empty.
"""

from __future__ import annotations

import functools
from pathlib import Path

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, func, inspect, select, table, text

from autotune.db import engine as engines
from autotune.db.models import VERSION_TABLE, Base
from autotune.errors import DatabaseError

MIGRATIONS = Path(__file__).with_name("migrations")
PG_MIGRATION_LOCK = 0x6175746F74756E65  # pg_advisory_xact_lock key: "autotune" in ASCII
# Tables an older autotune could have created without recording the revision they belong to,
# per recorded revision (its SQLite DDL was not transactional).
_HALF_MIGRATED = {
    None: ("failures", "measurements", "kernels", "problems", "environments"),
    "0001": ("energy_windows",),
}


@functools.cache
def head_revision() -> str:
    """The newest revision of the shipped migrations."""
    return ScriptDirectory(str(MIGRATIONS)).get_current_head()


def is_current(connection: Connection) -> bool:
    """Whether the database records the newest revision (reads only)."""
    if not inspect(connection).has_table(VERSION_TABLE):
        return False
    return _revision(connection) == head_revision()


def upgrade(connection: Connection, shown: str) -> None:
    """Migrate to the newest revision inside ``connection``'s transaction, holding the migration lock.

    The caller begins the transaction: on SQLite with ``engine.EXCLUSIVE``
    execution options (which takes the lock), and commits it.

    Raises:
        DatabaseError: a SQLite file of something else, a half-migrated database
            whose tables hold rows, or a revision this autotune does not know.
    """
    if connection.dialect.name == "postgresql":
        connection.execute(select(func.pg_advisory_xact_lock(PG_MIGRATION_LOCK)))
    tables = set(inspect(connection).get_table_names())
    sqlite = connection.dialect.name == "sqlite"
    if sqlite and VERSION_TABLE not in tables:
        _refuse_foreign(tables, shown)
    if sqlite:
        _repair_half_migration(connection, tables, shown)
    config = AlembicConfig()
    config.set_main_option("script_location", str(MIGRATIONS).replace("%", "%%"))
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


def prepare(engine: Engine, shown: str) -> None:
    """Bring the database of ``engine`` to the newest schema (see the module docstring).

    Raises:
        DatabaseError: as :func:`upgrade`; SQLAlchemy errors pass through.
    """
    with engine.connect() as connection:
        with connection.begin():
            current = is_current(connection)  # fails on a file that is not a database, writing nothing
    if not current:
        with engine.connect() as connection:
            connection = connection.execution_options(**engines.EXCLUSIVE)
            with connection.begin():
                upgrade(connection, shown)
    if engines.is_sqlite_file(engine):
        engines.use_wal(engine)


def _revision(connection: Connection) -> str | None:
    return MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE}).get_current_revision()


def _is_optuna_table(name: str) -> bool:
    return name in ("studies", "trials", "version_info", "alembic_version") or name.startswith(("study_", "trial_"))


def _refuse_foreign(tables: set[str], shown: str) -> None:
    foreign = sorted(name for name in tables if name not in Base.metadata.tables and not _is_optuna_table(name))
    if foreign:
        listed = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise DatabaseError(f"cannot open database '{shown}': not an autotune results database (it holds other "
                            f"tables: {listed}); give --db a new file or an autotune database")


def _repair_half_migration(connection: Connection, tables: set[str], shown: str) -> None:
    revision = _revision(connection) if VERSION_TABLE in tables else None
    leftovers = [name for name in _HALF_MIGRATED.get(revision, ()) if name in tables]
    for name in leftovers:
        if connection.scalar(select(func.count()).select_from(table(name))):
            raise DatabaseError(f"cannot open database '{shown}': table {name} holds rows but the schema revision "
                                f"recorded ({revision or 'none'}) does not include it")
    for name in leftovers:  # children first: _HALF_MIGRATED lists them that way
        connection.execute(text(f'DROP TABLE "{name}"'))
