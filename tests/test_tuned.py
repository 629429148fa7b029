"""Tuned results as JSON lines: format versions, checked values, all-or-nothing imports, lossless exports."""

import io
import json
from pathlib import Path

import pytest
from conftest import autotune
from results_data import ENV, PROBLEM, fill, snapshot

from autotune.data_files import data_dir
from autotune.errors import DatabaseError, InputError
from autotune.gpu_specs import gpu_spec
from autotune.records import Measurement, Resources, Timing
from autotune.results import FailureEntry, ResultStore, bulk
from autotune.results import files as tuned
from autotune.results import rows as rows_module
from autotune.space.family import load_space

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "tuned_db" / "h200.jsonl"
V1 = ROOT / "tests" / "data" / "h200-v1.jsonl"  # the version-1 lines the shipped file begins with


def _measurement(ms):
    timing = Timing(ms, ms * 0.9, ms * 1.2, ms * 0.95, ms * 1.05, (ms * 0.9, ms, ms * 1.2))
    return Measurement(timing, PROBLEM.tflops(ms), 0.1, 1980, 0, 50, Resources(128, 16640, 0, 0, 0, 0))


def _store(tmp_path, name):
    return ResultStore(f"sqlite:///{tmp_path / name}")


def _export(store, per_problem=None):
    text = io.StringIO()
    written = tuned.export(store, "h200", text, per_problem)
    return text.getvalue(), written


