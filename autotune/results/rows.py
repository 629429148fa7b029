"""Entries to rows and back, inside a session: find by fingerprint, else insert.

Environments, problems and kernels are found or created by their unique keys;
measurements, failures and energy windows by their fingerprints, so writing an
entry twice stores it once (:mod:`autotune.results.bulk` does the same for many
entries at once).

Rows are checked as they are read: a value autotune never writes (an infinite
time, a ``params_json`` that is not an object of integers), put there by hand or
by another program, raises :class:`BadRow`, which names the table, the row id and
the field. (Results filed under a known GPU key but measured as another
architecture are the selection's to leave out: :mod:`autotune.select`.)
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
from collections.abc import Sequence
from typing import NoReturn

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from autotune import records
from autotune.errors import DatabaseError, FailureClass, InputError
from autotune.problem import DTYPES, INT32_MAX, LAYOUTS, GemmProblem
from autotune.results import fingerprint
from autotune.results.entries import EnergyEntry, FailureEntry, KernelRef, MeasurementEntry
from autotune.results.models import (
    CANDIDATE,
    CUBLAS,
    Base,
    EnergyWindow,
    Environment,
    Failure,
    Kernel,
    Measurement,
    Problem,
)

RESOURCE_COLUMNS = tuple(field.name for field in dataclasses.fields(records.Resources))
KNOWN_IDS, FOUND_IDS = "autotune_known_ids", "autotune_found_ids"  # Session.info keys, see get_or_create
INT64_MAX = 2**63 - 1
MAX_JSON_CHARS = 1 << 22  # the longest params_json or samples_json read (4 Mi characters)
TIMING_COLUMNS = ("median_ms", "min_ms", "max_ms", "q25_ms", "q75_ms")
FAILURE_CLASSES = frozenset(member.value for member in FailureClass)


class BadRow(DatabaseError):
    """A stored value autotune never writes: names the table, the row id, the field and the value."""

    def __init__(self, table: str, row_id: object, field: str, value: object, valid: str):
        self.table, self.row_id, self.field, self.value = table, row_id, field, value
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        super().__init__(f"{table} row {row_id}: invalid {field} {shown}: expected {valid}")


def utc(moment: dt.datetime) -> dt.datetime:
    """``moment`` in UTC; a naive time (SQLite drops the zone) is taken as UTC."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=dt.timezone.utc)
    return moment.astimezone(dt.timezone.utc)


def problem_fields(problem: GemmProblem) -> dict:
    """The problems-table columns of ``problem`` (scalars as floats)."""
    fields = dataclasses.asdict(problem)
    fields["alpha"], fields["beta"] = float(problem.alpha), float(problem.beta)
    return fields


def measurement_fingerprint(entry: MeasurementEntry) -> str:
    timing = entry.measurement.timing
    return fingerprint.measurement(
        dataclasses.asdict(entry.environment), problem_fields(entry.problem),
        entry.kernel.identity if entry.kernel else None, entry.study, entry.measured_at, timing.median_ms,
        timing.samples_ms)


def failure_fingerprint(entry: FailureEntry) -> str:
    return fingerprint.failure(
        dataclasses.asdict(entry.environment), problem_fields(entry.problem),
        entry.kernel.identity if entry.kernel else None, entry.study, failure_class(entry.failure),
        entry.failure.message, entry.failed_at)


def energy_fingerprint(measurement: str, entry: EnergyEntry) -> str:
    window = entry.window
    return fingerprint.energy_window(measurement, entry.measured_at, window.seconds, window.launches,
                                     window.mean_power_w, window.energy_per_gemm_j)


def failure_class(failure: records.Failure) -> str:
    return str(getattr(failure.failure_class, "value", failure.failure_class))


def put_measurement(session: Session, entry: MeasurementEntry, key: str | None = None) -> tuple[int, bool]:
    """The id of the measurement ``entry`` describes (``key``: its fingerprint, if known), and whether
    it was added now (not there before)."""
    key = key or measurement_fingerprint(entry)
    found = session.scalar(select(Measurement.id).where(Measurement.fingerprint == key))
    if found is not None:
        return found, False
    return _insert(session, Measurement, measurement_row(
        entry, key, get_or_create(session, Environment, dataclasses.asdict(entry.environment)),
        get_or_create(session, Problem, problem_fields(entry.problem)), kernel_id(session, entry.kernel))), True


