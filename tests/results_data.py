"""Results for database tests: a varied set to store, and a snapshot of every stored row without ids."""

from __future__ import annotations

import dataclasses
import datetime as dt

from sqlalchemy import select

from autotune.problem import GemmProblem
from autotune.records import EnergyWindow as Window
from autotune.records import Environment as Env
from autotune.records import Failure as Fail
from autotune.records import Measurement as Meas
from autotune.records import Resources, Timing
from autotune.results import ResultStore
from autotune.results.models import EnergyWindow, Environment, Failure, Kernel, Measurement, Problem
from autotune.space.family import load_space

ENV = Env("h200", "NVIDIA H200", "sm_90", "580.159.04", "13.0", "13.0", "14.2.0")
NEW_DRIVER = dataclasses.replace(ENV, driver="590.10")
PROBLEM = GemmProblem(512, 512, 512)
BETA_ONE = GemmProblem(1024, 512, 256, alpha=0.5, beta=1.0)
START = dt.datetime(2026, 11, 29, 22, 33, 2, 344523, tzinfo=dt.timezone.utc)


def measurement(ms: float, resources: Resources | None = None, **extra) -> Meas:
    timing = Timing(ms, ms * 0.9, ms * 1.2, ms * 0.95, ms * 1.05, (ms * 0.9, ms * 0.95, ms, ms * 1.05, ms * 1.2))
    return Meas(timing, PROBLEM.tflops(ms), 0.125, resources=resources, **extra)


def window(power_w: float, launches: int, throttled: bool = False) -> Window:
    return Window(seconds=1.02, launches=launches, mean_power_w=power_w, energy_counter_j=power_w * 0.98,
                  energy_per_gemm_j=power_w * 1.02 / launches, energy_per_gemm_counter_j=power_w * 0.98 / launches,
                  idle_power_w=121.5, sm_clock_mhz_mean=1975.25, sm_clock_mhz_min=1965, temperature_c_max=61,
                  throttle_reasons=4 if throttled else 0, throttled=throttled, samples=101)


def fill(store: ResultStore) -> None:
    """Candidates (with and without a ptxas report), cuBLAS measured twice, energy windows, failures."""
    space = load_space("sgemm")
    seeds = space.seeds[:3]
    resources = Resources(128, 16640, 0, 0, 0, 8)
    for index, seed in enumerate(seeds):
        first = store.add_measurement(ENV, PROBLEM, seed, space.template_hash,
                                      measurement(1.0 + index, resources, sm_clock_mhz=1980, throttle_reasons=1 << 40,
                                                  temperature_c=50), "study-a", START + dt.timedelta(seconds=index))
        store.add_measurement(ENV, PROBLEM, seed, space.template_hash, measurement(5.0 + index), "study-a",
                              START + dt.timedelta(minutes=1, seconds=index))
        if index == 0:
            store.add_energy(first, window(600.0, 1000))
            store.add_energy(first, window(650.5, 990, throttled=True))
    for minutes, ms in ((0, 0.9), (30, 0.95)):  # an older and a newer cuBLAS reference
        reference = store.add_measurement(ENV, PROBLEM, None, None, measurement(ms), "study-a",
                                          START + dt.timedelta(minutes=minutes))
    store.add_energy(reference, window(640.0, 1100))
    store.add_measurement(NEW_DRIVER, BETA_ONE, seeds[0], space.template_hash, measurement(2.5), None,
                          START + dt.timedelta(hours=1))
    store.add_failure(ENV, PROBLEM, seeds[1], space.template_hash, Fail("wrong_answer", "max error 3.5 > 1"),
                      "study-a")
    store.add_failure(ENV, PROBLEM, seeds[2], space.template_hash, Fail("timeout", "no answer in 10 s"), "study-a")
    store.add_failure(ENV, BETA_ONE, None, None, Fail("crash", "cuBLAS worker died"), None)


def snapshot(store: ResultStore) -> dict[str, list]:
    """Every stored row of every table, as sorted tuples of its values without ids (foreign keys resolved)."""
    with store.session() as session:
        environments = {row.id: _values(row, ("id", "created_at")) for row in session.scalars(select(Environment))}
        problems = {row.id: _values(row, ("id",)) for row in session.scalars(select(Problem))}
        kernels = {row.id: _values(row, ("id",)) for row in session.scalars(select(Kernel))}
        measurements = {row.id: (_values(row, ("id", "environment_id", "problem_id", "kernel_id", "created_at")),
                                 environments[row.environment_id], problems[row.problem_id],
                                 kernels.get(row.kernel_id), _utc(row.created_at))
                        for row in session.scalars(select(Measurement))}
        windows = [(_values(row, ("id", "measurement_id", "created_at")), measurements[row.measurement_id],
                    _utc(row.created_at)) for row in session.scalars(select(EnergyWindow))]
        failures = [(_values(row, ("id", "environment_id", "problem_id", "kernel_id", "created_at")),
                     environments.get(row.environment_id), problems[row.problem_id], kernels.get(row.kernel_id),
                     _utc(row.created_at)) for row in session.scalars(select(Failure))]
    return {name: sorted(rows, key=repr) for name, rows in (
        ("environments", environments.values()), ("problems", problems.values()), ("kernels", kernels.values()),
        ("measurements", measurements.values()), ("energy_windows", windows), ("failures", failures))}


def _values(row, leave_out: tuple[str, ...]) -> tuple:
    return tuple((column.name, getattr(row, column.name)) for column in row.__table__.columns
                 if column.name not in leave_out)


def _utc(moment: dt.datetime) -> dt.datetime:
    return moment.astimezone(dt.timezone.utc) if moment.tzinfo else moment.replace(tzinfo=dt.timezone.utc)
