"""Many processes on one results database: fresh opens, concurrent writers and imports, kill -9, busy locks.

Run on a fresh SQLite file and, where the binaries are installed, on a throwaway
PostgreSQL server (tests/postgres_server.py).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import random
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config as AlembicConfig
from conftest import autotune
from forked_processes import autotune_command, processes, victim, write
from results_data import ENV, PROBLEM, measurement
from sqlalchemy import create_engine, func, inspect, select, text
from sqlalchemy.exc import OperationalError

from autotune.errors import DatabaseError
from autotune.problem import GemmProblem
from autotune.records import Failure as Fail
from autotune.results import ResultStore, default_url, schema
from autotune.results import store as store_module
from autotune.results.models import VERSION_TABLE, Environment, Failure, Kernel, Measurement, Problem

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "tests" / "data" / "h200-v1.jsonl"  # H200 results as shipped (their version-1 lines)



@pytest.fixture(params=["sqlite", "postgresql"])
def fresh_url(request, tmp_path):
    """The URL of a database nobody has opened yet: a new SQLite file, or a new PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'fresh.db'}"
    return request.getfixturevalue("postgres").create_database()


def _count(url: str, model) -> int:
    with ResultStore(url) as store, store.session() as session:
        return session.scalar(select(func.count()).select_from(model))


def test_eight_processes_write_100_results_each_to_a_fresh_database(fresh_url):
    procs, count = 8, 100
    context = processes()
    start = context.Barrier(procs)  # every writer opens the fresh database at the same moment
    children = [context.Process(target=write, args=(fresh_url, proc, count, start)) for proc in range(procs)]
    for child in children:
        child.start()
    for child in children:
        child.join(120)
    assert [child.exitcode for child in children] == [0] * procs  # a writer's traceback is in the captured stderr

    with ResultStore(fresh_url) as store, store.session() as session:
        total = session.scalar(select(func.count()).select_from(Measurement))
        distinct = session.scalar(select(func.count()).select_from(
            select(Measurement.study, Measurement.median_ms).distinct().subquery()))
        per_study = dict(session.execute(select(Measurement.study, func.count()).group_by(Measurement.study)).all())
        failures = session.scalar(select(func.count()).select_from(Failure))
        identities = [session.scalar(select(func.count()).select_from(model)) for model in
                      (Environment, Problem, Kernel)]
        version = session.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
    assert total == distinct == procs * count  # none lost, none twice
    assert per_study == {f"p{proc}": count for proc in range(procs)}
    assert failures == procs * count // 50
    assert identities == [1, 1, 8]
    assert version == [schema.head_revision()]


def test_concurrent_imports_of_one_file_add_each_row_once(fresh_url):
    context = processes()
    pipes = [context.Pipe(duplex=False) for _ in range(4)]
    command = ["results", "import", str(RESULTS), "--db", fresh_url]
    children = [context.Process(target=autotune_command, args=(command, sent)) for _, sent in pipes]
    for child in children:
        child.start()
    answers = [received.recv() if received.poll(120) else (None, "", "no answer") for received, _ in pipes]
    for child in children:
        child.join(60)
    assert [code for code, _, _ in answers] == [0] * 4, [err for _, _, err in answers]
    outputs = [(out, err) for _, out, err in answers]
    lines = len(RESULTS.read_text().splitlines())
    added = [int(out.split(": ")[1].split(" measurements added")[0]) for out, _ in outputs]
    assert sum(added) == lines and sorted(added)[:3] == [0, 0, 0]  # one import added them, the others found them
    assert _count(fresh_url, Measurement) == lines


def _integrity_problems(path: Path) -> list[str]:
    with sqlite3.connect(path) as connection:
        checked = [row[0] for row in connection.execute("PRAGMA integrity_check")]
        orphans = connection.execute(
            "SELECT count(*) FROM energy_windows w LEFT JOIN measurements m ON m.id = w.measurement_id "
            "WHERE m.id IS NULL").fetchone()[0]
    connection.close()
    return [line for line in checked if line != "ok"] + ([f"{orphans} orphan energy windows"] if orphans else [])


