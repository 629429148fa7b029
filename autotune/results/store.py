"""The results database: measurements and failures of GEMM kernels, per machine.

Any number of processes may open one database and write to it at once (see
README, "Where results live"): the schema is migrated under a lock
(:mod:`autotune.results.schema`), every write is one transaction retried with backoff
until it succeeds or fails with one line (:mod:`autotune.results.retry`), and every
measurement, failure and energy window has a unique fingerprint
(:mod:`autotune.results.fingerprint`), so a result written twice is stored once.

A store opened read-only (``read_only=True``: the commands that only read) never
writes: no migration, no table created, no file created; a database that does not
exist yet, or holds none of autotune's tables, reads as empty. Every row read is
checked (:mod:`autotune.results.rows`): a value autotune never writes stops the
read with one line naming the table, the row id and the field.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import os
import statistics
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

from sqlalchemy import Engine, Select, create_engine, func, or_, select
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import NoSuchModuleError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

from autotune import records
from autotune.errors import DatabaseError
from autotune.problem import GemmProblem
from autotune.progress import ProgressCallback, no_progress
from autotune.results import bulk, retry, rows, schema
from autotune.results import engine as engines
from autotune.results.entries import Added, EnergyEntry, Export, FailureEntry, KernelRef, MeasurementEntry
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
from autotune.results.urls import database_url, shown_url
from autotune.space.family import Config

MIGRATIONS = schema.MIGRATIONS
RETIMED = "retime"  # the study label of measurements taken again, in rounds beside cuBLAS (`autotune retime`)
# The study label of the same rounds timed back to back (no L2 flush, several launches between one pair of
# events, as a model runs its GEMMs): they only judge the flushed rounds (:meth:`ResultStore.retimed`), and
# no other reading sees them, since a small problem's operands stay in L2 between such launches.
RETIMED_BACK_TO_BACK = "retime-back-to-back"
WRITE_TIMEOUT_S = 120.0  # how long a write keeps retrying a busy database before it fails
Result = TypeVar("Result")


@dataclasses.dataclass(frozen=True)
class BestRow:
    """The best measurement of one candidate kernel for a problem on a GPU.

    ``cublas_median_ms`` is the median of the cuBLAS reference medians measured in
    the same environment for the same problem; ``ratio_to_cublas`` is that over
    ``median_ms`` (above 1 means faster than cuBLAS). Both are None without a reference.
    """

    config_name: str
    family: str
    params: dict[str, int]
    median_ms: float
    tflops: float
    cublas_median_ms: float | None
    ratio_to_cublas: float | None
    gpu_name: str
    arch: str
    driver: str
    measured_at: dt.datetime


@dataclasses.dataclass(frozen=True)
class EnergyRow:
    """One energy window joined with the time of the measurement it belongs to."""

    config_name: str  # "cublas" for the reference
    median_ms: float
    energy_per_gemm_j: float
    energy_per_gemm_counter_j: float | None
    mean_power_w: float
    idle_power_w: float | None
    sm_clock_mhz_mean: float | None
    throttled: bool
    study: str | None


def default_path() -> Path:
    """``$XDG_DATA_HOME/autotune/results.db`` (``XDG_DATA_HOME`` defaults to ``~/.local/share``):
    the default database file, whether it exists or not."""
    data_home = os.environ.get("XDG_DATA_HOME", "")
    if not os.path.isabs(data_home):  # the XDG spec says to ignore relative paths
        data_home = os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(data_home, "autotune", "results.db")


def default_url(create_directory: bool = True) -> str:
    """The database URL used when none is given.

    ``$AUTOTUNE_DB`` when that variable is set: a URL as it is (it holds ``://``),
    else a SQLite file name (:func:`~autotune.results.urls.database_url`). Without it,
    ``sqlite:///$XDG_DATA_HOME/autotune/results.db`` (``XDG_DATA_HOME`` defaults to
    ``~/.local/share``), creating the ``autotune`` directory if needed and ``create_directory``.

    Raises:
        DatabaseError: the directory cannot be created.
        InputError: ``$AUTOTUNE_DB`` starts like a URL but is not one.
    """
    path = os.environ.get("AUTOTUNE_DB")
    if path:
        return database_url(path, "$AUTOTUNE_DB")
    directory = default_path().parent
    if not create_directory:
        return "sqlite:///" + str(directory / "results.db")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatabaseError(f"cannot create database directory '{directory}': {exc.strerror or exc}") from exc
    return "sqlite:///" + str(directory / "results.db")


class ResultStore:
    """Measurements and failures in a SQLAlchemy database (SQLite by default).

    Args:
        url: a SQLAlchemy URL, e.g. ``default_url()`` or ``postgresql://host/db``.
            A SQLite file is created if missing, but not its directory.
        write_timeout_s: how long a write retries a busy database before it fails.
        read_only: only read (see the module docstring): a missing SQLite file (in a
            directory that exists) or a database without autotune's tables reads as
            empty; one of an older or newer schema is refused.

    Raises:
        DatabaseError: the database cannot be opened, read or migrated, or it is a
            database of something else. Nothing is written to a database that
            cannot be read or is not autotune's. Every message shows the URL with
            its password masked.
    """

    def __init__(self, url: str, *, write_timeout_s: float = WRITE_TIMEOUT_S, read_only: bool = False):
        self.url = url
        self.read_only = read_only
        self._write_timeout_s = write_timeout_s
        try:
            parsed = make_url(url)
        except (SQLAlchemyError, ValueError) as exc:
            raise DatabaseError(f"cannot open database '{shown_url(url)}': {_one_line(exc)}") from exc
        self._password = parsed.password
        self._shown = shown_url(parsed.render_as_string(hide_password=True))
        self._engine = self._create_engine(parsed)  # connects to nothing yet: a missing file stays missing
        if self._engine.url.drivername != parsed.drivername:  # the driver that is installed, for Optuna too
            self.url = self._engine.url.render_as_string(hide_password=False)
        if read_only and _missing_sqlite_file(parsed):
            self._engine.dispose()
            self._engine = _empty_engine()
        else:
            try:
                self._prepare_schema()
            except BaseException:
                self._engine.dispose()
                raise
        self._known_ids: dict[tuple, int] = {}  # environments, problems, kernels already committed
        self._sessions = sessionmaker(self._engine, expire_on_commit=False)
        self._write_sessions = sessionmaker(self._engine.execution_options(**engines.WRITE), expire_on_commit=False,
                                            info={rows.KNOWN_IDS: self._known_ids})

    @classmethod
    def empty(cls, url: str) -> ResultStore:
        """A read-only store with no results, shown as ``url``: what a database that does not exist yet holds."""
        return cls("sqlite://", read_only=True)._shown_as(url)

    def _shown_as(self, url: str) -> ResultStore:
        self.url, self._shown = url, shown_url(url)
        return self

    def _create_engine(self, parsed: URL) -> Engine:
        cannot = f"cannot open database '{self._shown}'"
        reason = _sqlite_file_problem(parsed, self.read_only)
        if reason is not None:
            raise DatabaseError(f"{cannot}: {reason}")
        try:
            return engines.create(parsed, min(engines.BUSY_TIMEOUT_S, self._write_timeout_s), self.read_only)
        except NoSuchModuleError as exc:
            known = "sqlite:///PATH or postgresql://user@host/db"
            raise DatabaseError(f"{cannot}: unknown dialect '{parsed.drivername}' (expected {known})") from exc
        except ImportError as exc:
            raise DatabaseError(f"{cannot}: driver not installed ({self._reason(exc)})") from exc
        except (ValueError, TypeError) as exc:  # a query parameter the dialect cannot take: ?timeout=abc
            raise DatabaseError(f"{cannot}: a URL parameter it cannot take ({self._reason(exc)})") from exc
        except SQLAlchemyError as exc:
            raise DatabaseError(f"{cannot}: {self._reason(exc)}") from exc

    def _prepare_schema(self) -> None:
        """Migrate to the newest schema (:mod:`autotune.results.schema`), retried while the database is busy;
        read-only, check it instead, and read an empty one as the empty schema."""
        cannot = f"cannot open database '{self._shown}'"
        if self.read_only:
            prepare = lambda: schema.prepare_read_only(self._engine, self._shown)  # noqa: E731
        else:
            prepare = lambda: schema.prepare(self._engine, self._shown)  # noqa: E731
        try:
            holds_results = retry.run(prepare, self._write_timeout_s)
        except retry.GaveUp as exc:
            raise DatabaseError(f"{cannot}: {self._reason(exc.__cause__)} ({exc})") from exc
        except SQLAlchemyError as exc:
            raise DatabaseError(f"{cannot}: {self._reason(exc)}") from exc
        except (ValueError, TypeError) as exc:  # a URL parameter the driver refuses only when it connects
            raise DatabaseError(f"{cannot}: a URL parameter it cannot take ({self._reason(exc)})") from exc
        except schema.UnknownRevision as exc:  # e.g. a revision from a newer autotune
            raise DatabaseError(f"cannot migrate database '{self._shown}': {self._reason(exc)}") from exc
        if self.read_only and not holds_results:
            self._engine.dispose()
            self._engine = _empty_engine()

    @property
    def shown_url(self) -> str:
        """The database URL with its password masked: the form every message shows."""
        return self._shown

    def __repr__(self) -> str:
        return f"ResultStore({self._shown!r})"

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """Close all connections; the store must not be used afterwards."""
        self._engine.dispose()

    @contextlib.contextmanager
    def _reading(self) -> Iterator[Session]:
        """:meth:`session` for the store's reads: a row that does not check out, or a stored value the driver
        cannot convert, is one line naming the database."""
        try:
            with self.session() as session:
                yield session
        except rows.BadRow as exc:
            raise DatabaseError(f"cannot read database '{self._shown}': {exc}; a row autotune did not write, "
                                "refused (not skipped): repair or delete it") from exc
        except (ValueError, TypeError, OverflowError) as exc:  # e.g. a created_at that is not a time
            raise DatabaseError(f"cannot read database '{self._shown}': a stored value cannot be read "
                                f"({self._reason(exc)})") from exc

    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        """A session that commits on success and rolls back on any error (one try, no retries).

        Raises:
            DatabaseError: the database refused a statement (one line, chained to
                the SQLAlchemy error).
        """
        with self._sessions() as session:
            try:
                yield session
                session.commit()
            except SQLAlchemyError as exc:
                session.rollback()
                raise DatabaseError(f"database error on '{self._shown}': {self._reason(exc)}") from exc

    def add_measurement(
        self,
        env: records.Environment,
        problem: GemmProblem,
        config: Config | None,
        template_hash: str | None,
        measurement: records.Measurement,
        study: str | None,
        measured_at: dt.datetime | None = None,
    ) -> int:
        """Store a verified measurement and return its id.

        The same measurement (same place, kernel, study, times and ``measured_at``)
        is stored once: storing it again returns the id it already has.

        Args:
            config: the candidate's Config, or None for the cuBLAS reference.
            template_hash: identifies the kernel template the candidate was built from.
            study: the search (Optuna study name) it belongs to, if any.
            measured_at: when it was measured, for imported results (default: now).

        Raises:
            DatabaseError: the write failed (after retries, where retrying could help).
        """
        entry = MeasurementEntry(env, problem, None if config is None else KernelRef.of(config, template_hash),
                                 measurement, study, measured_at or _now())
        return self._write(lambda session: rows.put_measurement(session, entry)[0])

    def add_failure(
        self,
        env: records.Environment,
        problem: GemmProblem,
        config: Config | None,
        template_hash: str | None,
        failure: records.Failure,
        study: str | None,
    ) -> int:
        """Store why a candidate produced no measurement and return the row id.

        Raises:
            DatabaseError: the write failed (after retries, where retrying could help).
        """
        entry = FailureEntry(env, problem, None if config is None else KernelRef.of(config, template_hash),
                             failure, study, _now())
        return self._write(lambda session: rows.put_failure(session, entry)[0])

    def add_energy(self, measurement_id: int, window: records.EnergyWindow) -> int:
        """Store an energy window for the measurement it belongs to; returns its id.

        Raises:
            DatabaseError: the write failed (for example, no such measurement).
        """
        entry = EnergyEntry(window, _now())

        def write(session: Session) -> int:
            owner = session.get(Measurement, measurement_id)
            if owner is None:
                raise DatabaseError(f"no measurement {measurement_id} in '{self._shown}'")
            return rows.put_energy(session, measurement_id, owner.fingerprint, entry)[0]

        return self._write(write)

    def add_entries(self, entries: Sequence[MeasurementEntry | FailureEntry],
                    progress: ProgressCallback = no_progress) -> list[Added]:
        """Store every entry in one transaction (all or nothing); what each one added, in order.

        An entry already stored adds nothing (``Added.row`` False), but energy
        windows it brings that are missing are added. The rows go in batches
        (:mod:`autotune.results.bulk`), which ``progress`` hears of.

        Raises:
            DatabaseError: the write failed; nothing was stored.
        """
        return self._write(lambda session: bulk.put_entries(session, entries, progress))

    def export_entries(self, gpu_key: str, per_problem: int | None = None) -> Export:
        """The results of ``gpu_key``: every measurement with its energy windows, and every failure.

        With ``per_problem``, only the ``per_problem`` fastest kernels of each
        problem (each at its best measurement, with its energy windows) and every
        cuBLAS measurement; no failures. :class:`Export` counts what was left out.
        Entries come in a fixed order (problem, then time), whatever the row ids.
        """
        measurements = (
            select(Measurement, Environment, Problem, Kernel)
            .join(Environment, Measurement.environment_id == Environment.id)
            .join(Problem, Measurement.problem_id == Problem.id)
            .outerjoin(Kernel, Measurement.kernel_id == Kernel.id)
            .where(Environment.gpu_key == gpu_key)
        )
        windows = (
            select(EnergyWindow)
            .join(Measurement, EnergyWindow.measurement_id == Measurement.id)
            .join(Environment, Measurement.environment_id == Environment.id)
            .where(Environment.gpu_key == gpu_key)
        )
        failures = (
            select(Failure, Environment, Problem, Kernel)
            .join(Environment, Failure.environment_id == Environment.id)
            .join(Problem, Failure.problem_id == Problem.id)
            .outerjoin(Kernel, Failure.kernel_id == Kernel.id)
            .where(Environment.gpu_key == gpu_key)
        )
        with self._reading() as session:
            windows_of: dict[int, list[EnergyWindow]] = {}
            for window in session.scalars(windows):
                windows_of.setdefault(window.measurement_id, []).append(window)
            for held in windows_of.values():
                held.sort(key=lambda window: (_sort_time(window.created_at), str(window.fingerprint)))
            stored = [rows.measurement_entry(*row, windows_of.get(row[0].id, []))
                      for row in session.execute(measurements)]
            failed = [rows.failure_entry(*row) for row in session.execute(failures)]
        stored.sort(key=lambda entry: (_problem_order(entry.problem), entry.measured_at,
                                       rows.measurement_fingerprint(entry)))
        failed.sort(key=lambda entry: (_problem_order(entry.problem), entry.failed_at, rows.failure_fingerprint(entry)))
        if per_problem is None:
            return Export([*stored, *failed])
        kept = _fastest_per_problem(stored, per_problem)
        return Export(kept, left_out_measurements=len(stored) - len(kept),
                      left_out_energy_windows=sum(len(entry.energy_windows) for entry in stored)
                      - sum(len(entry.energy_windows) for entry in kept),
                      left_out_failures=len(failed))

    def has_measurement(self, env: records.Environment, problem: GemmProblem, config: Config | None,
                        template_hash: str | None, median_ms: float) -> bool:
        """Whether a measurement of this kernel with this median is stored for ``env`` and ``problem``."""
        with self.session() as session:
            environment = rows.find(session, Environment, dataclasses.asdict(env))
            stored_problem = rows.find(session, Problem, rows.problem_fields(problem))
            if environment is None or stored_problem is None:
                return False
            kernel_id = None
            if config is not None:
                kernel = rows.find(session, Kernel, {"family": config.family, "name": config.name,
                                                     "template_hash": template_hash})
                if kernel is None:
                    return False
                kernel_id = kernel.id
            query = select(func.count()).select_from(Measurement).where(
                Measurement.environment_id == environment.id, Measurement.problem_id == stored_problem.id,
                Measurement.kernel_id.is_(None) if kernel_id is None else Measurement.kernel_id == kernel_id,
                Measurement.median_ms == float(median_ms))
            return session.scalar(query) > 0

    def energy(self, gpu_key: str, problem: GemmProblem) -> list[EnergyRow]:
        """Every energy window for ``problem`` on ``gpu_key`` with its measurement's time, oldest first."""
        query = (
            select(EnergyWindow, Measurement, Kernel.name)
            .join(Measurement, EnergyWindow.measurement_id == Measurement.id)
            .outerjoin(Kernel, Measurement.kernel_id == Kernel.id)
            .order_by(EnergyWindow.id)
        )
        query = _scope(query, gpu_key, problem, Measurement)
        with self._reading() as session:
            found = []
            for window, window_measurement, name in session.execute(query):
                checked = rows.energy_window(window)
                found.append(EnergyRow(
                    config_name=name or CUBLAS,
                    median_ms=rows.checked_time(Measurement.__tablename__, window_measurement.id, "median_ms",
                                                window_measurement.median_ms),
                    energy_per_gemm_j=checked.energy_per_gemm_j,
                    energy_per_gemm_counter_j=checked.energy_per_gemm_counter_j,
                    mean_power_w=checked.mean_power_w,
                    idle_power_w=checked.idle_power_w,
                    sm_clock_mhz_mean=checked.sm_clock_mhz_mean,
                    throttled=checked.throttled,
                    study=window_measurement.study,
                ))
            return found

    def best(self, gpu_key: str, problem: GemmProblem, limit: int = 10) -> list[BestRow]:
        """The fastest candidate kernels for exactly this problem on GPUs of ``gpu_key``.

        One row per kernel (its lowest median over all its measurements, in any
        environment of that GPU), fastest first, at most ``limit`` rows.

        Raises:
            DatabaseError: the query failed.
        """
        if limit < 1:
            return []
        rank = func.row_number().over(
            partition_by=Measurement.kernel_id, order_by=[Measurement.median_ms, Measurement.id]
        )
        ranked = _flushed(_scope(select(Measurement.id, rank.label("rank")), gpu_key, problem, Measurement))
        ranked = ranked.where(Measurement.implementation == CANDIDATE).subquery()
        query = (
            select(Measurement, Kernel, Environment)
            .join(ranked, ranked.c.id == Measurement.id)
            .join(Kernel, Measurement.kernel_id == Kernel.id)
            .join(Environment, Measurement.environment_id == Environment.id)
            .where(ranked.c.rank == 1)
            .order_by(Measurement.median_ms, Measurement.id)
            .limit(limit)
        )
        references = select(Measurement.id, Measurement.environment_id, Measurement.median_ms)
        references = _flushed(_scope(references, gpu_key, problem, Measurement))
        references = references.where(Measurement.implementation == CUBLAS)
        with self._reading() as session:
            result = []
            cublas: dict[int, list[float]] = {}
            for measurement_id, environment_id, median_ms in session.execute(references):
                cublas.setdefault(environment_id, []).append(
                    rows.checked_time(Measurement.__tablename__, measurement_id, "median_ms", median_ms))
            for measurement, kernel, environment in session.execute(query).all():
                reference = statistics.median(cublas[environment.id]) if environment.id in cublas else None
                family, name, _ = rows.kernel_identity(kernel)
                checked = rows.measurement_record(measurement)
                env = rows.environment_record(environment)
                result.append(
                    BestRow(
                        config_name=name,
                        family=family,
                        params=rows.kernel_params(kernel),
                        median_ms=checked.timing.median_ms,
                        tflops=checked.tflops,
                        cublas_median_ms=reference,
                        ratio_to_cublas=reference / checked.timing.median_ms if reference is not None else None,
                        gpu_name=env.gpu_name,
                        arch=env.arch,
                        driver=env.driver,
                        measured_at=rows.utc(measurement.created_at),
                    )
                )
        return result

    def retimed(self, gpu_key: str, problem: GemmProblem) -> list[BestRow]:
        """The kernels measured again at exactly this problem on GPUs of ``gpu_key`` (study :data:`RETIMED`),
        one row each, fastest first: the median of its rounds' medians, against the median of the cuBLAS
        rounds' medians (every environment of the GPU pooled). Empty where nothing was measured again.

        A search's fastest kernel is the luckiest of many measured once (each kernel's best measurement
        is its time in :meth:`best`); its rounds measured again are not chosen by their luck.

        Where the rounds were also timed back to back (:data:`RETIMED_BACK_TO_BACK`) and a kernel's ratio to
        cuBLAS is lower there, its time is its flushed median times the factor that brings its flushed ratio
        down to that one: the worse of the two ratios judges it, and never the better.

        Raises:
            DatabaseError: the query failed.
        """
        rounds, kernels = self._rounds(gpu_key, problem, RETIMED)
        warm, _ = self._rounds(gpu_key, problem, RETIMED_BACK_TO_BACK)
        result = []
        reference = statistics.median(rounds[None]) if None in rounds else None
        warm_reference = statistics.median(warm[None]) if None in warm else None
        for name, (family, params, env, measured_at) in kernels.items():
            median_ms = statistics.median(rounds[name])
            if reference is not None and warm_reference is not None and name in warm:
                flushed_ratio, warm_ratio = reference / median_ms, warm_reference / statistics.median(warm[name])
                median_ms *= max(1.0, flushed_ratio / warm_ratio)
            result.append(BestRow(
                config_name=name, family=family, params=params, median_ms=median_ms,
                tflops=problem.tflops(median_ms), cublas_median_ms=reference,
                ratio_to_cublas=reference / median_ms if reference is not None else None,
                gpu_name=env.gpu_name, arch=env.arch, driver=env.driver, measured_at=measured_at))
        return sorted(result, key=lambda row: (row.median_ms, row.config_name))

    def retimed_both_ways(self, gpu_key: str, problem: GemmProblem) -> set[str]:
        """The kernels whose rounds at exactly this problem were timed flushed (:data:`RETIMED`) and back to back
        (:data:`RETIMED_BACK_TO_BACK`), by name; empty where none were."""
        flushed, _ = self._rounds(gpu_key, problem, RETIMED)
        warm, _ = self._rounds(gpu_key, problem, RETIMED_BACK_TO_BACK)
        return {name for name in flushed if name is not None and name in warm}

    def _rounds(self, gpu_key: str, problem: GemmProblem, study: str) -> tuple[dict, dict]:
        """Each kernel's (None: cuBLAS's) rounds' medians under ``study`` at exactly ``problem``, and each
        kernel's family, params, environment and the time of its latest round."""
        query = _scope(select(Measurement, Kernel, Environment), gpu_key, problem, Measurement)
        query = query.outerjoin(Kernel, Measurement.kernel_id == Kernel.id).where(Measurement.study == study)
        rounds: dict[str | None, list[float]] = {}  # kernel name (None: cuBLAS) -> its rounds' medians
        kernels: dict[str, tuple] = {}
        with self._reading() as session:
            for measurement, kernel, environment in session.execute(query.order_by(Measurement.id)).all():
                median_ms = rows.checked_time(Measurement.__tablename__, measurement.id, "median_ms",
                                              measurement.median_ms)
                name = None if kernel is None else rows.kernel_identity(kernel)[1]
                rounds.setdefault(name, []).append(median_ms)
                if name is not None:  # the latest round's
                    kernels[name] = (rows.kernel_identity(kernel)[0], rows.kernel_params(kernel),
                                     rows.environment_record(environment), rows.utc(measurement.created_at))
        return rounds, kernels

    def gpus(self) -> list[tuple[str, str, str]]:
        """``(gpu_key, gpu_name, arch)`` of every GPU with a candidate measurement, sorted."""
        query = (
            select(Environment).distinct()
            .join(Measurement, Measurement.environment_id == Environment.id)
            .where(Measurement.implementation == CANDIDATE)
        )
        with self._reading() as session:
            found = {(env.gpu_key, env.gpu_name, env.arch)
                     for env in map(rows.environment_record, session.scalars(query))}
        return sorted(found)

    def nvrtc_versions(self) -> set[str]:
        """The NVRTC versions that built the kernels of every candidate measurement."""
        query = (
            select(Environment.nvrtc).distinct()
            .join(Measurement, Measurement.environment_id == Environment.id)
            .where(Measurement.implementation == CANDIDATE)
        )
        with self._reading() as session:
            return set(session.scalars(query))

    def problems(self, gpu_key: str, dtype: str, layout: str = "row") -> list[GemmProblem]:
        """Every problem of ``dtype`` and ``layout`` with a candidate measurement on ``gpu_key``."""
        query = (
            select(Problem).distinct()
            .join(Measurement, Measurement.problem_id == Problem.id)
            .join(Environment, Measurement.environment_id == Environment.id)
            .where(Environment.gpu_key == gpu_key, Problem.dtype == dtype, Problem.layout == layout,
                   Measurement.implementation == CANDIDATE)
        )
        with self._reading() as session:
            stored = [rows.gemm_problem(row) for row in session.scalars(query)]
        return sorted(stored, key=lambda p: (p.m * p.n * p.k, p.m, p.n, p.k, p.alpha, p.beta))

    def cublas_reference(self, gpu_key: str, problem: GemmProblem) -> float | None:
        """Median ms of the latest cuBLAS measurement of this problem on ``gpu_key``, or None.

        Raises:
            DatabaseError: the query failed.
        """
        query = _flushed(_scope(select(Measurement.id, Measurement.median_ms), gpu_key, problem, Measurement))
        query = query.where(Measurement.implementation == CUBLAS)
        query = query.order_by(Measurement.created_at.desc(), Measurement.id.desc()).limit(1)
        with self._reading() as session:
            found = session.execute(query).first()
        if found is None:
            return None
        measurement_id, median_ms = found
        return rows.checked_time(Measurement.__tablename__, measurement_id, "median_ms", median_ms)

    def failure_counts(self, gpu_key: str, problem: GemmProblem, study: str | None = None) -> dict[str, int]:
        """Failures of this problem on ``gpu_key``, per failure class.

        Counts all studies when ``study`` is None.

        Raises:
            DatabaseError: the query failed.
        """
        query = _scope(select(Failure.failure_class, func.count(Failure.id)), gpu_key, problem, Failure)
        if study is not None:
            query = query.where(Failure.study == study)
        with self.session() as session:
            return {name: count for name, count in session.execute(query.group_by(Failure.failure_class))}

    def measurement_count(self, gpu_key: str, problem: GemmProblem, study: str | None = None) -> int:
        """Measurements (candidates and cuBLAS) of this problem on ``gpu_key``.

        Counts all studies when ``study`` is None.

        Raises:
            DatabaseError: the query failed.
        """
        query = _scope(select(func.count(Measurement.id)), gpu_key, problem, Measurement)
        if study is not None:
            query = query.where(Measurement.study == study)
        with self.session() as session:
            return session.scalar(query) or 0

    def _write(self, work: Callable[[Session], Result]) -> Result:
        """Run ``work`` in one write transaction, retried while the database is busy or a key race is lost."""
        if self.read_only:
            raise DatabaseError(f"database '{self._shown}' was opened read-only")

        def transaction() -> Result:
            with self._write_sessions() as session:
                result = work(session)
                session.commit()
                self._known_ids.update(session.info.get(rows.FOUND_IDS, {}))
                return result

        try:
            return retry.run(transaction, self._write_timeout_s)
        except retry.GaveUp as exc:
            raise DatabaseError(f"database error on '{self._shown}': {self._reason(exc.__cause__)} ({exc})") from exc
        except SQLAlchemyError as exc:
            raise DatabaseError(f"database error on '{self._shown}': {self._reason(exc)}") from exc

    def _reason(self, exc: BaseException) -> str:
        """:func:`_one_line`, with the URL's password masked wherever a driver repeated it."""
        text = _one_line(exc)
        return text.replace(self._password, "***") if self._password else text


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _problem_order(problem: GemmProblem) -> tuple:
    return problem.m, problem.n, problem.k, problem.dtype, problem.layout, problem.alpha, problem.beta


