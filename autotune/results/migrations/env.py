"""Alembic environment for the autotune results database.

:class:`autotune.results.ResultStore` runs migrations programmatically and passes an
open connection in ``config.attributes["connection"]``. Without one (the
``alembic`` command line, e.g. ``alembic revision``), ``sqlalchemy.url`` from the
Alembic config is used (``--sql`` prints the SQL instead).
"""

from alembic import context
from sqlalchemy import create_engine

from autotune.results.models import VERSION_TABLE, Base


def _include_name(name, type_, parent_names):
    # Optuna's tables may share the database: autogenerate must never touch them.
    return type_ != "table" or name in Base.metadata.tables


def _run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        version_table=VERSION_TABLE,
        render_as_batch=connection.dialect.name == "sqlite",
        include_name=_include_name,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if connection is not None:
    _run(connection)
elif context.is_offline_mode():  # alembic upgrade --sql: print the SQL, touch nothing
    context.configure(
        url=context.config.get_main_option("sqlalchemy.url"),
        target_metadata=Base.metadata,
        version_table=VERSION_TABLE,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()
else:
    engine = create_engine(context.config.get_main_option("sqlalchemy.url"))
    with engine.begin() as connection:
        _run(connection)
    engine.dispose()
