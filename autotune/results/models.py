"""SQLAlchemy models of the results database.

A fresh database gets these tables as they are; an existing one is changed only by
the Alembic migrations in ``migrations/versions``. Tests check that the migrations,
run one after another, give exactly these tables. Table
names avoid ``studies``, ``trials``, ``version_info`` and the ``study_``/``trial_``
prefixes because Optuna's RDB storage may share the same database.

Measurements, failures and energy windows each carry a unique ``fingerprint``
(:mod:`autotune.results.fingerprint`): the same result is one row, whoever writes it.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

VERSION_TABLE = "autotune_alembic_version"  # not alembic's default: Optuna uses that one
CANDIDATE, CUBLAS = "candidate", "cublas"  # values of measurements.implementation


def utcnow() -> dt.datetime:
    """The current time, timezone-aware, in UTC."""
    return dt.datetime.now(dt.timezone.utc)


class Base(DeclarativeBase):
    """Declarative base; constraint names are fixed so migrations can refer to them."""

    metadata = MetaData(
        naming_convention={
            "pk": "pk_%(table_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        }
    )


class Environment(Base):
    """A machine state: GPU, driver and library versions."""

    __tablename__ = "environments"
    __table_args__ = (
        UniqueConstraint(
            "gpu_key", "gpu_name", "arch", "driver", "cuda_runtime", "nvrtc", "cupy",
            name="uq_environments_identity",
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    gpu_key: Mapped[str] = mapped_column(String(64))
    gpu_name: Mapped[str] = mapped_column(String(128))
    arch: Mapped[str] = mapped_column(String(32))
    driver: Mapped[str] = mapped_column(String(64))
    cuda_runtime: Mapped[str] = mapped_column(String(32))
    nvrtc: Mapped[str] = mapped_column(String(32))
    cupy: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Problem(Base):
    """A GEMM problem, exactly as :class:`autotune.problem.GemmProblem` describes it."""

    __tablename__ = "problems"
    __table_args__ = (
        UniqueConstraint("m", "n", "k", "dtype", "layout", "alpha", "beta", name="uq_problems_identity"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    m: Mapped[int] = mapped_column(Integer)
    n: Mapped[int] = mapped_column(Integer)
    k: Mapped[int] = mapped_column(Integer)
    dtype: Mapped[str] = mapped_column(String(16))
    layout: Mapped[str] = mapped_column(String(16))
    alpha: Mapped[float] = mapped_column(Double)
    beta: Mapped[float] = mapped_column(Double)


class Kernel(Base):
    """A candidate kernel: a Config of a family, built from one template version."""

    __tablename__ = "kernels"
    __table_args__ = (UniqueConstraint("family", "name", "template_hash", name="uq_kernels_identity"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    family: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(255))
    params_json: Mapped[str] = mapped_column(Text)  # JSON object, sorted keys
    template_hash: Mapped[str | None] = mapped_column(String(64))


class Measurement(Base):
    """One verified, timed run of a candidate kernel or of the cuBLAS reference."""

    __tablename__ = "measurements"
    __table_args__ = (
        CheckConstraint(
            f"(implementation = '{CANDIDATE}' AND kernel_id IS NOT NULL)"
            f" OR (implementation = '{CUBLAS}' AND kernel_id IS NULL)",
            name="ck_measurements_implementation",
        ),
        Index("ix_measurements_environment_problem", "environment_id", "problem_id"),
        UniqueConstraint("fingerprint", name="uq_measurements_fingerprint"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    environment_id: Mapped[int] = mapped_column(ForeignKey("environments.id"))
    problem_id: Mapped[int] = mapped_column(ForeignKey("problems.id"))
    kernel_id: Mapped[int | None] = mapped_column(ForeignKey("kernels.id"))  # NULL for cuBLAS
    implementation: Mapped[str] = mapped_column(String(16))
    study: Mapped[str | None] = mapped_column(String(255))
    median_ms: Mapped[float] = mapped_column(Double)
    min_ms: Mapped[float] = mapped_column(Double)
    max_ms: Mapped[float] = mapped_column(Double)
    q25_ms: Mapped[float] = mapped_column(Double)
    q75_ms: Mapped[float] = mapped_column(Double)
    samples_json: Mapped[str] = mapped_column(Text)  # JSON list of every sample, ms
    tflops: Mapped[float] = mapped_column(Double)
    max_error: Mapped[float] = mapped_column(Double)
    sm_clock_mhz: Mapped[int | None] = mapped_column(Integer)
    throttle_reasons: Mapped[int | None] = mapped_column(BigInteger)
    temperature_c: Mapped[int | None] = mapped_column(Integer)
    registers: Mapped[int | None] = mapped_column(Integer)
    smem_static: Mapped[int | None] = mapped_column(Integer)
    smem_dynamic: Mapped[int | None] = mapped_column(Integer)
    spill_stores: Mapped[int | None] = mapped_column(Integer)
    spill_loads: Mapped[int | None] = mapped_column(Integer)
    stack_frame: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    fingerprint: Mapped[str] = mapped_column(String(64))  # autotune.results.fingerprint.measurement


class Failure(Base):
    """A candidate that produced no valid measurement, and why."""

    __tablename__ = "failures"
    __table_args__ = (
        Index("ix_failures_environment_problem", "environment_id", "problem_id"),
        UniqueConstraint("fingerprint", name="uq_failures_fingerprint"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    environment_id: Mapped[int | None] = mapped_column(ForeignKey("environments.id"))
    problem_id: Mapped[int] = mapped_column(ForeignKey("problems.id"))
    kernel_id: Mapped[int | None] = mapped_column(ForeignKey("kernels.id"))
    study: Mapped[str | None] = mapped_column(String(255))
    failure_class: Mapped[str] = mapped_column(String(32))  # a FailureClass value
    message: Mapped[str] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    fingerprint: Mapped[str] = mapped_column(String(64))  # autotune.results.fingerprint.failure


class EnergyWindow(Base):
    """Power and energy of one kernel over a window of back-to-back launches (NVML)."""

    __tablename__ = "energy_windows"
    __table_args__ = (
        Index("ix_energy_windows_measurement", "measurement_id"),
        UniqueConstraint("fingerprint", name="uq_energy_windows_fingerprint"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    measurement_id: Mapped[int] = mapped_column(ForeignKey("measurements.id"))  # the timing it belongs to
    seconds: Mapped[float] = mapped_column(Double)
    launches: Mapped[int] = mapped_column(Integer)
    samples: Mapped[int] = mapped_column(Integer)
    mean_power_w: Mapped[float] = mapped_column(Double)
    idle_power_w: Mapped[float | None] = mapped_column(Double)
    energy_per_gemm_j: Mapped[float] = mapped_column(Double)  # mean instantaneous power x time / launches
    energy_counter_j: Mapped[float | None] = mapped_column(Double)  # energy-counter delta over the window
    energy_per_gemm_counter_j: Mapped[float | None] = mapped_column(Double)
    sm_clock_mhz_mean: Mapped[float | None] = mapped_column(Double)
    sm_clock_mhz_min: Mapped[int | None] = mapped_column(Integer)
    temperature_c_max: Mapped[int | None] = mapped_column(Integer)
    throttle_reasons: Mapped[int | None] = mapped_column(BigInteger)  # OR of the reasons seen
    throttled: Mapped[bool] = mapped_column(Boolean)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    fingerprint: Mapped[str] = mapped_column(String(64))  # autotune.results.fingerprint.energy_window
