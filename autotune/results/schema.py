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

A database that holds tables or views but neither autotune's nor Optuna's (on any
backend) is not a results database: it is refused and left untouched. Optuna's
tables are known by name; beside Optuna's ``version_info``, so are the
``alembic_version`` table and the ``study_``/``trial_`` tables of other Optuna
versions (without it, they are another application's). SQLite files that an autotune without transactional migrations
left half-migrated (killed during the first open: tables created, revision not
recorded) are repaired when the tables it left are empty.

Read-only opening (:func:`prepare_read_only`) never migrates: it reads what the
database holds (:func:`state`) and refuses an older or newer schema.

Alembic is imported only to migrate or stamp: opening a current database reads
its revision with one query.
"""

from __future__ import annotations

import enum
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


# Optuna's RDB storage tables (optuna.storages._rdb.models), which may share a results database.
OPTUNA_TABLES = frozenset({
    "studies", "study_directions", "study_system_attributes", "study_user_attributes", "trial_heartbeats",
    "trial_intermediate_values", "trial_params", "trial_system_attributes", "trial_user_attributes", "trial_values",
    "trials", "version_info"})
OPTUNA_MARKER, ALEMBIC_DEFAULT = "version_info", "alembic_version"
OPTUNA_PREFIXES = ("study_", "trial_")


class State(enum.Enum):
    """What a database holds, as far as autotune is concerned."""

    EMPTY = "empty"  # none of autotune's tables (Optuna's at most): a fresh database
    CURRENT = "current"  # the newest schema
    OLDER = "older"  # an older revision, or tables without a revision recorded: an upgrade is due
    NEWER = "newer"  # a revision this autotune does not know


class UnknownRevision(Exception):
    """Alembic cannot migrate the database: it records a revision this autotune does not know."""


def head_revision() -> str:
    """The newest revision of the shipped migrations."""
    return HEAD_REVISION


def known_revisions() -> frozenset[str]:
    """Every revision of the shipped migrations."""
    return frozenset(path.name.split("_")[0] for path in (MIGRATIONS / "versions").glob("[0-9][0-9][0-9][0-9]_*.py"))


def state(connection: Connection, shown: str) -> tuple[State, list[str]]:
    """What the database holds, and the revisions it records (reads only).

    Raises:
        DatabaseError: a database of something else (tables or views that are neither
            autotune's nor Optuna's, and no autotune revision).
    """
    inspector = inspect(connection)
    tables = set(inspector.get_table_names())
    if VERSION_TABLE not in tables:
        _refuse_foreign(tables | _views(connection), shown)
        return (State.OLDER if tables & set(Base.metadata.tables) else State.EMPTY), []
    recorded = _recorded(connection)
    if recorded == [HEAD_REVISION]:
        return State.CURRENT, recorded
    if len(recorded) <= 1 and set(recorded) <= known_revisions():
        return State.OLDER, recorded
    return State.NEWER, recorded


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
    if VERSION_TABLE not in tables:
        _refuse_foreign(tables | _views(connection), shown)
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
            found, _ = state(connection, shown)  # fails on a file that is not a database, writing nothing
    if found is not State.CURRENT:
        with engine.connect() as connection:
            connection = connection.execution_options(**engines.EXCLUSIVE)
            with connection.begin():
                upgrade(connection, shown)
    if engines.is_sqlite_file(engine):
        engines.use_wal(engine)


def prepare_read_only(engine: Engine, shown: str) -> bool:
    """Whether the database of ``engine`` holds autotune's newest schema (True) or nothing of autotune's
    yet (False); it is only read.

    Raises:
        DatabaseError: a database of something else, or one of an older or a newer schema.
            SQLAlchemy errors pass through.
    """
    with engine.connect() as connection:
        with connection.begin():
            found, recorded = state(connection, shown)
    if found is State.OLDER:
        revision = recorded[0] if recorded else "none recorded"
        raise DatabaseError(f"cannot read database '{shown}': it has an older autotune's schema (revision "
                            f"{revision}); a command that writes to it (autotune results import, search, sweep, "
                            "ladder) upgrades it")
    if found is State.NEWER:
        raise DatabaseError(f"cannot read database '{shown}': it has a newer autotune's schema (revision "
                            f"{', '.join(recorded) or 'none'}; this one knows up to {HEAD_REVISION}): upgrade autotune")
    return found is State.CURRENT


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


def _views(connection: Connection) -> set[str]:
    """The views (and, where the backend has them, materialized views) of the default schema."""
    inspector = inspect(connection)
    views = set(inspector.get_view_names())
    try:
        views |= set(inspector.get_materialized_view_names())
    except NotImplementedError:
        pass
    return views


def _is_optunas(name: str, names: set[str]) -> bool:
    """Whether the table ``name`` is Optuna's, in a database holding ``names``."""
    if name in OPTUNA_TABLES:
        return True
    return OPTUNA_MARKER in names and (name == ALEMBIC_DEFAULT or name.startswith(OPTUNA_PREFIXES))


def _refuse_foreign(names: set[str], shown: str) -> None:
    """Refuse a database holding tables or views (``names``) that are neither autotune's nor Optuna's."""
    foreign = sorted(name for name in names if name not in Base.metadata.tables and not _is_optunas(name, names))
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
