"""Stage 4, the results: every measurement and failure, per machine and problem, in a database.

Schema changes go through the Alembic migrations in ``migrations/versions``;
opening a :class:`ResultStore` upgrades the database to the newest revision,
under a lock, so any number of processes may open a database at once. A fresh
database gets the newest schema in one step (:mod:`autotune.results.schema`).
"""

from autotune.results.entries import Added, EnergyEntry, Export, FailureEntry, KernelRef, MeasurementEntry
from autotune.results.store import RETIMED, RETIMED_BACK_TO_BACK, BestRow, EnergyRow, ResultStore, default_url

__all__ = [
    "Added", "BestRow", "EnergyEntry", "EnergyRow", "Export", "FailureEntry", "KernelRef", "MeasurementEntry",
    "RETIMED", "RETIMED_BACK_TO_BACK", "ResultStore", "default_url",
]
