"""The results database on a real PostgreSQL server (a throwaway one: tests/postgres_server.py).

Skipped, with the reason, where the server binaries or psycopg are missing.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

psycopg = pytest.importorskip("psycopg", reason="the PostgreSQL driver (psycopg, in the test extra) is not installed")
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from results_data import ENV, PROBLEM, fill, measurement, snapshot, window

from autotune.errors import DatabaseError
from autotune.records import Failure as Fail
from autotune.results import ResultStore, schema
from autotune.results import files as tuned
from autotune.results.models import VERSION_TABLE, Base
from autotune.space.family import Config

SHIPPED = Path(__file__).resolve().parents[1] / "tuned_db" / "h200.jsonl"


@pytest.fixture
def store(postgres):
    with ResultStore(postgres.create_database()) as opened:
        yield opened


def test_schema_matches_the_models(store):
    with store._engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE, "compare_type": True})
        assert compare_metadata(context, Base.metadata) == []
        assert context.get_current_revision() == schema.head_revision()


def test_results_round_trip(store):
    candidate = Config("sgemm", (("BM", 128), ("BN", 64)))
    fast = store.add_measurement(ENV, PROBLEM, candidate, "h", measurement(0.5), "s")
    store.add_measurement(ENV, PROBLEM, candidate, "h", measurement(0.7), "s")
    reference = store.add_measurement(ENV, PROBLEM, None, None, measurement(1.0), "s")
    store.add_energy(fast, window(600.0, 1000))
    store.add_energy(reference, window(640.0, 900, throttled=True))
    store.add_failure(ENV, PROBLEM, candidate, "h", Fail("fault", "illegal address"), "s")

    best, = store.best("h200", PROBLEM)
    assert (best.config_name, best.median_ms, best.ratio_to_cublas) == (candidate.name, 0.5, 2.0)
    assert [(row.config_name, row.throttled) for row in store.energy("h200", PROBLEM)] == [
        (candidate.name, False), ("cublas", True)]
    assert store.failure_counts("h200", PROBLEM) == {"fault": 1}
    assert store.measurement_count("h200", PROBLEM, study="s") == 3
    assert store.problems("h200", "f32") == [PROBLEM]


def test_lossless_round_trip_between_sqlite_and_postgresql(tmp_path, store):
    source = ResultStore(f"sqlite:///{tmp_path / 'source.db'}")
    fill(source)
    text = io.StringIO()
    tuned.export(source, "h200", text)
    path = tmp_path / "all.jsonl"
    path.write_text(text.getvalue())

    report, = tuned.import_files(store, [path])
    assert (report.measurements_added, report.energy_windows_added, report.failures_added) == (9, 3, 3)
    again = io.StringIO()
    tuned.export(store, "h200", again)
    assert again.getvalue() == text.getvalue()
    assert snapshot(store) == snapshot(source)


def test_an_import_with_a_bad_line_adds_nothing(tmp_path, store):
    lines = [json.loads(line) for line in SHIPPED.read_text().splitlines()[:5]]
    lines[4]["timing_ms"]["median"] = -1.0
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(tuned.ResultsFileError, match="line 5: invalid timing_ms.median -1.0"):
        tuned.import_files(store, [path])
    assert store.problems("h200", "f32") == []


def test_an_unknown_database_and_a_wrong_password_are_one_line_and_masked(postgres):
    for url in (postgres.url("no_such_database"), postgres.url("postgres", password="not-the-password")):
        with pytest.raises(DatabaseError) as info:
            ResultStore(url)
        message = str(info.value)
        assert message.startswith("cannot open database 'postgresql+psycopg://autotune:***@127.0.0.1:")
        assert postgres.password not in message and "not-the-password" not in message and "\n" not in message


def test_the_migration_holds_the_advisory_lock(postgres):
    url = postgres.create_database()
    holder = psycopg.connect(host="127.0.0.1", port=postgres.port, user="autotune", password=postgres.password,
                             dbname=url.rsplit("/", 1)[1], autocommit=True)
    holder.execute("SELECT pg_advisory_lock(%s)", (schema.PG_MIGRATION_LOCK,))  # another process is migrating
    try:
        with pytest.raises(DatabaseError, match=r"lock timeout \(gave up after \d+ attempts"):
            ResultStore(url + "?options=-c%20lock_timeout%3D200", write_timeout_s=1)
    finally:
        holder.close()
    with ResultStore(url) as store:  # the lock is free again: the migration runs
        store.add_measurement(ENV, PROBLEM, None, None, measurement(1.0), "s")
        assert store.measurement_count("h200", PROBLEM) == 1