def _fastest_per_problem(entries: list[MeasurementEntry], per_problem: int) -> list[MeasurementEntry]:
    """Per problem (in order): every cuBLAS entry, then the ``per_problem`` fastest kernels at their best."""
    kept: list[MeasurementEntry] = []
    by_problem: dict[GemmProblem, list[MeasurementEntry]] = {}
    for entry in entries:
        by_problem.setdefault(entry.problem, []).append(entry)
    for own in by_problem.values():
        best: dict[KernelRef, MeasurementEntry] = {}
        for entry in own:
            if entry.kernel is None:
                continue
            held = best.get(entry.kernel)
            if held is None or entry.measurement.timing.median_ms < held.measurement.timing.median_ms:
                best[entry.kernel] = entry
        fastest = sorted(best.values(), key=lambda entry: (entry.measurement.timing.median_ms,
                                                           rows.measurement_fingerprint(entry)))
        kept += [entry for entry in own if entry.kernel is None] + fastest[:per_problem]
    return kept


def _scope(query: Select, gpu_key: str, problem: GemmProblem, table: type[Measurement | Failure]) -> Select:
    """Restrict ``query`` on ``table`` to environments of ``gpu_key`` and exactly ``problem``."""
    return (
        query.join(Environment, table.environment_id == Environment.id)
        .join(Problem, table.problem_id == Problem.id)
        .where(Environment.gpu_key == gpu_key)
        .where(*(getattr(Problem, name) == value for name, value in rows.problem_fields(problem).items()))
    )


