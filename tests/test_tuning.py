"""Tuning on a miss, on the host device: a shape the table was not tuned at is queued, searched in the
background while calls go on, and the table built again from the results database serves it afterwards."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy
import pytest

from autotune.cli import build_parser
from autotune.results import ResultStore
from autotune.results.files import import_file
from autotune.runtime import Runtime
from autotune.runtime.devices import HostDevice
from autotune.runtime.tuning import Tuner, TuningSettings, search_commands
from autotune.shapes import read_shapes
from autotune.select.kernel_table import KernelTable

DATA = Path(__file__).parent / "data" / "h200-v1.jsonl"
MISSED = (1536, 1536, 1536)  # between the f32 shapes tests/data tuned: served by the nearest one's kernel


def _rows_at(shape: tuple[int, int, int], speedup: float) -> list[dict]:
    """tests/data's f32 2048^3 results as if measured at ``shape``: cuBLAS as measured, each kernel
    ``speedup`` times faster."""
    m, n, k = shape
    rows = []
    for line in DATA.read_text().splitlines():
        row = json.loads(line)
        problem = row["problem"]
        if (problem["dtype"], problem["m"], problem["n"], problem["k"]) != ("f32", 2048, 2048, 2048):
            continue
        problem.update(m=m, n=n, k=k)
        row["study"] = row["study"].replace("2048x2048x2048", f"{m}x{n}x{k}")
        if row["family"] is not None:
            row["timing_ms"] = {key: ([v / speedup for v in value] if isinstance(value, list) else value / speedup)
                                for key, value in row["timing_ms"].items()}
        rows.append(row)
    return rows


@pytest.fixture
def user_db(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path}/results.db"
    monkeypatch.setenv("AUTOTUNE_DB", url)
    monkeypatch.delenv("AUTOTUNE_TABLE", raising=False)
    with ResultStore(url) as store:
        import_file(store, DATA)
    return url


def _matrices(shape):
    m, n, k = shape
    rng = numpy.random.default_rng(0)
    return rng.standard_normal((m, k)).astype(numpy.float32), rng.standard_normal((k, n)).astype(numpy.float32)


def test_a_missed_shape_is_searched_in_the_background_and_served_afterwards(user_db, tmp_path):
    results = tmp_path / "tuned.jsonl"
    results.write_text("".join(json.dumps(row) + "\n" for row in _rows_at(MISSED, speedup=1.5)))
    gate = tmp_path / "gate"
    wait_for_gate = ("import pathlib, sys, time\n"
                     "for _ in range(1200):\n"
                     f"    if pathlib.Path({str(gate)!r}).exists(): sys.exit(0)\n"
                     "    time.sleep(0.05)\n"
                     "sys.exit(3)")

    def commands(dtype, shape, layout):  # the search, played by an import of results measured at the shape
        assert (dtype, shape, layout) == ("f32", MISSED, "row")
        return [[sys.executable, "-c", wait_for_gate],
                [sys.executable, "-m", "autotune", "results", "import", str(results), "--db", user_db]]

    runtime = Runtime(HostDevice(), tuning=TuningSettings(trials=5, timeout_s=30), commands=commands)
    a, b = _matrices(MISSED)
    before = runtime.explain(a, b)
    assert before.missed and "nearest tuned shape" in before.reason
    for _ in range(3):  # the search is held at its gate: every call runs, as the nearest tuned shape says
        numpy.testing.assert_allclose(runtime.gemm(a, b), a @ b, rtol=1e-3, atol=1e-3)
    assert runtime.tuner.requested == [("f32", MISSED, "row")] and runtime.tuner.finished == []
    gate.touch()
    assert runtime.tuner.wait(120)
    assert runtime.tuner.finished == [("f32", MISSED, "row", 0)]
    assert ("warm", runtime.explain(a, b).kernel.name) in runtime.device.calls  # loaded before a call needs it
    after = runtime.explain(a, b)
    assert not after.missed and not after.uses_cublas and after.reason.startswith("tuned at this shape")
    assert after.rule.shape == MISSED and before.rule.shape != MISSED
    numpy.testing.assert_allclose(runtime.gemm(a, b), a @ b, rtol=1e-3, atol=1e-3)
    assert runtime.device.calls[-1] == ("kernel", after.kernel.name, after.kernel.launch.grid_for(*MISSED))
    # a process started later reads the same database: the shape is tuned there from the start
    assert not Runtime(HostDevice()).explain(a, b).missed


def test_a_shape_is_asked_for_once_and_the_budget_of_searches_holds(tmp_path):
    ran = []

    def commands(dtype, shape, layout):
        ran.append((dtype, shape, layout))
        return [[sys.executable, "-c", "pass"]]

    tuner = Tuner(TuningSettings(max_searches=3), commands, lambda dtype, shape, layout: None, tmp_path / "tuning.log")
    assert tuner.request("f32", (10, 20, 30)) and not tuner.request("f32", (10, 20, 30), "row")
    assert tuner.request("f16", (10, 20, 30)) and tuner.request("f16", (10, 20, 30), "nt")
    assert not tuner.request("f32", (1, 2, 3))
    assert tuner.wait(60)
    assert sorted(ran) == [("f16", (10, 20, 30), "nt"), ("f16", (10, 20, 30), "row"), ("f32", (10, 20, 30), "row")]
    assert len(tuner.finished) == 3


def test_a_failing_search_is_logged_and_the_table_is_kept(tmp_path):
    tuned = []
    tuner = Tuner(TuningSettings(),
                  lambda dtype, shape, layout: [[sys.executable, "-c", "print('no GPU'); raise SystemExit(4)"]],
                  lambda dtype, shape, layout: tuned.append(shape), tmp_path / "tuning.log")
    tuner.request("f32", (64, 64, 64))
    assert tuner.wait(60)
    assert tuner.finished == [("f32", (64, 64, 64), "row", 4)] and tuned == [(64, 64, 64)]
    log = (tmp_path / "tuning.log").read_text()
    assert "no GPU" in log and "exit code 4" in log


def test_tuning_is_off_unless_asked_for_and_off_with_a_loaded_table(monkeypatch):
    monkeypatch.delenv("AUTOTUNE_TUNE", raising=False)
    assert TuningSettings.from_environment() is None
    monkeypatch.setenv("AUTOTUNE_TUNE", "0")
    assert TuningSettings.from_environment() is None
    monkeypatch.setenv("AUTOTUNE_TUNE", "1")
    assert TuningSettings.from_environment() == TuningSettings()
    with pytest.warns(RuntimeWarning, match="table file loaded"):
        runtime = Runtime(HostDevice(), (KernelTable(arch="sm_90", gpu="h200", measured_on=(), dtypes={}), "a file"),
                          tuning=TuningSettings())
    assert runtime.tuner is None


@pytest.mark.parametrize("layout", ["row", "nt"])
def test_the_search_commands_are_ones_the_command_line_takes(layout):
    parser = build_parser()
    commands = search_commands("f16", (77, 4096, 14336), 1, "sqlite:////tmp/r.db", TuningSettings(trials=30), layout)
    assert [command[3] for command in commands] == ["results", "search", "retime"]
    parsed = []
    for command in commands:
        assert command[:3] == [sys.executable, "-m", "autotune"]
        parsed.append(parser.parse_args(command[3:]))
    _, search, retime = parsed
    assert (search.shape, search.trials, search.device, search.gpu, search.layout) == (
        "77x4096x14336", 30, 1, "auto", layout)
    assert (read_shapes(retime.shapes), retime.dtype, retime.device, retime.gpu, retime.layout, retime.db) == (
        [(77, 4096, 14336)], "f16", 1, "auto", layout, "sqlite:////tmp/r.db")


def test_only_layouts_a_family_is_meant_to_serve_are_searched_on_a_miss():
    from autotune.runtime.tuning import searchable

    assert searchable("f16", "nt") and searchable("bf16", "nt") and searchable("f32", "row")
    assert not searchable("f32", "nt")  # only the naive teaching family stores B transposed in f32


@pytest.mark.parametrize("settings, fragment", [
    (dict(trials=0), "trials"), (dict(trials=2.5), "whole numbers"), (dict(timeout_s=-1), "timeout_s"),
    (dict(max_searches=0), "max_searches"), (dict(timeout_s="60"), "timeout_s"), (dict(trials=True), "trials"),
])
def test_a_budget_that_cannot_run_is_one_clear_error(settings, fragment):
    from autotune.errors import InputError

    with pytest.raises(InputError, match=fragment) as raised:
        TuningSettings(**settings)
    assert "\n" not in str(raised.value)


def test_a_miss_of_b_stored_transposed_is_queued_with_its_layout(user_db, tmp_path):
    """``x @ W.T`` at a shape no nt kernel was tuned for is searched with ``--layout nt``; f32, which no family
    but the naive one serves that way, is not searched."""
    asked = []
    runtime = Runtime(HostDevice(), tuning=TuningSettings(trials=5, timeout_s=30),
                      commands=lambda dtype, shape, layout: asked.append((dtype, shape, layout)) or [])
    rng = numpy.random.default_rng(1)
    for dtype in (numpy.float16, numpy.float32):
        x, weight = rng.standard_normal((48, 40)).astype(dtype), rng.standard_normal((24, 40)).astype(dtype)
        assert runtime.explain(x, weight.T).missed
        numpy.testing.assert_allclose(runtime.gemm(x, weight.T), x.astype(numpy.float32) @ weight.T.astype(numpy.float32),
                                      rtol=2e-2, atol=2e-2)
    assert runtime.tuner.wait(60)
    assert runtime.tuner.requested == [("f16", (48, 24, 40), "nt")] and asked == [("f16", (48, 24, 40), "nt")]
