"""The results database: every measurement and failure, per machine and problem.

Schema changes go through the Alembic migrations in ``migrations/versions``;
opening a :class:`ResultStore` upgrades the database to the newest revision,
under a lock, so any number of processes may open a database at once. A fresh
database gets the newest schema in one step (:mod:`autotune.db.schema`).
"""

from autotune.db.entries import Added, EnergyEntry, Export, FailureEntry, KernelRef, MeasurementEntry
from autotune.db.store import BestRow, EnergyRow, ResultStore, default_url

__all__ = [
    "Added", "BestRow", "EnergyEntry", "EnergyRow", "Export", "FailureEntry", "KernelRef", "MeasurementEntry",
    "ResultStore", "default_url",
]
