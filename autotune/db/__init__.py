"""The results database: every measurement and failure, per machine and problem.

Schema changes go through the Alembic migrations in ``migrations/versions``;
opening a :class:`ResultStore` upgrades the database to the newest revision.
"""

from autotune.db.store import BestRow, EnergyRow, ResultStore, default_url

__all__ = ["BestRow", "EnergyRow", "ResultStore", "default_url"]
