"""Tests of the results database (SQLite files in tmp_path; no GPU needed)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import func, inspect, select

from autotune.errors import DatabaseError, FailureClass
from autotune.problem import GemmProblem
from autotune.records import Environment as Env
from autotune.records import Failure as Fail
from autotune.records import Measurement as Meas
from autotune.records import Resources, Timing
from autotune.results import BestRow, ResultStore, default_url, schema
from autotune.results import rows as rows_module
from autotune.results import store as store_module
from autotune.results.models import VERSION_TABLE, Base, Environment, Failure, Kernel, Measurement, Problem
from autotune.space.family import Config

ROOT = Path(__file__).resolve().parents[1]
HEAD_REVISION = "0003"  # the newest migration in autotune/results/migrations/versions

ENV = Env("h200", "NVIDIA H200", "sm_90", "580.159.04", "13.0", "13.0", "14.2.0")
PROBLEM = GemmProblem(4096, 4096, 1024)


def config(bm: int, bn: int = 64) -> Config:
    return Config("sgemm", (("BM", bm), ("BN", bn)))


def measurement(median_ms: float, resources: Resources | None = None) -> Meas:
    samples = (median_ms * 0.9, median_ms, median_ms * 1.1)
    timing = Timing(median_ms, samples[0], samples[2], median_ms * 0.95, median_ms * 1.05, samples)
    return Meas(timing, tflops=PROBLEM.tflops(median_ms), max_error=0.25, resources=resources)


@pytest.fixture
def store(tmp_path):
    with ResultStore(f"sqlite:///{tmp_path / 'results.db'}") as opened:
        yield opened


def count(store: ResultStore, model) -> int:
    with store.session() as session:
        return session.scalar(select(func.count()).select_from(model))


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_measurement_round_trip(store):
    resources = Resources(
        registers=128, smem_static=16384, smem_dynamic=0, spill_stores=1, spill_loads=2, stack_frame=8
    )
    meas = dataclasses.replace(
        measurement(1.5, resources), sm_clock_mhz=1980, throttle_reasons=1 << 40, temperature_c=55
    )
    candidate_id = store.add_measurement(ENV, PROBLEM, config(128), "abc123", meas, "s1")
    cublas_id = store.add_measurement(ENV, PROBLEM, None, None, measurement(2.0), None)
    assert candidate_id != cublas_id

    with store.session() as session:
        row = session.get(Measurement, candidate_id)
        kernel = session.get(Kernel, row.kernel_id)
        env = session.get(Environment, row.environment_id)
        problem = session.get(Problem, row.problem_id)
        reference = session.get(Measurement, cublas_id)
    assert (row.implementation, row.study) == ("candidate", "s1")
    assert (row.median_ms, row.min_ms, row.max_ms) == (1.5, 1.5 * 0.9, 1.5 * 1.1)
    assert (row.q25_ms, row.q75_ms) == (1.5 * 0.95, 1.5 * 1.05)
    assert json.loads(row.samples_json) == list(meas.timing.samples_ms)
    assert (row.tflops, row.max_error) == (meas.tflops, 0.25)
    assert (row.sm_clock_mhz, row.throttle_reasons, row.temperature_c) == (1980, 1 << 40, 55)
    assert Resources(row.registers, row.smem_static, row.smem_dynamic, row.spill_stores, row.spill_loads,
                     row.stack_frame) == resources
    assert (kernel.family, kernel.name, kernel.template_hash) == ("sgemm", "sgemm_bm128_bn64", "abc123")
    assert kernel.params_json == '{"BM": 128, "BN": 64}'
    assert Env(**{f.name: getattr(env, f.name) for f in dataclasses.fields(Env)}) == ENV
    assert GemmProblem(problem.m, problem.n, problem.k, problem.dtype, problem.layout, problem.alpha,
                       problem.beta) == PROBLEM
    assert (reference.implementation, reference.kernel_id, reference.registers) == ("cublas", None, None)
    assert store.measurement_count("h200", PROBLEM) == 2
    assert store.measurement_count("h200", PROBLEM, study="s1") == 1


def test_failure_round_trip_and_counts(store):
    compile_error = Fail(FailureClass.COMPILE_ERROR, "nvrtc: bad")
    first = store.add_failure(ENV, PROBLEM, config(64), "h", compile_error, "s1")
    store.add_failure(ENV, PROBLEM, config(32), "h", Fail("compile_error", "again"), "s2")
    store.add_failure(ENV, PROBLEM, config(16), "h", Fail(FailureClass.FAULT, "illegal address"), "s1")
    store.add_failure(ENV, GemmProblem(8, 8, 8), config(16), "h", Fail("fault", "other problem"), "s1")
    other_gpu = dataclasses.replace(ENV, gpu_key="a100", gpu_name="NVIDIA A100")
    store.add_failure(other_gpu, PROBLEM, config(16), "h", Fail("fault", "other gpu"), "s1")

    with store.session() as session:
        row = session.get(Failure, first)
        kernel_name = session.get(Kernel, row.kernel_id).name
    assert (row.failure_class, row.message, row.study, kernel_name) == (
        "compile_error", "nvrtc: bad", "s1", "sgemm_bm64_bn64")
    assert store.failure_counts("h200", PROBLEM) == {"compile_error": 2, "fault": 1}
    assert store.failure_counts("h200", PROBLEM, study="s1") == {"compile_error": 1, "fault": 1}
    assert store.failure_counts("h100", PROBLEM) == {}


def test_get_or_create_makes_one_row_per_identity(store):
    store.add_measurement(ENV, PROBLEM, config(128), "h1", measurement(1.0), None)
    store.add_measurement(ENV, PROBLEM, config(128), "h1", measurement(1.1), None)
    store.add_failure(ENV, PROBLEM, config(128), "h1", Fail("noisy", "spread"), None)
    assert (count(store, Environment), count(store, Problem), count(store, Kernel)) == (1, 1, 1)

    new_driver, beta_one = dataclasses.replace(ENV, driver="590.1"), dataclasses.replace(PROBLEM, beta=1.0)
    store.add_measurement(new_driver, PROBLEM, config(128), "h1", measurement(1.0), None)
    store.add_measurement(ENV, beta_one, config(128), "h1", measurement(1.0), None)
    store.add_measurement(ENV, PROBLEM, config(128), "h2", measurement(1.0), None)  # template changed
    store.add_measurement(ENV, PROBLEM, config(128), None, measurement(1.0), None)
    store.add_measurement(ENV, PROBLEM, config(128), None, measurement(1.0), None)
    assert (count(store, Environment), count(store, Problem), count(store, Kernel)) == (2, 2, 3)
    assert count(store, Measurement) == 7


def test_best_one_row_per_kernel_fastest_first(store):
    for median in (1.0, 0.8, 1.2):
        store.add_measurement(ENV, PROBLEM, config(128), "h", measurement(median), "s1")
    store.add_measurement(ENV, PROBLEM, config(64), "h", measurement(0.9), "s2")
    store.add_measurement(ENV, PROBLEM, config(32), "h", measurement(0.5), "s1")
    store.add_measurement(ENV, PROBLEM, None, None, measurement(0.1), None)  # cuBLAS: never a candidate row
    # Faster, but for another problem (beta differs) or another GPU: must not show up.
    beta_one = dataclasses.replace(PROBLEM, beta=1.0)
    store.add_measurement(ENV, beta_one, config(16), "h", measurement(0.01), None)
    a100 = dataclasses.replace(ENV, gpu_key="a100", gpu_name="NVIDIA A100", arch="sm_80")
    store.add_measurement(a100, PROBLEM, config(16), "h", measurement(0.01), None)

    rows = store.best("h200", PROBLEM)
    assert [(row.config_name, row.median_ms) for row in rows] == [
        ("sgemm_bm32_bn64", 0.5), ("sgemm_bm128_bn64", 0.8), ("sgemm_bm64_bn64", 0.9)]
    assert all(isinstance(row, BestRow) for row in rows)
    top = rows[0]
    assert (top.family, top.params, top.tflops) == ("sgemm", {"BM": 32, "BN": 64}, PROBLEM.tflops(0.5))
    assert (top.gpu_name, top.arch, top.driver) == ("NVIDIA H200", "sm_90", "580.159.04")
    assert top.measured_at.tzinfo is not None
    assert abs(top.measured_at - dt.datetime.now(dt.timezone.utc)) < dt.timedelta(minutes=1)
    two = store.best("h200", PROBLEM, limit=2)
    assert [row.config_name for row in two] == ["sgemm_bm32_bn64", "sgemm_bm128_bn64"]
    assert [row.config_name for row in store.best("a100", PROBLEM)] == ["sgemm_bm16_bn64"]
    assert store.best("h200", GemmProblem(8, 8, 8)) == []
    with pytest.raises(dataclasses.FrozenInstanceError):
        top.median_ms = 0.0


def test_ratio_to_cublas_uses_median_of_same_environment(store):
    assert store.cublas_reference("h200", PROBLEM) is None
    store.add_measurement(ENV, PROBLEM, config(128), "h", measurement(0.5), None)
    alone = store.best("h200", PROBLEM)[0]
    assert (alone.cublas_median_ms, alone.ratio_to_cublas) == (None, None)

    for median in (1.0, 3.0, 0.9):  # median 1.0; the latest is 0.9
        store.add_measurement(ENV, PROBLEM, None, None, measurement(median), None)
    new_driver = dataclasses.replace(ENV, driver="590.1")
    store.add_measurement(new_driver, PROBLEM, None, None, measurement(7.0), None)  # another environment

    row = store.best("h200", PROBLEM)[0]
    assert row.cublas_median_ms == 1.0
    assert row.ratio_to_cublas == pytest.approx(2.0)
    assert store.cublas_reference("h200", PROBLEM) == 7.0
    store.add_measurement(ENV, PROBLEM, None, None, measurement(0.9), None)
    assert store.cublas_reference("h200", PROBLEM) == 0.9


def test_migration_matches_models(store):
    with store._engine.connect() as connection:
        opts = {"version_table": VERSION_TABLE, "compare_type": True}
        context = MigrationContext.configure(connection, opts=opts)
        assert compare_metadata(context, Base.metadata) == []
        tables = set(inspect(connection).get_table_names())
        assert context.get_current_revision() == HEAD_REVISION
    assert tables == {"environments", "problems", "kernels", "measurements", "failures", "energy_windows", VERSION_TABLE}


def _migrated_step_by_step(path) -> None:
    """An empty SQLite file taken through every migration, one revision after another."""
    from alembic import command
    from alembic.config import Config as AlembicConfig
    from sqlalchemy import create_engine

    engine = create_engine(f"sqlite:///{path}")
    config = AlembicConfig()
    config.set_main_option("script_location", str(schema.MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
    engine.dispose()


def _schema_of(path) -> dict:
    """Every table's columns, keys, constraints and indexes, as SQLite reports them."""
    from sqlalchemy import create_engine

    engine = create_engine(f"sqlite:///{path}")
    with engine.connect() as connection:
        inspector = inspect(connection)
        shape = {name: (
            [(c["name"], str(c["type"]), c["nullable"]) for c in inspector.get_columns(name)],
            inspector.get_pk_constraint(name)["constrained_columns"],
            sorted((fk["name"], tuple(fk["constrained_columns"]), fk["referred_table"])
                   for fk in inspector.get_foreign_keys(name)),
            sorted((u["name"], tuple(u["column_names"])) for u in inspector.get_unique_constraints(name)),
            sorted((i["name"], tuple(i["column_names"]), bool(i["unique"])) for i in inspector.get_indexes(name)),
            sorted((c["name"], " ".join(c["sqltext"].split())) for c in inspector.get_check_constraints(name)),
        ) for name in inspector.get_table_names()}
    engine.dispose()
    return shape