def _missing_sqlite_file(url: URL) -> bool:
    """Whether ``url`` names a SQLite file that does not exist, in a directory that does."""
    database = url.database
    if url.get_backend_name() != "sqlite" or not database or database == ":memory:" or database.startswith("file:"):
        return False
    path = Path(database)
    return path.parent.is_dir() and not path.exists()


def _empty_engine() -> Engine:
    """An in-memory database with autotune's tables and nothing in them: what a read-only store of a
    database without results reads."""
    engine = create_engine("sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False})
    Base.metadata.create_all(engine)
    return engine


def _sort_time(moment: object) -> dt.datetime:
    """A stored time to sort by; the rows' checks refuse one that is not a time."""
    return rows.utc(moment) if isinstance(moment, dt.datetime) else dt.datetime.min.replace(tzinfo=dt.timezone.utc)


def _sqlite_file_problem(url: URL, read_only: bool = False) -> str | None:
    """Why SQLite could not open the file of ``url``; it would only say "unable to open database file"."""
    database = url.database
    if url.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return None
    if database.startswith("file:"):  # a SQLite URI filename: let SQLite judge it
        return None
    path = Path(database)
    if not path.parent.is_dir():
        return f"directory '{path.parent}' does not exist"
    if path.is_dir():
        return "it is a directory: name a database file in it, e.g. results.db"
    if path.exists() and not os.access(path, os.R_OK):
        return "permission denied"
    if not path.exists() and not read_only and not os.access(path.parent, os.W_OK):
        return f"directory '{path.parent}' is not writable"
    return None


def _one_line(exc: BaseException) -> str:
    """The reason of a driver or SQLAlchemy error, as one line without SQL or links."""
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).split("(Background on this error")[0]
    return " ".join(text.split()) or type(exc).__name__


def _flushed(query: Select) -> Select:
    """``query`` without the rounds timed back to back (:data:`RETIMED_BACK_TO_BACK`)."""
    return query.where(or_(Measurement.study.is_(None), Measurement.study != RETIMED_BACK_TO_BACK))