def test_kill_9_at_any_moment_leaves_a_database_that_opens(tmp_path):
    rounds, per_round = 10, 2
    rng = random.Random(20261202)
    context = processes()
    killed_while_opening = 0
    for number in range(rounds):
        path = tmp_path / f"killed{number}.db"
        opened = [context.RawValue("b", 0) for _ in range(per_round)]
        victims = [context.Process(target=victim, args=(f"sqlite:///{path}", flag)) for flag in opened]
        for process in victims:
            process.start()
        writing = number % 2 == 1  # odd rounds: kill while writing; even rounds: mostly during the first open
        if writing:
            deadline = time.monotonic() + 120
            while not all(flag.value for flag in opened) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert all(flag.value for flag in opened)
        time.sleep(rng.uniform(0.0, 0.3))
        for process, flag in zip(victims, opened):
            process.kill()
            process.join()
            killed_while_opening += not writing and not flag.value

        with ResultStore(f"sqlite:///{path}") as store:  # opens: that is the point
            store.add_measurement(ENV, PROBLEM, None, None, measurement(1.0), "after the kill")
            assert store.measurement_count(ENV.gpu_key, PROBLEM, study="after the kill") == 1
        assert _integrity_problems(path) == []
    assert killed_while_opening > 0  # some kills did land during the first open


def test_a_write_whose_commit_got_through_is_not_stored_twice(tmp_path, monkeypatch):
    store = ResultStore(f"sqlite:///{tmp_path / 'results.db'}")
    real_commit = store_module.Session.commit
    lost = []

    def commit_then_lose_the_answer(session):
        real_commit(session)
        if not lost:  # as if the acknowledgement of the commit never came back
            lost.append(True)
            raise OperationalError("COMMIT", {}, sqlite3.OperationalError("database is locked"))

    monkeypatch.setattr(store_module.Session, "commit", commit_then_lose_the_answer)
    first = store.add_measurement(ENV, PROBLEM, None, None, measurement(2.0), "s")
    monkeypatch.undo()
    assert lost == [True]  # the write was retried
    assert store.measurement_count(ENV.gpu_key, PROBLEM) == 1
    with store.session() as session:
        assert session.scalar(select(Measurement.id)) == first


def test_the_same_measurement_written_twice_is_one_row(tmp_path):
    store = ResultStore(f"sqlite:///{tmp_path / 'results.db'}")
    at = dt.datetime(2026, 12, 1, 12, 0, 0, 123456, tzinfo=dt.timezone.utc)
    first = store.add_measurement(ENV, PROBLEM, None, None, measurement(2.0), "s", measured_at=at)
    again = store.add_measurement(ENV, PROBLEM, None, None, measurement(2.0), "s",
                                  measured_at=at.astimezone(dt.timezone(dt.timedelta(hours=2))))  # the same moment
    later = store.add_measurement(ENV, PROBLEM, None, None, measurement(2.0), "s")  # measured again: a new result
    assert first == again != later
    assert store.measurement_count(ENV.gpu_key, PROBLEM) == 2


def test_a_locked_database_is_waited_for_then_refused_with_one_line(tmp_path):
    path = tmp_path / "results.db"
    ResultStore(f"sqlite:///{path}").close()
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    patient = ResultStore(f"sqlite:///{path}", write_timeout_s=20)
    release = threading.Timer(0.5, holder.execute, ["COMMIT"])
    release.start()
    started = time.monotonic()
    patient.add_measurement(ENV, PROBLEM, None, None, measurement(1.0), "s")  # waits, then succeeds
    assert time.monotonic() - started >= 0.4
    release.join()

    holder.execute("BEGIN IMMEDIATE")
    hasty = ResultStore(f"sqlite:///{path}", write_timeout_s=0.5)
    with pytest.raises(DatabaseError) as info:
        hasty.add_measurement(ENV, PROBLEM, None, None, measurement(2.0), "s")
    holder.execute("ROLLBACK")
    holder.close()
    message = str(info.value)
    assert message.startswith(f"database error on 'sqlite:///{path}': database is locked (gave up after ")
    assert "\n" not in message
    assert patient.measurement_count(ENV.gpu_key, PROBLEM) == 1


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("command", [["query", "--gpu", "h200", "--shape", "4096"], ["table", "--gpu", "h200"]])
def test_read_only_commands_refuse_a_sqlite_file_of_something_else(tmp_path, command):
    path = tmp_path / "notes.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
        connection.execute("INSERT INTO notes (body) VALUES ('buy milk')")
    connection.close()
    before = _sha256(path)
    done = autotune(*command, "--db", f"sqlite:///{path}")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"autotune: error: cannot open database 'sqlite:///{path}': not an autotune results database (it holds "
        "other tables: notes); give --db a new file or an autotune database"]
    assert _sha256(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]  # no journal, WAL or shm file left


def test_a_new_or_empty_file_is_created_and_migrated(tmp_path):
    empty = tmp_path / "empty.db"
    empty.touch()
    for path in (empty, tmp_path / "new.db"):
        with ResultStore(f"sqlite:///{path}") as store:
            assert store.measurement_count("h200", PROBLEM) == 0
        with sqlite3.connect(path) as connection:
            assert connection.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchall() == [
                (schema.head_revision(),)]
            assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        connection.close()


