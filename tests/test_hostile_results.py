"""Hostile inputs to the results stage and the command line's shared arguments.

Anything read from a database or a file is checked as it is read; commands that only
read never write (not a table, not a file, not a folder); every bad input is one line
and exit 2; no password is printed; text from a database reaches the terminal with its
control characters escaped.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import numpy
import pytest
from results_data import ENV, PROBLEM, fill, measurement
from sqlalchemy import create_engine, inspect, text

from autotune.cli import build_parser
from autotune.errors import DatabaseError, InputError
from autotune.results import ResultStore
from autotune.results import files as tuned
from autotune.results.models import VERSION_TABLE
from autotune.results.urls import database_url, shown_url, without_secrets
from conftest import cli as run

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_LINE = next(line for line in (ROOT / "tuned_db" / "h200.jsonl").read_text().splitlines()
                    if json.loads(line).get("family"))  # a tuned kernel's measurement
SECRET = "s3cr3t-Pa55"
QUERY = ["query", "--gpu", "h200", "--shape", "512"]
PLANTED_NAME = "NVIDIA H200\n\x1b[2J\x1b]0;owned\x07\u202e"


def assert_one_line(result: tuple[int, str, str], *fragments: str) -> str:
    code, _, err = result
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def filled(path: Path) -> str:
    """A results database at ``path`` with the varied results of results_data; its URL."""
    url = f"sqlite:///{path}"
    with ResultStore(url) as store:
        fill(store)
    return url


def plant(path: Path, statement: str) -> None:
    with sqlite3.connect(path) as connection:
        connection.execute(statement)
    connection.close()


# -- 1. an import cannot retarget a known GPU -------------------------------------------------------------------


def test_an_imported_line_cannot_give_a_known_gpu_another_arch(tmp_path):
    line = json.loads(SHIPPED_LINE)
    line["environment"]["arch"] = "sm_75"
    crafted = tmp_path / "crafted.jsonl"
    crafted.write_text(SHIPPED_LINE + "\n" + json.dumps(line) + "\n")
    with pytest.raises(InputError) as info:
        tuned.read(crafted)
    assert str(info.value) == (f"{crafted} line 2: invalid environment.arch 'sm_75': expected sm_90, the arch of "
                               "gpu_key 'h200'")
    path = tmp_path / "r.db"
    with ResultStore(f"sqlite:///{path}") as store:
        with pytest.raises(InputError, match="environment.arch"):
            tuned.import_files(store, [crafted])
        assert store.gpus() == []  # the good line before it was not imported either


def test_a_fake_gpus_results_keep_the_real_gpus_arch_number(tmp_path):
    line = json.loads(SHIPPED_LINE)
    line["environment"].update(gpu_key="h200-fake", arch="sm_80-fake")
    crafted = tmp_path / "crafted.jsonl"
    crafted.write_text(json.dumps(line) + "\n")
    with pytest.raises(InputError, match="expected sm_90-fake or sm_90"):
        tuned.read(crafted)
    line["environment"].update(gpu_key="rtx-a6000", arch="sm_86")  # a GPU without a spec: its own arch
    crafted.write_text(json.dumps(line) + "\n")
    assert tuned.read(crafted)[0].environment.arch == "sm_86"


def test_a_stored_environment_that_is_not_text_is_refused_at_load(tmp_path, capsys):
    path = tmp_path / "r.db"
    url = filled(path)
    plant(path, "UPDATE environments SET gpu_name = ''")
    with ResultStore(url) as store, pytest.raises(DatabaseError) as info:
        store.gpus()
    assert "environments row 1: invalid gpu_name '': expected a non-empty string" in str(info.value)
    assert_one_line(run(capsys, "export", "--gpu", "h200", "--format", "json", "--out", str(tmp_path / "out"),
                        "--db", url), "environments row 1", "gpu_name")
    assert not (tmp_path / "out").exists()


# -- 2. foreign databases are refused untouched; reading commands never write ------------------------------------


@pytest.mark.parametrize("statements, listed", [
    (["CREATE VIEW answer AS SELECT 42 AS value"], "answer"),
    (["CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)",
      "INSERT INTO alembic_version VALUES ('ae1027a6acf')"], "alembic_version"),
    (["CREATE TABLE study_notes (body TEXT)"], "study_notes"),  # not one of Optuna's tables
])
@pytest.mark.parametrize("read_only", [False, True])
def test_a_sqlite_file_of_another_application_is_refused_untouched(tmp_path, statements, listed, read_only):
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as connection:
        for statement in statements:
            connection.execute(statement)
    connection.close()
    before = sha256(path)
    with pytest.raises(DatabaseError) as info:
        ResultStore(f"sqlite:///{path}", read_only=read_only)
    assert f"not an autotune results database (it holds other tables: {listed})" in str(info.value)
    assert sha256(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]


def test_optunas_own_alembic_version_is_optunas(tmp_path):
    optuna = pytest.importorskip("optuna")
    url = f"sqlite:///{tmp_path / 'study.db'}"
    optuna.storages.RDBStorage(url)
    assert "alembic_version" in inspect(create_engine(url)).get_table_names()
    ResultStore(url).close()


@pytest.mark.parametrize("command", [
    QUERY, ["query", "--gpu", "h200", "--shape", "512", "--objective", "energy"], ["table", "--gpu", "h200"],
    ["results", "export", "--gpu", "h200"], ["export", "--gpu", "h200", "--format", "json", "--out", "{out}"],
    ["plot", "--gpu", "h200", "--out", "{out}"],
])
def test_reading_commands_never_create_a_database(tmp_path, capsys, monkeypatch, command):
    monkeypatch.delenv("AUTOTUNE_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    args = [arg.format(out=tmp_path / "out") for arg in command]
    for db in ([], ["--db", str(tmp_path / "new.db")], ["--db", f"sqlite:///{tmp_path}/new.db"]):
        code, out, err = run(capsys, *args, *db)
        if command[0] == "export":
            assert code == 2 and "results import --shipped" in err, err
        elif command[0] == "plot":
            pytest.importorskip("matplotlib")
            assert code == 2 and "nothing to plot" in err, err
        else:
            assert code == 0, err
            assert "no " in out + err or out.strip() in ("[]", "")
        assert sorted(p.name for p in tmp_path.iterdir()) == [], (db, list(tmp_path.iterdir()))


def test_reading_commands_leave_a_database_byte_for_byte_as_it_was(tmp_path, capsys):
    path = tmp_path / "r.db"
    url = filled(path)
    empty = tmp_path / "empty.db"
    empty.touch()
    before = {p.name: sha256(p) for p in tmp_path.iterdir()}
    for db in (url, str(empty)):
        for command in (QUERY, ["table", "--gpu", "h200"], ["results", "export", "--gpu", "h200"]):
            code, _, err = run(capsys, *command, "--db", db)
            assert code == 0, err
    assert {p.name: sha256(p) for p in tmp_path.iterdir()} == before


def test_a_read_only_store_refuses_to_write(tmp_path):
    url = filled(tmp_path / "r.db")
    with ResultStore(url, read_only=True) as store:
        assert store.measurement_count("h200", PROBLEM) > 0
        with pytest.raises(DatabaseError, match="opened read-only"):
            store.add_measurement(ENV, PROBLEM, None, None, measurement(1.0), "s")
        with store._engine.connect() as connection, pytest.raises(Exception, match="readonly|read-only"):
            connection.execute(text("CREATE TABLE notes (body TEXT)"))


def _at_revision(path: Path, revision: str) -> str:
    """A database migrated only to ``revision``; its URL."""
    from alembic import command
    from alembic.config import Config as AlembicConfig

    from autotune.results import schema

    engine = create_engine(f"sqlite:///{path}")
    config = AlembicConfig()
    config.set_main_option("script_location", str(schema.MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
    engine.dispose()
    return f"sqlite:///{path}"


def test_an_older_or_newer_schema_is_read_by_no_one_and_left_as_it_was(tmp_path, capsys):
    path = tmp_path / "old.db"
    url = _at_revision(path, "0001")
    before = sha256(path)
    line = assert_one_line(run(capsys, *QUERY, "--db", url), "older autotune's schema (revision 0001)",
                           "autotune results import")
    assert "upgrades it" in line
    assert sha256(path) == before
    ResultStore(url).close()  # a command that writes upgrades it
    plant(path, f"UPDATE {VERSION_TABLE} SET version_num = '0099'")
    assert_one_line(run(capsys, *QUERY, "--db", url), "newer autotune's schema (revision 0099", "upgrade autotune")


def test_the_runtime_reads_the_users_database_without_writing_it(tmp_path, monkeypatch):
    from autotune.runtime import sources

    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path / "missing.db"))
    store = sources._user_store()
    assert store is not None and store.read_only and store.gpus() == []
    store.close()
    old = tmp_path / "old.db"
    _at_revision(old, "0001")
    before = sha256(old)
    monkeypatch.setenv("AUTOTUNE_DB", str(old))
    assert sources._user_store() is None  # not migrated: the shipped results serve
    assert sha256(old) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.db"]


@pytest.fixture(scope="session")
def postgres(pytestconfig):
    from postgres_server import missing, server_for

    reason = missing()
    if reason:
        pytest.skip(reason)
    return server_for(pytestconfig)


def _tables(url: str) -> list[str]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return sorted(inspect(connection).get_table_names())
    finally:
        engine.dispose()


def test_a_foreign_postgresql_database_is_refused_and_gets_no_tables(postgres, capsys):
    url = postgres.create_database()
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)"))
    engine.dispose()
    for read_only in (True, False):
        with pytest.raises(DatabaseError, match=r"not an autotune results database \(it holds other tables: "
                                                r"customers\)"):
            ResultStore(url, read_only=read_only)
    assert_one_line(run(capsys, *QUERY, "--db", url), "customers", ":***@")
    assert _tables(url) == ["customers"]


def test_reading_an_empty_postgresql_database_creates_nothing(postgres, capsys):
    url = postgres.create_database()
    code, out, err = run(capsys, *QUERY, "--db", url)
    assert code == 0 and "no results" in out, err
    assert postgres.password not in out + err
    assert _tables(url) == []
    with ResultStore(url) as store:  # a command that writes creates the schema
        store.add_measurement(ENV, PROBLEM, None, None, measurement(1.0), "s")
    with ResultStore(url, read_only=True) as store:
        assert store.measurement_count("h200", PROBLEM) == 1
        with store._engine.connect() as connection, pytest.raises(Exception, match="read-only transaction"):
            connection.execute(text("CREATE TABLE notes (body TEXT)"))


# -- 3. no password is printed ----------------------------------------------------------------------------------


@pytest.mark.parametrize("url, shown", [
    (f"postgresql:/u:{SECRET}@db.example/r", "postgresql:/u:***@db.example/r"),
    (f"postgresql//u:{SECRET}@db.example/r", "postgresql//u:***@db.example/r"),
    (f"postgresql:u:{SECRET}@db.example/r", "postgresql:u:***@db.example/r"),
    (f"postgresql://u:{SECRET[:4]}/{SECRET[4:]}@db.example/r", "postgresql://u:***@db.example/r"),
    (f"postgresql://u:{SECRET[:4]}@{SECRET[4:]}@db.example/r", "postgresql://u:***@db.example/r"),
    (f"unrecognized arguments: --db postgresql://u:{SECRET}@h/r --x", "unrecognized arguments: --db "
                                                                     "postgresql://u:***@h/r --x"),
])
def test_passwords_of_mistyped_urls_are_masked(url, shown):
    assert shown_url(url) == shown


def test_a_password_with_a_space_is_masked_where_the_url_is_known():
    url = f"postgresql://u:{SECRET} x@db.example/r"
    assert SECRET not in without_secrets(f"cannot open {url}: password {SECRET} x refused", url)


@pytest.mark.parametrize("args", [
    ["space", "--gpu", "t4", "--shape", "64", "--db", f"postgresql://u:{SECRET}@h/r"],  # space takes no --db
    ["space", "--gpu", "t4", "--shape", "64", f"--db=postgresql://u:{SECRET} x@h/r"],
    ["query", "--gpu", "h200", "--shape", "64", "--db", f"postgresql:/u:{SECRET}@127.0.0.1:9/r"],
    ["query", "--gpu", "h200", "--shape", "64", "--db", f"postgresql//u:{SECRET}@127.0.0.1:9/r"],
    ["query", "--gpu", "h200", "--shape", "64", "--db", f"postgresql://u:{SECRET[:4]}/{SECRET[4:]}@127.0.0.1:9/r"],
    ["results", "export", "--gpu", "h200", "--db", f"postgresql://u:{SECRET}@127.0.0.1:9/r", "--per-problem", "x"],
])
def test_no_message_shows_a_password(capsys, args):
    line = assert_one_line(run(capsys, *args))
    assert SECRET not in line and SECRET[4:] not in line
    assert "***" in line or "postgresql" not in line


# -- 4. text from a database reaches the terminal escaped --------------------------------------------------------


def test_a_planted_gpu_name_is_printed_escaped(tmp_path, capsys):
    path = tmp_path / "r.db"
    url = filled(path)
    plant(path, f"UPDATE environments SET gpu_name = '{PLANTED_NAME}'")
    code, out, err = run(capsys, *QUERY, "--db", url)
    assert code == 0, err
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "NVIDIA H200\\n\\x1b[2J\\x1b]0;owned\\x07\\u202e" in out
    rows = out.splitlines()[3:]
    assert rows and all("NVIDIA H200" in row for row in rows)  # a planted newline starts no line of its own


def test_exports_summary_prints_a_planted_gpu_name_escaped(tmp_path, capsys):
    line = json.loads(SHIPPED_LINE)
    line["environment"]["gpu_name"] = PLANTED_NAME
    crafted = tmp_path / "crafted.jsonl"
    crafted.write_text(json.dumps(line) + "\n")
    url = f"sqlite:///{tmp_path}/r.db"
    assert run(capsys, "results", "import", str(crafted), "--db", url)[0] == 0
    code, out, err = run(capsys, "export", "--gpu", "h200", "--dtype", line["problem"]["dtype"], "--format", "json",
                         "--out", str(tmp_path / "out"), "--db", url)
    assert code == 0, err
    summary = out.splitlines()[0]
    assert summary.startswith("exported json for h200") and "measured on NVIDIA H200" in summary
    assert not any(char in out + err for char in "\x1b\x07\u202e")


def test_an_error_message_is_one_line_whatever_it_quotes(tmp_path, capsys):
    folder = tmp_path / "no\nsuch\x1b[2J"
    line = assert_one_line(run(capsys, *QUERY, "--db", f"{folder}/r.db"), "does not exist")
    assert "\x1b" not in line and "no\\nsuch\\x1b[2J" in line


# -- 5. planted rows are refused in one line naming table, row and field -----------------------------------------


EVERY_READER = (QUERY, ["table", "--gpu", "h200"], ["results", "export", "--gpu", "h200"])
TABLE_READERS = EVERY_READER[1:]  # a query names its problem: it reads no problem row


@pytest.mark.parametrize("statement, fragments, commands", [
    ("UPDATE kernels SET params_json = '{\"BM\": '", ["kernels row", "params_json"], EVERY_READER),
    ("UPDATE kernels SET params_json = '[1, 2]'", ["kernels row", "params_json '[1, 2]'"], EVERY_READER),
    ("UPDATE kernels SET params_json = '{\"BM\": true}'", ["kernels row", "params_json 'BM' True"], EVERY_READER),
    ("UPDATE kernels SET params_json = '" + "[" * 100_000 + "'", ["kernels row", "params_json"], EVERY_READER),
    ("UPDATE measurements SET median_ms = 1e999", ["measurements row", "median_ms inf"], EVERY_READER),
    ("UPDATE measurements SET median_ms = -1.5", ["measurements row", "median_ms -1.5"], EVERY_READER),
    ("UPDATE measurements SET median_ms = 'NaN'", ["measurements row", "median_ms 'NaN'"], EVERY_READER),
    ("UPDATE measurements SET tflops = 'lots'", ["measurements row", "tflops 'lots'"], EVERY_READER),
    ("UPDATE measurements SET created_at = 'yesterday'", ["cannot be read", "yesterday"], EVERY_READER),
    ("UPDATE problems SET alpha = 1e999", ["problems row", "alpha inf"], TABLE_READERS),
    ("UPDATE problems SET m = 99999999", ["problems row", "m, n, k", "32-bit"], TABLE_READERS),
])
def test_planted_rows_are_one_line_naming_table_row_and_field(tmp_path, capsys, statement, fragments, commands):
    path = tmp_path / "r.db"
    url = filled(path)
    plant(path, statement)
    for command in commands:
        line = assert_one_line(run(capsys, *command, "--db", url), "cannot read database", *fragments)
        assert "refused (not skipped)" in line or "cannot be read" in line


def test_planted_samples_and_energy_rows_are_refused(tmp_path, capsys):
    path = tmp_path / "r.db"
    url = filled(path)
    plant(path, "UPDATE measurements SET samples_json = '[0.1, ' WHERE id = 1")
    assert_one_line(run(capsys, "results", "export", "--gpu", "h200", "--db", url), "measurements row 1",
                    "samples_json")
    plant(path, "UPDATE measurements SET samples_json = '[0.1, -3]' WHERE id = 1")
    assert_one_line(run(capsys, "results", "export", "--gpu", "h200", "--db", url), "measurements row 1",
                    "samples_json[1] -3")
    plant(path, "UPDATE energy_windows SET energy_per_gemm_j = 1e999 WHERE id = 1")
    assert_one_line(run(capsys, *QUERY, "--objective", "energy", "--db", url), "energy_windows row 1",
                    "energy_per_gemm_j inf")


# -- 6. bounded input -----------------------------------------------------------------------------------------------


def test_json_nested_100k_deep_in_a_results_file_is_one_line(tmp_path):
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(InputError, match=r"line 1: invalid JSON .*nests too deep"):
        tuned.read(deep)


@pytest.mark.parametrize("read_only", [False, True])
def test_a_url_parameter_the_driver_cannot_take_is_one_line(tmp_path, read_only):
    url = f"sqlite:///{tmp_path}/x.db?timeout=abc"
    with pytest.raises(DatabaseError, match=r"^cannot open database '.*x.db\?timeout=abc': a URL parameter it "
                                            r"cannot take \(could not convert string to float: 'abc'\)$"):
        ResultStore(url, read_only=read_only)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, fragment", [
    (QUERY + ["--limit", "99999999999999999999"], "invalid --limit 99999999999999999999: expected a number > 0 "
                                               "(an integer, at most 100000)"),
    (QUERY + ["--limit", "0"], "invalid --limit 0"),
    (QUERY + ["--limit", "ten"], "invalid --limit 'ten'"),
    (["search", "--gpu", "h200", "--shape", "64", "--timeout", "nan"], "invalid --timeout nan: expected a number of "
                                                                         "seconds > 0"),
    (["search", "--gpu", "h200", "--shape", "64", "--timeout", "inf"], "invalid --timeout inf"),
    (["search", "--gpu", "h200", "--shape", "64", "--timeout", "-1"], "invalid --timeout -1.0"),
    (["search", "--gpu", "h200", "--shape", "64", "--repeats", "1e8"], "invalid --repeats '1e8'"),
    (["search", "--gpu", "h200", "--shape", "64", "--repeats", "100000000"], "invalid --repeats 100000000"),
    (["search", "--gpu", "h200", "--shape", "64", "--trials", "9" * 5000], "invalid --trials '9999"),
    (["search", "--gpu", "h200", "--shape", "64", "--seed", "-1"], "invalid --seed -1: expected a number >= 0"),
    (["search", "--gpu", "h200", "--shape", "64", "--device", "-1"], "invalid --device -1: expected a CUDA device "
                                                                       "index >= 0"),
    (["search", "--gpu", "h200", "--shape", "64", "--jobs", "1000000"], "invalid --jobs 1000000"),
    (["search", "--gpu", "h200", "--shape", "64", "--workers", "0"], "invalid --workers 0"),
    (["sweep", "--gpu", "h200", "--shapes", "llm", "--top", "-1"], "invalid --top -1"),
    (["sweep", "--gpu", "h200", "--shapes", "llm", "--timeout", "nan"], "invalid --timeout nan"),
    (["ladder", "--gpu", "h200", "--shape", "64", "--repeats", "100000000"], "invalid --repeats 100000000"),
    (["table", "--gpu", "h200", "--max-kernels", "1e3"], "invalid --max-kernels '1e3'"),
    (["results", "export", "--gpu", "h200", "--per-problem", "-5"], "invalid --per-problem -5"),
])
def test_numeric_options_are_finite_and_in_range(capsys, args, fragment):
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(args)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and fragment in err, err
    assert len(err) < 300


def test_numeric_options_in_range_are_taken():
    args = build_parser().parse_args(["search", "--gpu", "h200", "--shape", "64", "--timeout", "1.5", "--seed",
                                      str(2**32 - 1), "--repeats", "10000", "--device", "3", "--jobs", "1"])
    assert (args.timeout, args.seed, args.repeats, args.device, args.jobs) == (1.5, 2**32 - 1, 10_000, 3, 1)
    assert build_parser().parse_args(["search", "--gpu", "h200", "--shape", "64"]).timeout is None


# -- 7. the runtime's operands --------------------------------------------------------------------------------------


def test_numpy_arrays_are_one_clear_error_saying_what_to_pass():
    import autotune

    a = numpy.ones((64, 64), numpy.float32)
    for call in (autotune.gemm, autotune.matmul, autotune.explain):
        with pytest.raises(InputError) as info:
            call(a, a)
        assert str(info.value) == ("invalid a 'numpy.ndarray (host memory)': expected a GPU array: cupy.asarray(x) "
                                   "copies a NumPy array to the GPU")


def test_an_out_that_overlaps_a_or_b_is_refused():
    from test_runtime import small_table

    from autotune.runtime import Runtime
    from autotune.runtime.devices import HostDevice

    device = HostDevice()
    rt = Runtime(device, (small_table(), "test table"))
    a, b = numpy.ones((64, 64), numpy.float32), numpy.full((64, 64), 2, numpy.float32)
    block = numpy.ones((128, 64), numpy.float32)
    for out, name in ((a, "a"), (b, "b"), (a[::-1], "a"), (a.T, "a")):
        with pytest.raises(InputError, match=f"invalid out 'an array sharing memory with {name}'"):
            rt.gemm(a, b, out=out)
        with pytest.raises(InputError, match="shares no memory with a or b"):
            rt.explain(a, b, out=out)
    assert device.calls == []
    rt.gemm(block[:64], b, out=block[64:])  # the same buffer, other elements
    assert numpy.all(block[64:] == 128)


# -- 8. --db takes a path, as $AUTOTUNE_DB does ----------------------------------------------------------------------


def test_db_takes_a_path_the_way_autotune_db_does(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    one = tmp_path / "one.jsonl"
    one.write_text(SHIPPED_LINE + "\n")
    line = json.loads(SHIPPED_LINE)
    shape = "x".join(str(line["problem"][axis]) for axis in "mnk")
    code, out, err = run(capsys, "results", "import", str(one), "--db", "results.db")
    assert code == 0 and "sqlite:///results.db" in out, err
    assert (tmp_path / "results.db").exists()
    query = ["query", "--gpu", "h200", "--shape", shape, "--dtype", line["problem"]["dtype"]]
    by_path = run(capsys, *query, "--db", "results.db")
    monkeypatch.setenv("AUTOTUNE_DB", "results.db")
    assert run(capsys, *query) == by_path and by_path[0] == 0 and "best configs" in by_path[1]
    assert database_url("~/r.db") == "sqlite:///" + str(Path.home() / "r.db")
    assert database_url("C:/r.db") == "sqlite:///C:/r.db"


@pytest.mark.parametrize("value", ["sqlite:results.db", f"postgresql:/u:{SECRET}@h/r"])
def test_a_value_that_starts_like_a_url_but_is_not_one_is_refused(capsys, monkeypatch, value):
    line = assert_one_line(run(capsys, *QUERY, "--db", value), "--db", "a database URL", "./NAME")
    assert SECRET not in line
    monkeypatch.setenv("AUTOTUNE_DB", value)
    assert_one_line(run(capsys, *QUERY), "$AUTOTUNE_DB")