def measurement_row(entry: MeasurementEntry, key: str, environment_id: int, problem_id: int,
                     kernel: int | None) -> dict:
    """The measurements-table row of ``entry`` (its fingerprint ``key``)."""
    measurement, timing = entry.measurement, entry.measurement.timing
    return dict(
        environment_id=environment_id,
        problem_id=problem_id,
        kernel_id=kernel,
        implementation=CUBLAS if entry.kernel is None else CANDIDATE,
        study=entry.study,
        median_ms=float(timing.median_ms),
        min_ms=float(timing.min_ms),
        max_ms=float(timing.max_ms),
        q25_ms=float(timing.q25_ms),
        q75_ms=float(timing.q75_ms),
        samples_json=json.dumps([float(sample) for sample in timing.samples_ms]),
        tflops=float(measurement.tflops),
        max_error=float(measurement.max_error),
        sm_clock_mhz=_int(measurement.sm_clock_mhz),
        throttle_reasons=_int(measurement.throttle_reasons),
        temperature_c=_int(measurement.temperature_c),
        **{name: int(getattr(measurement.resources, name)) if measurement.resources else None
           for name in RESOURCE_COLUMNS},  # every row the same columns: rows go in multi-row inserts
        created_at=utc(entry.measured_at),
        fingerprint=key,
    )


def put_energy(session: Session, measurement_id: int, measurement_key: str, entry: EnergyEntry) -> tuple[int, bool]:
    """The id of the energy window ``entry`` describes, and whether it was added now."""
    key = energy_fingerprint(measurement_key, entry)
    found = session.scalar(select(EnergyWindow.id).where(EnergyWindow.fingerprint == key))
    if found is not None:
        return found, False
    return _insert(session, EnergyWindow, energy_row(entry, key, measurement_id)), True


def energy_row(entry: EnergyEntry, key: str, measurement_id: int) -> dict:
    """The energy-windows-table row of ``entry`` (its fingerprint ``key``), for the measurement ``measurement_id``."""
    window = entry.window
    return dict(
        measurement_id=measurement_id,
        seconds=float(window.seconds),
        launches=int(window.launches),
        samples=int(window.samples),
        mean_power_w=float(window.mean_power_w),
        idle_power_w=_float(window.idle_power_w),
        energy_per_gemm_j=float(window.energy_per_gemm_j),
        energy_counter_j=_float(window.energy_counter_j),
        energy_per_gemm_counter_j=_float(window.energy_per_gemm_counter_j),
        sm_clock_mhz_mean=_float(window.sm_clock_mhz_mean),
        sm_clock_mhz_min=_int(window.sm_clock_mhz_min),
        temperature_c_max=_int(window.temperature_c_max),
        throttle_reasons=_int(window.throttle_reasons),
        throttled=bool(window.throttled),
        created_at=utc(entry.measured_at),
        fingerprint=key,
    )


def put_failure(session: Session, entry: FailureEntry) -> tuple[int, bool]:
    """The id of the failure ``entry`` describes, and whether it was added now."""
    key = failure_fingerprint(entry)
    found = session.scalar(select(Failure.id).where(Failure.fingerprint == key))
    if found is not None:
        return found, False
    return _insert(session, Failure, failure_row(
        entry, key, get_or_create(session, Environment, dataclasses.asdict(entry.environment)),
        get_or_create(session, Problem, problem_fields(entry.problem)), kernel_id(session, entry.kernel))), True


def failure_row(entry: FailureEntry, key: str, environment_id: int, problem_id: int, kernel: int | None) -> dict:
    """The failures-table row of ``entry`` (its fingerprint ``key``)."""
    return dict(
        environment_id=environment_id,
        problem_id=problem_id,
        kernel_id=kernel,
        study=entry.study,
        failure_class=failure_class(entry.failure),
        message=entry.failure.message,
        created_at=utc(entry.failed_at),
        fingerprint=key,
    )


def _insert(session: Session, model: type[Base], values: dict) -> int:
    """Insert one row with a Core INSERT (one cached statement; results need no ORM identity); returns its id."""
    return session.connection().execute(insert(model.__table__), values).inserted_primary_key[0]


def find(session: Session, model: type[Base], fields: dict) -> Base | None:
    """The oldest row of ``model`` with these column values, or None."""
    return session.scalars(select(model).filter_by(**fields).order_by(model.id).limit(1)).first()


