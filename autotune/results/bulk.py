"""Many entries stored in one transaction, a few statements per batch of rows: what an import does.

:func:`put_entries` stores what :func:`~autotune.results.rows.put_measurement`,
:func:`~autotune.results.rows.put_failure` and :func:`~autotune.results.rows.put_energy` store one
at a time, with the same guarantees: a result whose fingerprint is stored already, or that comes
twice, is stored once; environments, problems and kernels are found by their unique keys, else
inserted. Instead of a lookup and an insert per row, it looks up :data:`BATCH` fingerprints (or
keys) with one query and inserts what is missing with one multi-row INSERT.

It runs inside the caller's write transaction. On SQLite that transaction holds the write lock
from its start (:mod:`autotune.results.engine`), so nothing changes between a lookup and the
insert that follows it; on a server another writer may store the same result in between, and the
unique key then fails the transaction, which the store runs again (:mod:`autotune.results.retry`):
the second run finds that row.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Sequence, Set

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from autotune.progress import ProgressCallback, no_progress
from autotune.results import rows
from autotune.results.entries import Added, FailureEntry, KernelRef, MeasurementEntry
from autotune.results.models import Base, EnergyWindow, Environment, Failure, Kernel, Measurement, Problem

BATCH = 500  # values in one IN (...) list, rows in one INSERT (far below the 32766 parameters SQLite takes)
WRITING = "adding results"  # what put_entries reports its progress as
# The column an identity is looked up by (then matched on all its columns): the one with the most distinct values.
_PROBE = {Environment: "gpu_key", Problem: "m", Kernel: "name"}
Entry = MeasurementEntry | FailureEntry


def put_entries(session: Session, entries: Sequence[Entry], progress: ProgressCallback = no_progress) -> list[Added]:
    """Store ``entries`` (what each one added, in order: see :meth:`autotune.results.ResultStore.add_entries`);
    ``progress`` hears of the rows inserted (``adding results``)."""
    keys = [rows.failure_fingerprint(entry) if isinstance(entry, FailureEntry) else rows.measurement_fingerprint(entry)
            for entry in entries]
    window_keys = [[rows.energy_fingerprint(key, window) for window in entry.energy_windows]
                   if isinstance(entry, MeasurementEntry) else [] for entry, key in zip(entries, keys)]
    measurements = _stored(session, Measurement, [k for e, k in zip(entries, keys) if isinstance(e, MeasurementEntry)])
    failures = _stored(session, Failure, [k for e, k in zip(entries, keys) if isinstance(e, FailureEntry)])
    windows = _stored(session, EnergyWindow, [key for own in window_keys for key in own])

    new_rows = _first_new(keys, measurements.keys() | failures.keys())  # the two kinds' fingerprints differ
    new_windows = _first_new([key for own in window_keys for key in own], windows.keys())
    written = _Written(session, progress, len(new_rows) + len(new_windows))
    identities = _Identities(session)
    identities.find([entries[index] for index in new_rows.values()])
    written.insert(Measurement, (rows.measurement_row(entries[index], key, *identities.of(entries[index]))
                                 for key, index in new_rows.items() if isinstance(entries[index], MeasurementEntry)))
    written.insert(Failure, (rows.failure_row(entries[index], key, *identities.of(entries[index]))
                             for key, index in new_rows.items() if isinstance(entries[index], FailureEntry)))
    owners = {window: key for key, own in zip(keys, window_keys) for window in own}
    measurements.update(_stored(session, Measurement, [owners[window] for window in new_windows
                                                       if owners[window] not in measurements]))
    windows_of = [window for entry in entries if isinstance(entry, MeasurementEntry) for window in entry.energy_windows]
    written.insert(EnergyWindow, (rows.energy_row(windows_of[index], key, measurements[owners[key]])
                                  for key, index in new_windows.items()))

    added, first_window = [], 0
    for index, (key, own) in enumerate(zip(keys, window_keys)):
        claimed = sum(new_windows.get(window) == first_window + offset for offset, window in enumerate(own))
        added.append(Added(new_rows.get(key) == index, claimed))
        first_window += len(own)
    written.done()
    return added


def _stored(session: Session, model: type[Base], fingerprints: Sequence[str]) -> dict[str, int]:
    """The ids of the rows of ``model`` stored with these fingerprints, by fingerprint."""
    found: dict[str, int] = {}
    wanted = list(dict.fromkeys(fingerprints))
    for start in range(0, len(wanted), BATCH):
        query = select(model.fingerprint, model.id).where(model.fingerprint.in_(wanted[start:start + BATCH]))
        found.update((key, row_id) for key, row_id in session.execute(query))
    return found


def _first_new(keys: Sequence[str], stored: Set[str]) -> dict[str, int]:
    """The keys not ``stored``, each with the position where it first comes."""
    new: dict[str, int] = {}
    for index, key in enumerate(keys):
        if key not in stored and key not in new:
            new[key] = index
    return new


class _Written:
    """Multi-row inserts, each of at most :data:`BATCH` rows, reported to ``progress`` as they go."""

    def __init__(self, session: Session, progress: ProgressCallback, total: int):
        self.session, self.progress, self.total, self.count = session, progress, total, 0
        progress(WRITING, 0, total)

    def insert(self, model: type[Base], values: Iterable[dict]) -> None:
        """Insert the rows ``values`` gives, :data:`BATCH` at a time (each made as its batch comes)."""
        values = iter(values)
        while batch := list(itertools.islice(values, BATCH)):
            self.session.connection().execute(insert(model.__table__), batch)
            self.count += len(batch)
            self.progress(WRITING, min(self.count, self.total - 1), self.total)  # the total once committed

    def done(self) -> None:
        self.progress(WRITING, self.total, self.total)


class _Identities:
    """The ids of the environments, problems and kernels of entries: found by their unique keys in batches,
    the missing ones inserted. Shares :func:`autotune.results.rows.get_or_create`'s memory of ids."""

    def __init__(self, session: Session):
        self.session = session
        self.known = session.info.get(rows.KNOWN_IDS, {})
        self.found = session.info.setdefault(rows.FOUND_IDS, {})

    def find(self, entries: Iterable[Entry]) -> None:
        """Find (or insert) the environment, problem and kernel of every entry."""
        wanted: dict[type[Base], dict[tuple, tuple[dict, dict]]] = {Environment: {}, Problem: {}, Kernel: {}}
        for entry in entries:
            for model, fields, extra in _identities(entry):
                wanted[model].setdefault(_key(model, fields), (fields, extra))
        for model, identities in wanted.items():
            missing = {key: value for key, value in identities.items() if self._id(key) is None}
            self._look_up(model, missing)
            absent = [{**fields, **extra} for key, (fields, extra) in missing.items() if self._id(key) is None]
            for start in range(0, len(absent), BATCH):
                self.session.connection().execute(insert(model.__table__), absent[start:start + BATCH])
            if absent:
                self._look_up(model, missing)

    def of(self, entry: Entry) -> tuple[int, int, int | None]:
        """(environment id, problem id, kernel id or None for cuBLAS) of an entry :meth:`find` was given."""
        found = [self._id(_key(model, fields)) for model, fields, _ in _identities(entry)]
        return found[0], found[1], found[2] if len(found) > 2 else None

    def _id(self, key: tuple) -> int | None:
        return self.known.get(key) or self.found.get(key)

    def _look_up(self, model: type[Base], identities: dict[tuple, tuple[dict, dict]]) -> None:
        """Note the ids of those of ``identities`` that are stored (the oldest row of each)."""
        if not identities:
            return
        names = list(next(iter(identities.values()))[0])
        probe = getattr(model, _PROBE[model])
        values = list(dict.fromkeys(fields[_PROBE[model]] for fields, _ in identities.values()))
        for start in range(0, len(values), BATCH):
            query = (select(model.id, *(getattr(model, name) for name in names))
                     .where(probe.in_(values[start:start + BATCH])).order_by(model.id))
            for row_id, *columns in self.session.execute(query):
                key = _key(model, dict(zip(names, columns)))
                if key in identities:
                    self.found.setdefault(key, row_id)


def _identities(entry: Entry) -> list[tuple[type[Base], dict, dict]]:
    """(model, unique-key values, other values) of the environment, the problem and (but for the cuBLAS
    reference) the kernel of ``entry``."""
    found = [(Environment, dataclasses.asdict(entry.environment), {}),
             (Problem, rows.problem_fields(entry.problem), {})]
    kernel: KernelRef | None = entry.kernel
    if kernel is not None:
        found.append((Kernel, {"family": kernel.family, "name": kernel.name, "template_hash": kernel.template_hash},
                      {"params_json": kernel.params_json}))
    return found


def _key(model: type[Base], fields: dict) -> tuple:
    """The key :func:`autotune.results.rows.get_or_create` remembers an id by."""
    return model.__tablename__, tuple(sorted(fields.items()))