def test_the_newest_revision_is_alembics_head():
    from alembic.script import ScriptDirectory

    assert schema.head_revision() == ScriptDirectory(str(schema.MIGRATIONS)).get_current_head() == HEAD_REVISION


def test_every_migration_in_turn_gives_the_schema_a_fresh_database_gets_in_one_step(tmp_path):
    from sqlalchemy import create_engine

    _migrated_step_by_step(tmp_path / "stepwise.db")
    ResultStore(f"sqlite:///{tmp_path / 'fresh.db'}").close()
    stepwise, fresh = _schema_of(tmp_path / "stepwise.db"), _schema_of(tmp_path / "fresh.db")
    assert set(fresh) == {*Base.metadata.tables, VERSION_TABLE}
    assert stepwise == fresh
    engine = create_engine(f"sqlite:///{tmp_path / 'stepwise.db'}")
    with engine.connect() as connection:  # and both match the models
        context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE, "compare_type": True})
        assert compare_metadata(context, Base.metadata) == []
        assert context.get_current_revision() == HEAD_REVISION
    engine.dispose()


def test_a_fresh_database_runs_no_migration_and_a_current_one_no_alembic(tmp_path, monkeypatch):
    from alembic import command

    def no_migration(*args, **kwargs):
        raise AssertionError("a migration ran")

    monkeypatch.setattr(command, "upgrade", no_migration)
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    with ResultStore(url) as store:
        store.add_measurement(ENV, PROBLEM, config(64), "h", measurement(1.0), "s")
    code = ("import sys; from autotune.results import ResultStore; ResultStore(sys.argv[1]).close(); "
            "print(sorted(name for name in sys.modules if name.split('.')[0] == 'alembic'))")
    opened = subprocess.run([sys.executable, "-c", code, url], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert opened.returncode == 0, opened.stderr
    assert opened.stdout.strip() == "[]"  # reading the revision of a current database needs no Alembic


def test_shares_a_database_with_optuna(tmp_path):
    optuna = pytest.importorskip("optuna")
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    optuna.storages.RDBStorage(url)  # Optuna first, then us, then Optuna again
    ResultStore(url).close()
    storage = optuna.storages.RDBStorage(url)
    assert storage.get_all_studies() == []
    with sqlite3.connect(tmp_path / "shared.db") as connection:
        ours = connection.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchall()
    assert ours == [(HEAD_REVISION,)]


def test_not_a_database_is_refused_and_untouched(tmp_path):
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are my notes, not SQLite\n" * 200)
    before = sha256(path)
    url = f"sqlite:///{path}"
    with pytest.raises(DatabaseError) as info:
        ResultStore(url)
    message = str(info.value)
    assert message == f"cannot open database '{url}': file is not a database"
    assert "\n" not in message
    assert sha256(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]  # no journal left behind


def test_missing_directory_is_refused_and_not_created(tmp_path):
    url = f"sqlite:///{tmp_path / 'missing' / 'results.db'}"
    expected = r"^cannot open database '.*missing/results\.db': directory '.*missing' does not exist$"
    with pytest.raises(DatabaseError, match=expected):
        ResultStore(url)
    assert not (tmp_path / "missing").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file_is_refused(tmp_path):
    path = tmp_path / "locked.db"
    ResultStore(f"sqlite:///{path}").close()
    path.chmod(0)
    try:
        with pytest.raises(DatabaseError, match=r"^cannot open database '.*locked\.db': permission denied$"):
            ResultStore(f"sqlite:///{path}")
    finally:
        path.chmod(0o600)


@pytest.mark.parametrize(
    "url, reason",
    [("not a url", "Could not parse"), ("nosuchdialect://host/db", "unknown dialect 'nosuchdialect'")],
)
def test_bad_url_is_one_line_error(url, reason):
    with pytest.raises(DatabaseError) as info:
        ResultStore(url)
    assert str(info.value).startswith(f"cannot open database '{url}': {reason}")
    assert "\n" not in str(info.value)


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "results.db"
    ResultStore(f"sqlite:///{path}").close()
    with sqlite3.connect(path) as connection:
        connection.execute(f"UPDATE {VERSION_TABLE} SET version_num = '0099'")
    connection.close()
    with pytest.raises(DatabaseError, match="'0099'"):
        ResultStore(f"sqlite:///{path}")


def test_session_rolls_back_and_raises_one_line(store):
    with pytest.raises(DatabaseError) as info:
        with store.session() as session:
            session.add(Problem(m=1, n=1, k=1, dtype="f32", layout="row", alpha=1.0, beta=0.0))
            session.flush()
            times = dict(median_ms=1, min_ms=1, max_ms=1, q25_ms=1, q75_ms=1, samples_json="[]")
            session.add(  # a candidate without a kernel: the CHECK constraint refuses it
                Measurement(environment_id=1, problem_id=1, kernel_id=None, implementation="candidate",
                            tflops=1, max_error=0, **times)
            )
    assert str(info.value).startswith("database error on 'sqlite:///")
    assert "\n" not in str(info.value)
    assert count(store, Problem) == 0  # the whole transaction was rolled back


def test_concurrent_insert_of_the_same_row_is_retried(store, monkeypatch):
    store.add_measurement(ENV, PROBLEM, config(128), "h", measurement(1.0), None)
    real_find = rows_module.find
    misses = []

    def find_missing_once(session, model, fields):
        if model is Environment and not misses:  # as if another process inserted it just now
            misses.append(model)
            return None
        return real_find(session, model, fields)

    monkeypatch.setattr(rows_module, "find", find_missing_once)
    with ResultStore(store.url) as other:  # another process: it has not seen the environment yet
        other.add_measurement(ENV, PROBLEM, config(128), "h", measurement(0.7), None)
    assert misses == [Environment]
    assert count(store, Environment) == 1
    assert [row.median_ms for row in store.best("h200", PROBLEM)] == [0.7]


def test_default_url_honours_autotune_db(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path / "mine.db"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_url() == f"sqlite:///{tmp_path / 'mine.db'}"
    assert not (tmp_path / "xdg").exists()
    ResultStore(default_url()).close()
    assert (tmp_path / "mine.db").is_file()


def test_default_url_falls_back_to_xdg_data_home(tmp_path, monkeypatch):
    monkeypatch.delenv("AUTOTUNE_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_url() == f"sqlite:///{tmp_path / 'xdg' / 'autotune' / 'results.db'}"
    assert (tmp_path / "xdg" / "autotune").is_dir()
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_url() == f"sqlite:///{tmp_path / 'home' / '.local' / 'share' / 'autotune' / 'results.db'}"


def test_a_0001_database_upgrades_with_its_rows_intact(tmp_path):
    """A database written by the first schema opens, migrates to head, and keeps its measurements."""
    from alembic import command
    from alembic.config import Config as AlembicConfig
    from sqlalchemy import create_engine, inspect, text

    url = f"sqlite:///{tmp_path}/old.db"
    engine = create_engine(url)
    config = AlembicConfig()
    config.set_main_option("script_location", str(store_module.MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0001")
    with engine.begin() as connection:
        assert "energy_windows" not in inspect(connection).get_table_names()
        connection.execute(text(
            "insert into environments (id, gpu_key, gpu_name, arch, driver, cuda_runtime, nvrtc, cupy, created_at) "
            "values (1, 'h200', 'NVIDIA H200', 'sm_90', '580', '13.0', '13.0', '14.2.0', '2026-11-29 00:00:00')"))
        connection.execute(text(
            "insert into problems (id, m, n, k, dtype, layout, alpha, beta) "
            "values (1, 64, 64, 64, 'f32', 'row', 1.0, 0.0)"))
        connection.execute(text(
            "insert into measurements (environment_id, problem_id, kernel_id, implementation, study, median_ms, "
            "min_ms, max_ms, q25_ms, q75_ms, samples_json, tflops, max_error, created_at) values "
            "(1, 1, NULL, 'cublas', NULL, 0.5, 0.4, 0.6, 0.45, 0.55, '[0.5]', 1.0, 0.0, '2026-11-29 00:00:00')"))
    engine.dispose()

    store = ResultStore(url)
    assert store.cublas_reference("h200", GemmProblem(64, 64, 64, "f32")) == 0.5
    with store.session() as session:
        tables = inspect(session.connection()).get_table_names()
        version = session.execute(text("select version_num from autotune_alembic_version")).scalar_one()
    assert "energy_windows" in tables and version == HEAD_REVISION


def window(power_w: float, launches: int, seconds: float = 1.0, throttled: bool = False):
    from autotune.records import EnergyWindow

    return EnergyWindow(seconds=seconds, launches=launches, mean_power_w=power_w, energy_counter_j=power_w * 0.98,
                        energy_per_gemm_j=power_w * seconds / launches,
                        energy_per_gemm_counter_j=power_w * 0.98 / launches, idle_power_w=124.0,
                        sm_clock_mhz_mean=1500.0, sm_clock_mhz_min=1470, temperature_c_max=60,
                        throttle_reasons=4 if throttled else 0, throttled=throttled, samples=100)


def test_energy_windows_round_trip_with_their_measurements(store):
    fast = store.add_measurement(ENV, PROBLEM, config(128), "h", measurement(1.0), "s")
    ref = store.add_measurement(ENV, PROBLEM, None, None, measurement(0.8), "s")
    store.add_energy(fast, window(700.0, 1000, throttled=True))
    store.add_energy(ref, window(650.0, 1250))
    rows = store.energy("h200", PROBLEM)
    assert [r.config_name for r in rows] == [config(128).name, "cublas"]
    assert rows[0].median_ms == 1.0 and rows[0].energy_per_gemm_j == pytest.approx(0.7)
    assert rows[0].throttled and not rows[1].throttled
    assert rows[1].energy_per_gemm_counter_j == pytest.approx(650.0 * 0.98 / 1250)
    assert store.energy("t4", PROBLEM) == []


def test_energy_window_needs_its_measurement(store):
    with pytest.raises(DatabaseError, match="no measurement 999"):
        store.add_energy(999, window(500.0, 10))
