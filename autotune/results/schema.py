"""Bringing a database to the newest schema, safely when many processes open it at once.

A database already at the newest revision is only read. Otherwise the upgrade
runs in one transaction that holds the database's migration lock: SQLite's
exclusive lock (``BEGIN EXCLUSIVE``; SQLite DDL is transactional), PostgreSQL's
transaction-scoped advisory lock. Whoever gets the lock first migrates; the
others then find the newest revision and do nothing. A process killed at any
moment leaves the database as it was before its transaction or fully migrated.

A fresh database (none of autotune's tables, no revision recorded) gets the
whole current schema in one step: the models' tables, stamped with the newest
revision. A database that records a revision migrates through the revisions
after it, one after another.

A SQLite file that holds tables but neither autotune's nor Optuna's is not a
results database: it is refused and left untouched. SQLite files that an
autotune without transactional migrations left half-migrated (killed during the
first open: tables created, revision not recorded) are repaired when the tables
it left are empty.

Alembic is imported only to migrate or stamp: opening a current database reads
its revision with one query.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Connection, Engine, func, inspect, select, table, text

from autotune.errors import DatabaseError
from autotune.results import engine as engines
from autotune.results.models import VERSION_TABLE, Base

MIGRATIONS = Path(__file__).with_name("migrations")
HEAD_REVISION = "0003"  # the newest revision in migrations/versions (a test checks it against Alembic's)
PG_MIGRATION_LOCK = 0x6175746F74756E65  # pg_advisory_xact_lock key: "autotune" in ASCII
# Tables an older autotune could have created without recording the revision they belong to,
# per recorded revision (its SQLite DDL was not transactional).
_HALF_MIGRATED = {
    None: ("failures", "measurements", "kernels", "problems", "environments"),
    "0001": ("energy_windows",),
}


class UnknownRevision(Exception):
    """Alembic cannot migrate the database: it records a revision this autotune does not know."""


def head_revision() -> str:
    """The newest revision of the shipped migrations."""
    return HEAD_REVISION


def is_current(connection: Connection) -> bool:
    """Whether the database records the newest revision (reads only)."""
    if not inspect(connection).has_table(VERSION_TABLE):
        return False
    return _recorded(connection) == [HEAD_REVISION]


def upgrade(connection: Connection, shown: str) -> None:
    """Migrate to the newest revision inside ``connection``'s transaction, holding the migration lock.

    The caller begins the transaction: on SQLite with ``engine.EXCLUSIVE``
    execution options (which takes the lock), and commits it.

    Raises:
        DatabaseError: a SQLite file of something else, or a half-migrated database
            whose tables hold rows.
        UnknownRevision: a revision this autotune does not know (a newer autotune's).
    """
    if connection.dialect.name == "postgresql":
        connection.execute(select(func.pg_advisory_xact_lock(PG_MIGRATION_LOCK)))
    tables = set(inspect(connection).get_table_names())
    sqlite = connection.dialect.name == "sqlite"
    if sqlite and VERSION_TABLE not in tables:
        _refuse_foreign(tables, shown)
    if sqlite:
        tables -= _repair_half_migration(connection, tables, shown)
    recorded = _recorded(connection) if VERSION_TABLE in tables else []
    if recorded == [HEAD_REVISION]:
        return  # another process migrated it while this one waited for the lock
    if not recorded and not tables & set(Base.metadata.tables):
        _create_current(connection)
    else:
        _migrate(connection)


def prepare(engine: Engine, shown: str) -> None:
    """Bring the database of ``engine`` to the newest schema (see the module docstring).

    Raises:
        DatabaseError, UnknownRevision: as :func:`upgrade`; SQLAlchemy errors pass through.
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


def _create_current(connection: Connection) -> None:
    """A fresh database: every table of the models, and the newest revision recorded."""
    from alembic.migration import MigrationContext
    from alembic.script import ScriptDirectory

    Base.metadata.create_all(connection)
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    context.stamp(ScriptDirectory(str(MIGRATIONS)), HEAD_REVISION)


def _migrate(connection: Connection) -> None:
    """Run the migrations after the recorded revision, one after another."""
    from alembic import command
    from alembic.config import Config as AlembicConfig
    from alembic.util import CommandError

    config = AlembicConfig()
    config.set_main_option("script_location", str(MIGRATIONS).replace("%", "%%"))
    config.attributes["connection"] = connection
    try:
        command.upgrade(config, "head")
    except CommandError as error:
        raise UnknownRevision(str(error)) from error


def _recorded(connection: Connection) -> list[str]:
    """The revisions the database records (one, or none before its first migration)."""
    return list(connection.scalars(text(f'SELECT version_num FROM "{VERSION_TABLE}"')))


def _is_optuna_table(name: str) -> bool:
    return name in ("studies", "trials", "version_info", "alembic_version") or name.startswith(("study_", "trial_"))


def _refuse_foreign(tables: set[str], shown: str) -> None:
    foreign = sorted(name for name in tables if name not in Base.metadata.tables and not _is_optuna_table(name))
    if foreign:
        listed = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise DatabaseError(f"cannot open database '{shown}': not an autotune results database (it holds other "
                            f"tables: {listed}); give --db a new file or an autotune database")


def _repair_half_migration(connection: Connection, tables: set[str], shown: str) -> set[str]:
    """Drop the empty tables an interrupted non-transactional migration left; the tables dropped."""
    recorded = _recorded(connection) if VERSION_TABLE in tables else []
    if len(recorded) > 1:
        return set()  # not a revision of ours: the migration refuses it
    revision = recorded[0] if recorded else None
    leftovers = [name for name in _HALF_MIGRATED.get(revision, ()) if name in tables]
    for name in leftovers:
        if connection.scalar(select(func.count()).select_from(table(name))):
            raise DatabaseError(f"cannot open database '{shown}': table {name} holds rows but the schema revision "
                                f"recorded ({revision or 'none'}) does not include it")
    for name in leftovers:  # children first: _HALF_MIGRATED lists them that way
        connection.execute(text(f'DROP TABLE "{name}"'))
    return set(leftovers)