def get_or_create(session: Session, model: type[Base], fields: dict, extra: dict | None = None) -> int:
    """The id of the row of ``model`` with these unique-key values, inserted (with ``extra``) if missing.

    Ids known to be committed (``session.info[KNOWN_IDS]``, filled by the store
    after each commit from ``session.info[FOUND_IDS]``) and ids found earlier in
    this transaction (``session.info[FOUND_IDS]``) skip the lookup: these rows are
    never deleted.
    """
    key = (model.__tablename__, tuple(sorted(fields.items())))
    known = session.info.get(KNOWN_IDS, {}).get(key) or session.info.get(FOUND_IDS, {}).get(key)
    if known is not None:
        return known
    row = find(session, model, fields)
    if row is None:
        row = model(**fields, **(extra or {}))
        session.add(row)
        session.flush()
    session.info.setdefault(FOUND_IDS, {})[key] = row.id
    return row.id


def kernel_id(session: Session, kernel: KernelRef | None) -> int | None:
    if kernel is None:
        return None
    fields = {"family": kernel.family, "name": kernel.name, "template_hash": kernel.template_hash}
    return get_or_create(session, Kernel, fields, {"params_json": kernel.params_json})


def measurement_entry(row: Measurement, environment: Environment, problem: Problem, kernel: Kernel | None,
                      windows: list[EnergyWindow]) -> MeasurementEntry:
    """The entry of a stored measurement and its energy windows, every value checked (:class:`BadRow`)."""
    return MeasurementEntry(
        environment_record(environment), gemm_problem(problem), kernel_ref(kernel), measurement_record(row),
        _Checked(row).text("study", optional=True), _Checked(row).time("created_at"),
        tuple(EnergyEntry(energy_window(window), _Checked(window).time("created_at")) for window in windows))


def measurement_record(row: Measurement) -> records.Measurement:
    """The measurement of a stored row, every value checked (:class:`BadRow`)."""
    checked = _Checked(row)
    if row.implementation not in (CANDIDATE, CUBLAS):
        checked.fail("implementation", f"{CANDIDATE!r} or {CUBLAS!r}")
    resources = None
    if row.registers is not None:
        resources = records.Resources(**{name: checked.integer(name, least=0) for name in RESOURCE_COLUMNS})
    times = [checked.number(name, above=0.0) for name in TIMING_COLUMNS]
    timing = records.Timing(*times, checked.samples("samples_json"))
    return records.Measurement(timing, checked.number("tflops", above=0.0), checked.number("max_error", least=0.0),
                               checked.integer("sm_clock_mhz", least=0, optional=True),
                               checked.integer("throttle_reasons", least=0, most=INT64_MAX, optional=True),
                               checked.integer("temperature_c", least=-INT32_MAX, optional=True), resources)


def failure_entry(row: Failure, environment: Environment, problem: Problem, kernel: Kernel | None) -> FailureEntry:
    """The entry of a stored failure (of a known environment), every value checked (:class:`BadRow`)."""
    checked = _Checked(row)
    if row.failure_class not in FAILURE_CLASSES:
        checked.fail("failure_class", "one of " + ", ".join(sorted(FAILURE_CLASSES)))
    return FailureEntry(environment_record(environment), gemm_problem(problem), kernel_ref(kernel),
                        records.Failure(row.failure_class, checked.text("message")),
                        checked.text("study", optional=True), checked.time("created_at"))


def environment_record(row: Environment) -> records.Environment:
    """The environment of a stored row: every field a non-empty string (:class:`BadRow` otherwise)."""
    checked = _Checked(row)
    return records.Environment(**{field.name: checked.text(field.name, empty=False)
                                  for field in dataclasses.fields(records.Environment)})


def gemm_problem(row: Problem) -> GemmProblem:
    """The problem of a stored row, checked (:class:`BadRow`)."""
    checked = _Checked(row)
    sizes = [checked.integer(axis, least=1) for axis in ("m", "n", "k")]
    for name, choices in (("dtype", DTYPES), ("layout", LAYOUTS)):
        if getattr(row, name) not in choices:
            checked.fail(name, " or ".join(choices))
    alpha, beta = checked.number("alpha"), checked.number("beta")
    try:
        return GemmProblem(*sizes, row.dtype, row.layout, alpha, beta)
    except InputError as error:
        raise BadRow(row.__tablename__, row.id, "m, n, k", tuple(sizes), error.valid) from None


def kernel_ref(row: Kernel | None) -> KernelRef | None:
    """The kernel of a stored row (None for none), checked (:class:`BadRow`)."""
    if row is None:
        return None
    family, name, template_hash = kernel_identity(row)
    return KernelRef(family, name, tuple(sorted(kernel_params(row).items())), template_hash)


def kernel_identity(row: Kernel) -> tuple[str, str, str | None]:
    """(family, name, template hash) of a stored kernel, checked (:class:`BadRow`)."""
    checked = _Checked(row)
    return checked.text("family", empty=False), checked.text("name", empty=False), \
        checked.text("template_hash", optional=True)