def _half_migrated(path: Path, revision: str | None, tables: list[str]) -> None:
    """What an autotune with non-transactional SQLite DDL left when killed during an upgrade to the
    revision after ``revision``: that revision's ``tables`` created, ``revision`` still recorded."""
    engine = create_engine(f"sqlite:///{path}")
    config = AlembicConfig()
    config.set_main_option("script_location", str(schema.MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0002" if revision else "0001")
    with engine.begin() as connection:
        for name in ("energy_windows", "failures", "measurements", "kernels", "problems", "environments"):
            if name not in tables and inspect(connection).has_table(name):
                connection.execute(text(f"DROP TABLE {name}"))
        connection.execute(text(f"DELETE FROM {VERSION_TABLE}"))
        if revision:
            connection.execute(text(f"INSERT INTO {VERSION_TABLE} VALUES ('{revision}')"))
    engine.dispose()


@pytest.mark.parametrize("revision, tables", [
    (None, ["environments", "problems"]),  # killed while creating the first tables
    ("0001", ["environments", "problems", "kernels", "measurements", "failures", "energy_windows"]),  # in 0002
])
def test_a_database_an_older_autotune_left_half_migrated_opens(tmp_path, revision, tables):
    path = tmp_path / "half.db"
    _half_migrated(path, revision, tables)
    with ResultStore(f"sqlite:///{path}") as store:
        store.add_measurement(ENV, PROBLEM, None, None, measurement(1.0), "s")
        store.add_failure(ENV, PROBLEM, None, None, Fail("crash", "x"), "s")
        assert store.measurement_count("h200", PROBLEM) == 1


def test_a_half_migrated_database_with_rows_is_refused(tmp_path):
    path = tmp_path / "half.db"
    _half_migrated(path, None, ["environments", "problems"])
    with sqlite3.connect(path) as connection:
        connection.execute("INSERT INTO problems (m, n, k, dtype, layout, alpha, beta) VALUES (1, 1, 1, 'f32', "
                           "'row', 1.0, 0.0)")
    connection.close()
    with pytest.raises(DatabaseError, match=r"table problems holds rows but the schema revision recorded \(none\)"):
        ResultStore(f"sqlite:///{path}")


def test_a_password_is_never_shown(tmp_path, monkeypatch):
    url = "postgresql+psycopg://tuner:hunter2-secret@127.0.0.1:9/results"  # port 9: nobody listens
    pytest.importorskip("psycopg")
    with pytest.raises(DatabaseError) as info:
        ResultStore(url, write_timeout_s=1)
    assert "hunter2" not in str(info.value)
    assert str(info.value).startswith("cannot open database 'postgresql+psycopg://tuner:***@127.0.0.1:9/results': ")
    with pytest.raises(DatabaseError) as info:  # a URL SQLAlchemy cannot parse is masked too
        ResultStore("postgresql://tuner:hunter2-secret@db.example:no-port/results")
    assert str(info.value).startswith("cannot open database 'postgresql://tuner:***@db.example:no-port/results': ")
    monkeypatch.setenv("AUTOTUNE_DB", url)
    assert default_url() == url  # a URL in AUTOTUNE_DB is a URL, not a file name
    done = autotune("results", "import", RESULTS, env={"AUTOTUNE_DB": url})
    assert done.returncode == 2 and "hunter2" not in done.stderr + done.stdout and "tuner:***@" in done.stderr


def test_the_store_url_names_an_installed_driver(postgres):
    plain = postgres.create_database().replace("postgresql+psycopg://", "postgresql://")
    with ResultStore(plain) as store:
        assert store.url.startswith("postgresql+psycopg://") and postgres.password in store.url  # for Optuna
        assert postgres.password not in store.shown_url and postgres.password not in repr(store)


def test_the_engine_reads_sqlite_in_wal_mode_with_a_busy_timeout(tmp_path):
    path = tmp_path / "results.db"
    with ResultStore(f"sqlite:///{path}") as store, store.session() as session:
        assert session.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert session.execute(text("PRAGMA busy_timeout")).scalar() == 10_000
        assert session.execute(text("PRAGMA synchronous")).scalar() == 1  # NORMAL
    plain = create_engine(f"sqlite:///{path}")
    with plain.connect() as connection:
        assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"  # kept in the file
    plain.dispose()


def test_the_studys_optuna_connections_commit_without_an_fsync_each_in_wal_mode_too(tmp_path):
    """Optuna opens its own engine on the same file: its commits (a trial, a heartbeat, each user
    attribute) would fsync the WAL every time at SQLite's default, FULL."""
    from optuna.distributions import CategoricalDistribution

    from autotune.search.study import StudyLedger

    url = f"sqlite:///{tmp_path / 'results.db'}"
    with ResultStore(url):
        ledger = StudyLedger(url, "s", ["minimize"], {"X": CategoricalDistribution([1, 2])}, budget=4)
        try:
            with ledger.storage.engine.connect() as connection:
                assert connection.execute(text("PRAGMA synchronous")).scalar() == 1  # NORMAL
        finally:
            ledger.close()


def test_rows_an_older_autotune_stored_twice_are_merged_by_the_upgrade(tmp_path):
    """Concurrent imports before fingerprints stored one line twice; migration 0003 keeps one, with the windows."""
    path = tmp_path / "old.db"
    engine = create_engine(f"sqlite:///{path}")
    config = AlembicConfig()
    config.set_main_option("script_location", str(schema.MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0002")
        connection.execute(text(
            "INSERT INTO environments (id, gpu_key, gpu_name, arch, driver, cuda_runtime, nvrtc, cupy, created_at) "
            "VALUES (1, 'h200', 'NVIDIA H200', 'sm_90', '580', '13.0', '13.0', '14.2.0', '2026-11-29 00:00:00')"))
        connection.execute(text("INSERT INTO problems (id, m, n, k, dtype, layout, alpha, beta) "
                                "VALUES (1, 64, 64, 64, 'f32', 'row', 1.0, 0.0)"))
        for row_id, median in ((1, 0.5), (2, 0.5), (3, 0.6)):  # 1 and 2: the same line imported twice
            connection.execute(text(
                "INSERT INTO measurements (id, environment_id, problem_id, kernel_id, implementation, study, "
                "median_ms, min_ms, max_ms, q25_ms, q75_ms, samples_json, tflops, max_error, created_at) VALUES "
                f"({row_id}, 1, 1, NULL, 'cublas', 's', {median}, 0.4, 0.7, 0.45, 0.65, '[{median}]', 1.0, 0.0, "
                "'2026-11-29 12:00:00.000000')"))
        connection.execute(text(
            "INSERT INTO energy_windows (measurement_id, seconds, launches, samples, mean_power_w, energy_per_gemm_j, "
            "throttled, created_at) VALUES (2, 1.0, 100, 10, 500.0, 5.0, 0, '2026-11-29 12:00:01.000000')"))
    engine.dispose()

    with ResultStore(f"sqlite:///{path}") as store, store.session() as session:
        kept = session.execute(select(Measurement.id, Measurement.median_ms).order_by(Measurement.id)).all()
        windows = session.execute(text("SELECT measurement_id, fingerprint FROM energy_windows")).all()
        assert [tuple(row) for row in kept] == [(1, 0.5), (3, 0.6)]
        assert [row[0] for row in windows] == [1] and len(windows[0][1]) == 64
        assert [row.config_name for row in store.energy("h200", GemmProblem(64, 64, 64))] == ["cublas"]


def test_fingerprints_are_pinned():
    """Migration 0003 stored fingerprints computed by these functions: they must not change silently."""
    from autotune.results import fingerprint

    environment = {"gpu_key": "h200", "gpu_name": "NVIDIA H200", "arch": "sm_90", "driver": "580.159.04",
                   "cuda_runtime": "13.0", "nvrtc": "13.0", "cupy": "14.2.0"}
    problem = {"m": 512, "n": 512, "k": 512, "dtype": "f32", "layout": "row", "alpha": 1.0, "beta": 0.0}
    at = dt.datetime(2026, 11, 29, 22, 33, 2, 344523, tzinfo=dt.timezone.utc)
    measured = fingerprint.measurement(environment, problem, ("sgemm", "sgemm_bm64", "abc"), "s", at, 1.0,
                                       [0.9, 1.0, 1.2])
    assert measured == "dc98aaf96d3ea879c8f912cd5e9700e7ffd3d1ea18e15d639c8d8d239b63ad37"
    assert fingerprint.failure(environment, problem, None, None, "crash", "died", at) == (
        "9bc010574a70e8535385982d4680ef41618bc78a54614d37ea7a3471005fbb04")
    assert fingerprint.energy_window(measured, at, 1.0, 1000, 600.0, 0.6) == (
        "acc512da2acf379537bb4f8de30f7bc98cb59476d0e4f3062bac8fe29cbebbb7")
    naive_in_utc, in_paris = at.replace(tzinfo=None), at.astimezone(dt.timezone(dt.timedelta(hours=1)))
    for same_moment in (naive_in_utc, in_paris):  # SQLite hands times back without a zone
        assert fingerprint.measurement(environment, problem, ("sgemm", "sgemm_bm64", "abc"), "s", same_moment, 1,
                                       [0.9, 1.0, 1.2]) == measured