def _write(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _v1_line():
    """A version-1 line from the shipped file: an sgemm candidate, no schema_version."""
    return json.loads(SHIPPED.read_text().splitlines()[1])


@pytest.fixture(scope="module")
def v2_text(tmp_path_factory):
    """The full export of :func:`results_data.fill`: version-2 lines."""
    source = _store(tmp_path_factory.mktemp("v2"), "source.db")
    fill(source)
    return _export(source)[0]


def _v2_lines(text):
    """A version-2 measurement with energy windows, and a version-2 failure (fresh copies)."""
    lines = [json.loads(line) for line in text.splitlines()]
    measurement = next(line for line in lines if line["kind"] == "measurement" and line["energy_windows"])
    failure = next(line for line in lines if line["kind"] == "failure")
    return measurement, failure


def test_export_per_problem_keeps_the_fastest_kernels_and_every_cublas_row(tmp_path):
    space = load_space("sgemm")
    source = _store(tmp_path, "a.db")
    for i, seed in enumerate(space.seeds[:4]):
        source.add_measurement(ENV, PROBLEM, seed, space.template_hash, _measurement(1.0 + i), "s")
        source.add_measurement(ENV, PROBLEM, seed, space.template_hash, _measurement(5.0 + i), "s")  # slower repeat
    source.add_measurement(ENV, PROBLEM, None, None, _measurement(0.9), "s")
    source.add_measurement(ENV, PROBLEM, None, None, _measurement(0.8), "s")  # a newer reference: both are kept

    text, written = _export(source, per_problem=3)
    lines = [json.loads(line) for line in text.splitlines()]
    assert [line["family"] for line in lines[:2]] == [None, None]
    assert [line["timing_ms"]["median"] for line in lines] == [0.9, 0.8, 1.0, 2.0, 3.0]
    assert {line["schema_version"] for line in lines} == {tuned.SCHEMA_VERSION}
    assert (written.left_out_measurements, written.left_out_failures) == (5, 0)

    path = tmp_path / "h200.jsonl"
    path.write_text(text)
    target = _store(tmp_path, "b.db")
    first, = tuned.import_files(target, [path])
    assert (first.measurements_added, first.measurements_present) == (5, 0)
    again, = tuned.import_files(target, [path])
    assert (again.measurements_added, again.measurements_present) == (0, 5)  # idempotent
    assert tuned.import_file(target, path) == (0, 5)
    assert [r.config_name for r in target.best("h200", PROBLEM)] == [s.name for s in space.seeds[:3]]
    assert target.best("h200", PROBLEM)[0].cublas_median_ms == pytest.approx(0.85)  # both references count


def test_full_export_round_trip_is_lossless(tmp_path):
    source = _store(tmp_path, "a.db")
    fill(source)
    text, written = _export(source)
    assert (written.left_out_measurements, written.left_out_energy_windows, written.left_out_failures) == (0, 0, 0)
    kinds = [json.loads(line)["kind"] for line in text.splitlines()]
    assert (kinds.count("measurement"), kinds.count("failure")) == (9, 3)
    path = tmp_path / "all.jsonl"
    path.write_text(text)

    target = _store(tmp_path, "b.db")
    report, = tuned.import_files(target, [path])
    assert (report.measurements_added, report.energy_windows_added, report.failures_added) == (9, 3, 3)
    assert _export(target)[0] == text
    assert snapshot(target) == snapshot(source)
    again, = tuned.import_files(source, [path])  # into the database it came from: all there already
    assert (again.measurements_added, again.measurements_present, again.energy_windows_added,
            again.failures_added, again.failures_present) == (0, 9, 0, 0, 3)


def test_the_shipped_h200_results_load_and_rank():
    """The version-1 H200 results (SGEMM and HGEMM searches at square shapes), loadable with no GPU."""
    entries = tuned.read(V1)
    shapes = {(entry.problem.m, entry.problem.n, entry.problem.k, entry.problem.dtype) for entry in entries}
    assert {(n, n, n, "f32") for n in (1024, 2048, 4096, 8192)} <= shapes
    assert {(n, n, n, "f16") for n in (1024, 4096)} <= shapes
    h200 = gpu_spec("h200")
    for entry in entries:
        assert entry.environment.gpu_key == "h200" and entry.measurement.max_error <= 1.0
        if entry.kernel is not None:
            space = load_space(entry.kernel.family)
            assert space.dtype == entry.problem.dtype
            assert space.check(space.config(dict(entry.kernel.params)), h200).feasible, entry.kernel.name


def test_shipped_files_are_found_as_package_data():
    assert SHIPPED in sorted(data_dir("tuned_db").glob("*.jsonl"))


def test_a_version_1_file_and_its_version_2_export_are_the_same_results(tmp_path):
    store = _store(tmp_path, "a.db")
    report, = tuned.import_files(store, [V1])
    assert report.measurements_added == len(V1.read_text().splitlines())
    exported = tmp_path / "v2.jsonl"
    exported.write_text(_export(store)[0])
    other = _store(tmp_path, "b.db")
    tuned.import_files(other, [exported])
    again, = tuned.import_files(other, [V1])  # the version-1 lines are the same results
    assert (again.measurements_added, again.measurements_present) == (0, report.measurements_added)


def test_a_newer_schema_version_is_refused(tmp_path):
    line = _v1_line()
    line["schema_version"] = tuned.SCHEMA_VERSION + 1
    path = _write(tmp_path / "future.jsonl", [_v1_line(), line])
    with pytest.raises(tuned.ResultsFileError) as info:
        tuned.read(path)
    assert str(info.value) == (f"{path} line 2: invalid schema_version 3: expected at most 2: the file is from a "
                               "newer autotune, upgrade to import it")


BAD_VALUES = [
    # (field path, bad value, the message's field, what the message must say is expected)
    (("timing_ms", "median"), -1.0, "timing_ms.median", "a finite number > 0"),
    (("timing_ms", "median"), 0, "timing_ms.median", "a finite number > 0"),
    (("timing_ms", "median"), float("inf"), "timing_ms.median", "a finite number > 0"),
    (("timing_ms", "min"), float("nan"), "timing_ms.min", "a finite number > 0"),
    (("timing_ms", "max"), "slow", "timing_ms.max", "a finite number > 0"),
    (("timing_ms", "q25"), 99.0, "timing_ms", "min <= q25 <= median <= q75 <= max"),
    (("timing_ms", "samples"), [], "timing_ms.samples", "a non-empty list"),
    (("timing_ms", "samples"), [1.0, -2.0], "timing_ms.samples[1]", "a finite number > 0"),
    (("tflops",), float("-inf"), "tflops", "a finite number > 0"),
    (("max_error",), -0.5, "max_error", "a finite number >= 0"),
    (("problem", "alpha"), "one", "problem.alpha", "a finite number"),
    (("problem", "alpha"), True, "problem.alpha", "a finite number"),
    (("problem", "beta"), None, "problem.beta", "a finite number"),
    (("problem", "beta"), float("inf"), "problem.beta", "a finite number"),
    (("problem", "dtype"), "f64", "problem.dtype", "f32, f16, bf16"),
    (("problem", "m"), 0, "problem.m", "an integer from 1 to 2147483647"),
    (("problem", "k"), 512.5, "problem.k", "an integer from 1"),
    (("problem", "n"), 2**31, "problem.n", "an integer from 1 to 2147483647"),
    (("environment", "gpu_key"), "", "environment.gpu_key", "a string of 1 to 64 characters"),
    (("environment", "driver"), 580, "environment.driver", "a string of 1 to 64 characters"),
    (("family",), "no_such_family", "family", "a kernel family"),
    (("params", "BM"), 7, "params.BM", "16, 32, 64, 128, 256"),
    (("params", "BM"), 128.9, "params.BM", "an integer"),
    (("params", "BM"), "128", "params.BM", "an integer"),
    (("params", "NO_SUCH_KNOB"), 1, "params", "BM"),
    (("template_hash",), 12, "template_hash", "a string of 1 to 64 characters"),
    (("resources", "registers"), -1, "resources.registers", "an integer from 0"),
    (("sm_clock_mhz",), 1980.5, "sm_clock_mhz", "an integer from 0"),
    (("measured_at",), "yesterday", "measured_at", "an ISO 8601 time"),
    (("study",), ["a"], "study", "a string of at most 255 characters or null"),
    (("colour",), "blue", "colour", "only the fields environment, problem"),
]


@pytest.mark.parametrize("path, value, field, expected", BAD_VALUES, ids=[".".join(case[0]) + f"={case[1]!r}"
                                                                          for case in BAD_VALUES])
def test_a_bad_value_is_one_line_naming_line_field_and_value(tmp_path, path, value, field, expected):
    bad = _v1_line()
    target = bad
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    file = _write(tmp_path / "bad.jsonl", [_v1_line(), _v1_line(), bad])
    with pytest.raises(tuned.ResultsFileError) as info:
        tuned.read(file)
    message = str(info.value)
    assert message.startswith(f"{file} line 3: invalid {field} ")
    assert f"expected {expected}" in message
    assert "\n" not in message and (info.value.line, info.value.field) == (3, field)


def test_a_missing_field_is_named(tmp_path):
    bad = _v1_line()
    del bad["timing_ms"]
    with pytest.raises(tuned.ResultsFileError, match=r"line 1: missing timing_ms: expected every field"):
        tuned.read(_write(tmp_path / "bad.jsonl", [bad]))
    bad = _v1_line()
    del bad["measured_at"]
    with pytest.raises(tuned.ResultsFileError, match=r"line 1: missing measured_at: expected every field"):
        tuned.read(_write(tmp_path / "bad.jsonl", [bad]))


def test_version_1_lines_may_leave_null_fields_out(tmp_path):
    line = _v1_line()
    for name in ("sm_clock_mhz", "throttle_reasons", "temperature_c", "resources", "study"):
        del line[name]
    entry, = tuned.read(_write(tmp_path / "short.jsonl", [line]))
    assert (entry.measurement.sm_clock_mhz, entry.measurement.resources, entry.study) == (None, None, None)


@pytest.mark.parametrize("mutate, field, expected", [
    (lambda line: line["energy_windows"][0].update(seconds=0), "energy_windows[0].seconds", "a finite number > 0"),
    (lambda line: line["energy_windows"][0].update(throttled="no"), "energy_windows[0].throttled", "true or false"),
    (lambda line: line["energy_windows"][0].update(launches=2.5), "energy_windows[0].launches", "an integer from 1"),
    (lambda line: line.update(energy_windows={}), "energy_windows", "a list of energy windows"),
    (lambda line: line.update(kind="benchmark"), "kind", "'measurement' or 'failure'"),
    (lambda line: line.update(schema_version="2"), "schema_version", "an integer from 1 to 2"),
    (lambda line: line.pop("energy_windows"), "energy_windows", "every field"),
], ids=["seconds", "throttled", "launches", "windows", "kind", "version", "missing"])
def test_version_2_measurement_checks(tmp_path, v2_text, mutate, field, expected):
    line, _ = _v2_lines(v2_text)
    mutate(line)
    with pytest.raises(tuned.ResultsFileError) as info:
        tuned.read(_write(tmp_path / "bad.jsonl", [line]))
    assert info.value.field == field and f"expected {expected}" in str(info.value)


@pytest.mark.parametrize("mutate, field, expected", [
    (lambda line: line.update(failure_class="exploded"), "failure_class", "one of rejected, compile_error"),
    (lambda line: line.update(message=None), "message", "a string"),
    (lambda line: line.update(failed_at=17), "failed_at", "an ISO 8601 time"),
    (lambda line: line.update(family=None), "params", "null for the cuBLAS reference"),
], ids=["class", "message", "failed_at", "params_without_family"])
def test_version_2_failure_checks(tmp_path, v2_text, mutate, field, expected):
    _, line = _v2_lines(v2_text)
    mutate(line)
    with pytest.raises(tuned.ResultsFileError) as info:
        tuned.read(_write(tmp_path / "bad.jsonl", [line]))
    assert info.value.field == field and f"expected {expected}" in str(info.value)


def test_not_json_and_unreadable_files(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(_v1_line()) + "\n{not json\n")
    with pytest.raises(tuned.ResultsFileError, match=r"line 2: invalid JSON '\{not json': expected one JSON object"):
        tuned.read(bad)
    bad.write_text("[1, 2]\n")
    with pytest.raises(tuned.ResultsFileError, match=r"line 1: invalid line \[1, 2\]: expected a JSON object"):
        tuned.read(bad)
    with pytest.raises(InputError, match="readable UTF-8 file"):
        tuned.read(tmp_path / "missing.jsonl")


def test_an_import_with_a_bad_line_adds_nothing(tmp_path):
    good = _write(tmp_path / "good.jsonl", [_v1_line()])
    bad_line = _v1_line()
    bad_line["problem"]["alpha"] = "x"
    bad = _write(tmp_path / "bad.jsonl", [_v1_line(), json.loads(SHIPPED.read_text().splitlines()[2]), bad_line])
    store = _store(tmp_path, "results.db")
    with pytest.raises(tuned.ResultsFileError, match="line 3: invalid problem.alpha 'x'"):
        tuned.import_files(store, [good, bad])
    assert store.problems("h200", "f32") == []


def test_an_import_that_fails_in_the_database_adds_nothing(tmp_path, monkeypatch):
    store = _store(tmp_path, "results.db")
    real = rows_module.measurement_row
    calls = []
    failing = bulk.BATCH + 3  # the first batch of rows is in the database by then

    def fail_on_the_third_of_the_second_batch(entry, *args):
        calls.append(entry)
        if len(calls) == failing:
            raise DatabaseError("disk on fire")
        return real(entry, *args)

    monkeypatch.setattr(rows_module, "measurement_row", fail_on_the_third_of_the_second_batch)
    with pytest.raises(DatabaseError, match="disk on fire"):
        tuned.import_files(store, [SHIPPED])
    monkeypatch.undo()
    assert len(calls) == failing
    assert store.problems("h200", "f32") == [] and store.problems("h200", "f16") == []


def test_failures_keep_their_class_and_message(tmp_path):
    source = _store(tmp_path, "a.db")
    fill(source)
    failures = [entry for entry in source.export_entries("h200").entries if isinstance(entry, FailureEntry)]
    assert sorted((entry.failure.failure_class, entry.failure.message) for entry in failures) == [
        ("crash", "cuBLAS worker died"), ("timeout", "no answer in 10 s"), ("wrong_answer", "max error 3.5 > 1")]


def test_cli_import_shipped_export_and_a_bad_file(tmp_path):
    db = f"sqlite:///{tmp_path / 'results.db'}"
    first = autotune("results", "import", "--shipped", "--db", db, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    count = len(SHIPPED.read_text().splitlines())
    assert f"h200.jsonl: {count} measurements added, 0 already present" in first.stdout
    second = autotune("results", "import", "--shipped", "--db", db, cwd=tmp_path)
    assert f"h200.jsonl: 0 measurements added, {count} already present" in second.stdout

    exported = autotune("results", "export", "--gpu", "h200", "--db", db, "--per-problem", "1", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    assert "left out by --per-problem 1:" in exported.stderr

    bad_line = _v1_line()
    bad_line["problem"]["alpha"] = "not a number"
    bad = _write(tmp_path / "bad.jsonl", [bad_line])
    refused = autotune("results", "import", str(bad), "--db", db, cwd=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        f"autotune: error: {bad} line 1: invalid problem.alpha 'not a number': expected a finite number"]


def test_line_of_writes_what_read_reads(tmp_path):
    source = _store(tmp_path, "a.db")
    fill(source)
    entries = source.export_entries("h200").entries
    path = _write(tmp_path / "lines.jsonl", [tuned.line_of(entry) for entry in entries])
    assert tuned.read(path) == entries
