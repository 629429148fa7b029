"""The results database: measurements and failures of GEMM kernels, per machine."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import os
import statistics
from collections.abc import Callable, Iterator
from pathlib import Path

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.util import CommandError
from sqlalchemy import Select, create_engine, func, inspect, select
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import IntegrityError, NoSuchModuleError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from autotune import records
from autotune.db.models import (
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
from autotune.errors import DatabaseError
from autotune.problem import GemmProblem
from autotune.space import Config

MIGRATIONS = Path(__file__).with_name("migrations")


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


def default_url() -> str:
    """The database URL used when none is given.

    ``sqlite:///$AUTOTUNE_DB`` when that variable is set, else
    ``sqlite:///$XDG_DATA_HOME/autotune/results.db`` (``XDG_DATA_HOME`` defaults
    to ``~/.local/share``), creating the ``autotune`` directory if needed.

    Raises:
        DatabaseError: the directory cannot be created.
    """
    path = os.environ.get("AUTOTUNE_DB")
    if path:
        return "sqlite:///" + os.path.expanduser(path)
    data_home = os.environ.get("XDG_DATA_HOME", "")
    if not os.path.isabs(data_home):  # the XDG spec says to ignore relative paths
        data_home = os.path.join(os.path.expanduser("~"), ".local", "share")
    directory = Path(data_home, "autotune")
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

    Raises:
        DatabaseError: the database cannot be opened, read or migrated. Nothing is
            written to a database that cannot be read.
    """

    def __init__(self, url: str):
        self.url = url
        try:
            parsed = make_url(url)
        except (SQLAlchemyError, ValueError) as exc:
            raise DatabaseError(f"cannot open database '{url}': {_one_line(exc)}") from exc
        self._shown = parsed.render_as_string(hide_password=True)
        cannot = f"cannot open database '{self._shown}'"
        reason = _sqlite_file_problem(parsed)
        if reason is not None:
            raise DatabaseError(f"{cannot}: {reason}")
        try:
            self._engine = create_engine(parsed)
        except NoSuchModuleError as exc:
            raise DatabaseError(f"{cannot}: unknown dialect '{parsed.drivername}'") from exc
        except ImportError as exc:
            raise DatabaseError(f"{cannot}: driver not installed ({exc})") from exc
        except SQLAlchemyError as exc:
            raise DatabaseError(f"{cannot}: {_one_line(exc)}") from exc
        try:
            with self._engine.begin() as connection:
                inspect(connection).get_table_names()  # fails on a file that is not a database
                config = AlembicConfig()
                config.set_main_option("script_location", str(MIGRATIONS).replace("%", "%%"))
                config.attributes["connection"] = connection
                command.upgrade(config, "head")
        except SQLAlchemyError as exc:
            self._engine.dispose()
            raise DatabaseError(f"{cannot}: {_one_line(exc)}") from exc
        except CommandError as exc:  # e.g. a revision from a newer autotune
            self._engine.dispose()
            raise DatabaseError(f"cannot migrate database '{self._shown}': {_one_line(exc)}") from exc
        self._sessions = sessionmaker(self._engine, expire_on_commit=False)

    @property
    def shown_url(self) -> str:
        """The URL with its password masked: the form to print."""
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
    def session(self) -> Iterator[Session]:
        """A session that commits on success and rolls back on any error.

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
                raise DatabaseError(f"database error on '{self._shown}': {_one_line(exc)}") from exc

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

        Args:
            config: the candidate's Config, or None for the cuBLAS reference.
            template_hash: identifies the kernel template the candidate was built from.
            study: the search (Optuna study name) it belongs to, if any.
            measured_at: when it was measured, for imported results (default: now).

        Raises:
            DatabaseError: the write failed.
        """
        timing, resources = measurement.timing, measurement.resources

        def build(session: Session) -> Measurement:
            return Measurement(
                environment_id=_get_or_create(session, Environment, dataclasses.asdict(env)).id,
                problem_id=_get_or_create(session, Problem, _problem_fields(problem)).id,
                kernel_id=_kernel_id(session, config, template_hash),
                implementation=CUBLAS if config is None else CANDIDATE,
                study=study,
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
                **_resource_columns(resources),
                **({"created_at": measured_at} if measured_at else {}),
            )

        return self._insert(build)

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
            DatabaseError: the write failed.
        """

        def build(session: Session) -> Failure:
            return Failure(
                environment_id=_get_or_create(session, Environment, dataclasses.asdict(env)).id,
                problem_id=_get_or_create(session, Problem, _problem_fields(problem)).id,
                kernel_id=_kernel_id(session, config, template_hash),
                study=study,
                failure_class=str(getattr(failure.failure_class, "value", failure.failure_class)),
                message=failure.message,
            )

        return self._insert(build)

    def add_energy(self, measurement_id: int, window: records.EnergyWindow) -> int:
        """Store an energy window for the measurement it belongs to; returns its id.

        Raises:
            DatabaseError: the write failed (for example, no such measurement).
        """

        def build(session: Session) -> EnergyWindow:
            if session.get(Measurement, measurement_id) is None:
                raise DatabaseError(f"no measurement {measurement_id} in '{self._shown}'")
            return EnergyWindow(
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
            )

        return self._insert(build)

    def export_rows(self, gpu_key: str, per_problem: int = 10) -> list[dict]:
        """The best ``per_problem`` kernels of each problem on ``gpu_key`` (each at its best
        measurement) and the latest cuBLAS reference, as plain dicts (see autotune.tuned).
        """
        query = (
            select(Measurement, Environment, Problem, Kernel)
            .join(Environment, Measurement.environment_id == Environment.id)
            .join(Problem, Measurement.problem_id == Problem.id)
            .outerjoin(Kernel, Measurement.kernel_id == Kernel.id)
            .where(Environment.gpu_key == gpu_key)
            .order_by(Measurement.id)
        )
        best: dict[tuple, tuple] = {}  # (problem id, kernel id or None) -> row
        with self.session() as session:
            for row in session.execute(query):
                measurement, _, problem, kernel = row
                key = (problem.id, kernel.id if kernel else None)
                held = best.get(key)
                if kernel is None or held is None or measurement.median_ms < held[0].median_ms:
                    best[key] = tuple(row)  # cuBLAS: the latest; kernels: the fastest
            rows = []
            for problem_id in sorted({key[0] for key in best}):
                kernels = sorted((row for key, row in best.items() if key[0] == problem_id and key[1] is not None),
                                 key=lambda row: row[0].median_ms)[:per_problem]
                reference = [row for key, row in best.items() if key == (problem_id, None)]
                rows += [_export_row(*row) for row in reference + kernels]
        return rows

    def has_measurement(self, env: records.Environment, problem: GemmProblem, config: Config | None,
                        template_hash: str | None, median_ms: float) -> bool:
        """Whether this exact measurement is already stored (imports stay idempotent)."""
        with self.session() as session:
            environment = _find(session, Environment, dataclasses.asdict(env))
            stored_problem = _find(session, Problem, _problem_fields(problem))
            if environment is None or stored_problem is None:
                return False
            kernel_id = None
            if config is not None:
                kernel = _find(session, Kernel, {"family": config.family, "name": config.name,
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
        with self.session() as session:
            return [
                EnergyRow(
                    config_name=name or CUBLAS,
                    median_ms=window_measurement.median_ms,
                    energy_per_gemm_j=window.energy_per_gemm_j,
                    energy_per_gemm_counter_j=window.energy_per_gemm_counter_j,
                    mean_power_w=window.mean_power_w,
                    idle_power_w=window.idle_power_w,
                    sm_clock_mhz_mean=window.sm_clock_mhz_mean,
                    throttled=window.throttled,
                    study=window_measurement.study,
                )
                for window, window_measurement, name in session.execute(query)
            ]

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
        ranked = _scope(select(Measurement.id, rank.label("rank")), gpu_key, problem, Measurement)
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
        references = select(Measurement.environment_id, Measurement.median_ms)
        references = _scope(references, gpu_key, problem, Measurement)
        references = references.where(Measurement.implementation == CUBLAS)
        with self.session() as session:
            rows = session.execute(query).all()
            cublas: dict[int, list[float]] = {}
            for environment_id, median_ms in session.execute(references):
                cublas.setdefault(environment_id, []).append(median_ms)
        result = []
        for measurement, kernel, environment in rows:
            reference = statistics.median(cublas[environment.id]) if environment.id in cublas else None
            result.append(
                BestRow(
                    config_name=kernel.name,
                    family=kernel.family,
                    params=json.loads(kernel.params_json),
                    median_ms=measurement.median_ms,
                    tflops=measurement.tflops,
                    cublas_median_ms=reference,
                    ratio_to_cublas=reference / measurement.median_ms
                    if reference is not None and measurement.median_ms > 0
                    else None,
                    gpu_name=environment.gpu_name,
                    arch=environment.arch,
                    driver=environment.driver,
                    measured_at=_utc(measurement.created_at),
                )
            )
        return result

    def gpus(self) -> list[tuple[str, str, str]]:
        """``(gpu_key, gpu_name, arch)`` of every GPU with a candidate measurement, sorted."""
        query = (
            select(Environment.gpu_key, Environment.gpu_name, Environment.arch).distinct()
            .join(Measurement, Measurement.environment_id == Environment.id)
            .where(Measurement.implementation == CANDIDATE)
        )
        with self.session() as session:
            return sorted(tuple(row) for row in session.execute(query))

    def problems(self, gpu_key: str, dtype: str) -> list[GemmProblem]:
        """Every problem of ``dtype`` with a candidate measurement on ``gpu_key``."""
        query = (
            select(Problem).distinct()
            .join(Measurement, Measurement.problem_id == Problem.id)
            .join(Environment, Measurement.environment_id == Environment.id)
            .where(Environment.gpu_key == gpu_key, Problem.dtype == dtype, Measurement.implementation == CANDIDATE)
        )
        with self.session() as session:
            rows = session.scalars(query).all()
            return sorted((GemmProblem(r.m, r.n, r.k, r.dtype, r.layout, r.alpha, r.beta) for r in rows),
                          key=lambda p: (p.m * p.n * p.k, p.m, p.n, p.k, p.alpha, p.beta))

    def cublas_reference(self, gpu_key: str, problem: GemmProblem) -> float | None:
        """Median ms of the latest cuBLAS measurement of this problem on ``gpu_key``, or None.

        Raises:
            DatabaseError: the query failed.
        """
        query = _scope(select(Measurement.median_ms), gpu_key, problem, Measurement)
        query = query.where(Measurement.implementation == CUBLAS)
        query = query.order_by(Measurement.created_at.desc(), Measurement.id.desc()).limit(1)
        with self.session() as session:
            return session.scalar(query)

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

    def _insert(self, build: Callable[[Session], Base]) -> int:
        # A concurrent writer may insert the same environment, problem or kernel
        # between our lookup and our insert; the unique constraint then fails and
        # one retry finds its row.
        for attempt in range(2):
            try:
                with self.session() as session:
                    row = build(session)
                    session.add(row)
                    session.flush()
                    return row.id
            except DatabaseError as exc:
                if attempt or not isinstance(exc.__cause__, IntegrityError):
                    raise
        raise AssertionError("unreachable")


def _find(session: Session, model: type[Base], fields: dict) -> Base | None:
    return session.scalars(select(model).filter_by(**fields).order_by(model.id).limit(1)).first()


def _get_or_create(session: Session, model: type[Base], fields: dict, extra: dict | None = None) -> Base:
    row = _find(session, model, fields)
    if row is None:
        row = model(**fields, **(extra or {}))
        session.add(row)
        session.flush()
    return row


def _kernel_id(session: Session, config: Config | None, template_hash: str | None) -> int | None:
    if config is None:
        return None
    fields = {"family": config.family, "name": config.name, "template_hash": template_hash}
    params_json = json.dumps(config.as_dict(), sort_keys=True)
    return _get_or_create(session, Kernel, fields, {"params_json": params_json}).id


def _problem_fields(problem: GemmProblem) -> dict:
    fields = dataclasses.asdict(problem)
    fields["alpha"], fields["beta"] = float(problem.alpha), float(problem.beta)
    return fields


def _scope(query: Select, gpu_key: str, problem: GemmProblem, table: type[Measurement | Failure]) -> Select:
    """Restrict ``query`` on ``table`` to environments of ``gpu_key`` and exactly ``problem``."""
    return (
        query.join(Environment, table.environment_id == Environment.id)
        .join(Problem, table.problem_id == Problem.id)
        .where(Environment.gpu_key == gpu_key)
        .where(*(getattr(Problem, name) == value for name, value in _problem_fields(problem).items()))
    )


def _sqlite_file_problem(url: URL) -> str | None:
    """Why SQLite could not open the file of ``url``; it would only say "unable to open database file"."""
    database = url.database
    if url.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return None
    if database.startswith("file:"):  # a SQLite URI filename: let SQLite judge it
        return None
    path = Path(database)
    if not path.parent.is_dir():
        return f"directory '{path.parent}' does not exist"
    if path.exists() and not os.access(path, os.R_OK):
        return "permission denied"
    if not path.exists() and not os.access(path.parent, os.W_OK):
        return f"directory '{path.parent}' is not writable"
    return None


def _one_line(exc: BaseException) -> str:
    """The reason of a driver or SQLAlchemy error, as one line without SQL or links."""
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).split("(Background on this error")[0]
    return " ".join(text.split()) or type(exc).__name__


def _resource_columns(resources: records.Resources | None) -> dict[str, int]:
    """The measurements columns named like the Resources fields; none without a ptxas report."""
    return {key: int(value) for key, value in dataclasses.asdict(resources).items()} if resources else {}


def _export_row(measurement: Measurement, environment: Environment, problem: Problem, kernel: Kernel | None) -> dict:
    return {
        "environment": {column: getattr(environment, column) for column in
                        ("gpu_key", "gpu_name", "arch", "driver", "cuda_runtime", "nvrtc", "cupy")},
        "problem": {column: getattr(problem, column) for column in ("m", "n", "k", "dtype", "layout", "alpha", "beta")},
        "family": kernel.family if kernel else None,
        "params": json.loads(kernel.params_json) if kernel else None,
        "template_hash": kernel.template_hash if kernel else None,
        "timing_ms": {"median": measurement.median_ms, "min": measurement.min_ms, "max": measurement.max_ms,
                      "q25": measurement.q25_ms, "q75": measurement.q75_ms,
                      "samples": json.loads(measurement.samples_json)},
        "tflops": measurement.tflops,
        "max_error": measurement.max_error,
        "sm_clock_mhz": measurement.sm_clock_mhz,
        "throttle_reasons": measurement.throttle_reasons,
        "temperature_c": measurement.temperature_c,
        "resources": None if measurement.registers is None else {
            column: getattr(measurement, column) for column in
            ("registers", "smem_static", "smem_dynamic", "spill_stores", "spill_loads", "stack_frame")},
        "study": measurement.study,
        "measured_at": _utc(measurement.created_at).isoformat(),
    }


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)


def _int(value: int | None) -> int | None:
    return None if value is None else int(value)


def _utc(moment: dt.datetime) -> dt.datetime:
    """SQLite drops the time zone; every stored time is UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.timezone.utc)