def kernel_params(row: Kernel) -> dict[str, int]:
    """The knob values of a stored kernel: a JSON object of integers (:class:`BadRow` otherwise)."""
    params = _Checked(row).json("params_json", dict, "a JSON object of knob names and integers")
    for knob, value in params.items():
        if isinstance(value, bool) or not isinstance(value, int) or not -INT64_MAX <= value <= INT64_MAX:
            raise BadRow(row.__tablename__, row.id, f"params_json {knob!r}", value, "an integer")
    return params


def energy_window(row: EnergyWindow) -> records.EnergyWindow:
    """The energy window of a stored row, checked (:class:`BadRow`)."""
    checked = _Checked(row)
    if not isinstance(row.throttled, bool) and row.throttled not in (0, 1):
        checked.fail("throttled", "true or false")
    return records.EnergyWindow(
        seconds=checked.number("seconds", above=0.0), launches=checked.integer("launches", least=1),
        mean_power_w=checked.number("mean_power_w", least=0.0),
        energy_counter_j=checked.number("energy_counter_j", least=0.0, optional=True),
        energy_per_gemm_j=checked.number("energy_per_gemm_j", least=0.0),
        energy_per_gemm_counter_j=checked.number("energy_per_gemm_counter_j", least=0.0, optional=True),
        idle_power_w=checked.number("idle_power_w", least=0.0, optional=True),
        sm_clock_mhz_mean=checked.number("sm_clock_mhz_mean", least=0.0, optional=True),
        sm_clock_mhz_min=checked.integer("sm_clock_mhz_min", least=0, optional=True),
        temperature_c_max=checked.integer("temperature_c_max", least=-INT32_MAX, optional=True),
        throttle_reasons=checked.integer("throttle_reasons", least=0, most=INT64_MAX, optional=True),
        throttled=bool(row.throttled), samples=checked.integer("samples", least=0))


def checked_time(table: str, row_id: object, field: str, value: object) -> float:
    """A time in ms read from a column of a row: finite and > 0 (:class:`BadRow` otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise BadRow(table, row_id, field, value, "a finite number > 0")
    return float(value)


class _Checked:
    """The checks of one stored row: each returns the value or raises :class:`BadRow` naming the row."""

    def __init__(self, row: Base):
        self.row, self.table = row, row.__tablename__

    def fail(self, field: str, valid: str) -> NoReturn:
        raise BadRow(self.table, self.row.id, field, getattr(self.row, field), valid)

    def number(self, name: str, *, above: float | None = None, least: float | None = None,
               optional: bool = False) -> float | None:
        value = getattr(self.row, name)
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or (above is not None and not value > above) or (least is not None and not value >= least):
            bounds = "".join((f" > {above:g}" if above is not None else "", f" >= {least:g}" if least is not None
                              else ""))
            self.fail(name, f"a finite number{bounds}" + (" or null" if optional else ""))
        return float(value)

    def integer(self, name: str, *, least: int, most: int = INT32_MAX, optional: bool = False) -> int | None:
        value = getattr(self.row, name)
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
            self.fail(name, f"an integer from {least} to {most}" + (" or null" if optional else ""))
        return value

    def text(self, name: str, *, optional: bool = False, empty: bool = True) -> str | None:
        value = getattr(self.row, name)
        if value is None and optional:
            return None
        if not isinstance(value, str) or (not empty and not value):
            self.fail(name, ("a non-empty string" if not empty else "a string") + (" or null" if optional else ""))
        return value

    def time(self, name: str) -> dt.datetime:
        value = getattr(self.row, name)
        if not isinstance(value, dt.datetime):
            self.fail(name, "a date and time")
        return utc(value)

    def json(self, name: str, kind: type, valid: str):
        text = getattr(self.row, name)
        if not isinstance(text, str) or len(text) > MAX_JSON_CHARS:
            self.fail(name, f"{valid}, at most {MAX_JSON_CHARS} characters")
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            self.fail(name, valid)
        if not isinstance(value, kind):
            self.fail(name, valid)
        return value

    def samples(self, name: str) -> tuple[float, ...]:
        samples: Sequence = self.json(name, list, "a JSON list of times in ms")
        if not samples:
            self.fail(name, "a non-empty JSON list of times in ms")
        return tuple(checked_time(self.table, self.row.id, f"{name}[{index}]", sample)
                     for index, sample in enumerate(samples))


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)


def _int(value: int | None) -> int | None:
    return None if value is None else int(value)
