"""Entries to rows and back, inside a session: find by fingerprint, else insert.

Environments, problems and kernels are found or created by their unique keys;
measurements, failures and energy windows by their fingerprints, so writing an
entry twice stores it once.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from autotune import records
from autotune.problem import GemmProblem
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
    measurement, timing = entry.measurement, entry.measurement.timing
    return _insert(session, Measurement, dict(
        environment_id=get_or_create(session, Environment, dataclasses.asdict(entry.environment)),
        problem_id=get_or_create(session, Problem, problem_fields(entry.problem)),
        kernel_id=kernel_id(session, entry.kernel),
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
        **({name: int(getattr(measurement.resources, name)) for name in RESOURCE_COLUMNS}
           if measurement.resources else {}),
        created_at=utc(entry.measured_at),
        fingerprint=key,
    )), True


def put_energy(session: Session, measurement_id: int, measurement_key: str, entry: EnergyEntry) -> tuple[int, bool]:
    """The id of the energy window ``entry`` describes, and whether it was added now."""
    key = energy_fingerprint(measurement_key, entry)
    found = session.scalar(select(EnergyWindow.id).where(EnergyWindow.fingerprint == key))
    if found is not None:
        return found, False
    window = entry.window
    return _insert(session, EnergyWindow, dict(
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
    )), True


def put_failure(session: Session, entry: FailureEntry) -> tuple[int, bool]:
    """The id of the failure ``entry`` describes, and whether it was added now."""
    key = failure_fingerprint(entry)
    found = session.scalar(select(Failure.id).where(Failure.fingerprint == key))
    if found is not None:
        return found, False
    return _insert(session, Failure, dict(
        environment_id=get_or_create(session, Environment, dataclasses.asdict(entry.environment)),
        problem_id=get_or_create(session, Problem, problem_fields(entry.problem)),
        kernel_id=kernel_id(session, entry.kernel),
        study=entry.study,
        failure_class=failure_class(entry.failure),
        message=entry.failure.message,
        created_at=utc(entry.failed_at),
        fingerprint=key,
    )), True


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
    """The entry of a stored measurement and its energy windows."""
    resources = None
    if row.registers is not None:
        resources = records.Resources(**{name: getattr(row, name) for name in RESOURCE_COLUMNS})
    timing = records.Timing(row.median_ms, row.min_ms, row.max_ms, row.q25_ms, row.q75_ms,
                            tuple(json.loads(row.samples_json)))
    measurement = records.Measurement(timing, row.tflops, row.max_error, row.sm_clock_mhz, row.throttle_reasons,
                                      row.temperature_c, resources)
    return MeasurementEntry(
        environment_record(environment), gemm_problem(problem), kernel_ref(kernel), measurement, row.study,
        utc(row.created_at), tuple(EnergyEntry(energy_window(window), utc(window.created_at)) for window in windows))


def failure_entry(row: Failure, environment: Environment, problem: Problem, kernel: Kernel | None) -> FailureEntry:
    """The entry of a stored failure (of a known environment)."""
    return FailureEntry(environment_record(environment), gemm_problem(problem), kernel_ref(kernel),
                        records.Failure(row.failure_class, row.message), row.study, utc(row.created_at))


def environment_record(row: Environment) -> records.Environment:
    return records.Environment(**{field.name: getattr(row, field.name)
                                  for field in dataclasses.fields(records.Environment)})


def gemm_problem(row: Problem) -> GemmProblem:
    return GemmProblem(row.m, row.n, row.k, row.dtype, row.layout, row.alpha, row.beta)


def kernel_ref(row: Kernel | None) -> KernelRef | None:
    if row is None:
        return None
    return KernelRef(row.family, row.name, tuple(sorted(json.loads(row.params_json).items())), row.template_hash)


def energy_window(row: EnergyWindow) -> records.EnergyWindow:
    return records.EnergyWindow(
        seconds=row.seconds, launches=row.launches, mean_power_w=row.mean_power_w,
        energy_counter_j=row.energy_counter_j, energy_per_gemm_j=row.energy_per_gemm_j,
        energy_per_gemm_counter_j=row.energy_per_gemm_counter_j, idle_power_w=row.idle_power_w,
        sm_clock_mhz_mean=row.sm_clock_mhz_mean, sm_clock_mhz_min=row.sm_clock_mhz_min,
        temperature_c_max=row.temperature_c_max, throttle_reasons=row.throttle_reasons, throttled=row.throttled,
        samples=row.samples)


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)


def _int(value: int | None) -> int | None:
    return None if value is None else int(value)
