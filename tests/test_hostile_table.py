"""Hostile and careless inputs to the kernel table: table files, planted results, export destinations.

Each is refused in one line (exit 2 on the command line) or served safely; never a traceback, a table
that fails at its first call, a number C cannot compile, or a file written through a symbolic link.
"""

import json
import math
import sqlite3
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.errors import AutotuneError, InputError
from autotune.export.files import write_files
from autotune.gpu_specs import GPUS
from autotune.kernel.contract import LaunchContract
from autotune.problem import GemmProblem
from autotune.records import Environment, Measurement, Timing
from autotune.results import ResultStore
from autotune.results.store import BestRow
from autotune.select.kernel_table import DtypeTable, KernelTable, TableError, TableKernel, TableRule, read_table
from autotune.select.selection import build_table, gather, ignored_environments
from autotune.space.family import load_space

H200 = GPUS["h200"]
ENV = Environment("h200", "NVIDIA H200", "sm_90", "580", "13.0", "13.0", "14.2.0")


def cli(capsys, *args: str) -> tuple[int, str, str]:
    """``autotune ARGS`` in this process: exit code, stdout, stderr."""
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line(code: int, err: str, *fragments: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def seed(**knobs):
    space = load_space("sgemm")
    return next(s for s in space.seeds if all(s.as_dict()[k] == v for k, v in knobs.items()))


def add(store, problem, config, ms, env=ENV):
    timing = Timing(ms, ms, ms, ms, ms, (ms,))
    store.add_measurement(env, problem, config, "h", Measurement(timing, problem.tflops(ms), 0.1), "s")


def square(n):
    return GemmProblem(n, n, n)


# -- autotune table --json: every pick it reports has a name ---------------------------------------------


def test_table_json_names_a_leave_one_out_pick_that_is_not_one_of_the_tables_kernels(tmp_path, capsys):
    """With one kernel allowed, the table keeps y (measured at both shapes); the table built without 2048^3
    keeps x, so 2048^3's held-out pick is a kernel the table does not hold."""
    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    x, y = seed(BM=128, BN=128, BK=8), seed(BM=64, BN=64)
    add(store, square(1024), x, 1.0)
    add(store, square(1024), y, 1.1)
    add(store, square(2048), y, 1.0)
    code, out, err = cli(capsys, "table", "--gpu", "h200", "--db", store.url, "--max-kernels", "1", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert [k["config"] for k in data["kernels"]] == [y.name]
    held = {h["shape"]: h for h in data["held_out"]["shapes"]}
    assert held["2048x2048x2048"]["pick"] == x.name and held["2048x2048x2048"]["kernel"] is None
    assert held["1024x1024x1024"]["kernel"] == "k1"
    code, out, err = cli(capsys, "table", "--gpu", "h200", "--db", store.url, "--max-kernels", "1")
    assert code == 0 and f"{x.name} from 1024x1024x1024: not measured here" in out, err


def test_table_json_names_the_build_for_any_shape_of_a_kernel_built_for_whole_tiles(tmp_path, capsys):
    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    space = load_space("sgemm")
    whole = space.for_problem(seed(BM=128, BN=128, BK=8), H200, square(4096))
    assert whole["WHOLE_TILES"] == 1
    add(store, square(4096), whole, 2.7)
    add(store, GemmProblem(4000, 4096, 4096), space.for_any_problem(whole), 2.6)  # rows cut: N or K cut is cuBLAS
    shapes = tmp_path / "held.txt"
    shapes.write_text("4000x4096x4096\n")
    code, out, err = cli(capsys, "table", "--gpu", "h200", "--db", store.url, "--hold-out", str(shapes), "--json")
    assert code == 0, err
    [held] = json.loads(out)["held_out"]["shapes"]
    assert held["pick"] == space.for_any_problem(whole).name and held["kernel"] == "k1-any"
    assert held["fraction_of_best"] == 1.0


# -- table files: every expression and number checked at load ---------------------------------------------


def small_table(grid=("cdiv(N, 64)", "cdiv(M, 64)", "1"), k_tiles="cdiv(K, 8)") -> KernelTable:
    launch = LaunchContract(entry="k", target="sm_90", block=(256, 1, 1), grid=grid, dynamic_smem=0, opt_in=False,
                            k_tiles=k_tiles)
    kernel = TableKernel(name="k", family="sgemm", params={}, template_hash="0" * 16, launch=launch)
    rule = TableRule(4096, 4096, 4096, "k", ms=2.8, cublas_ms=2.7, measured_on="NVIDIA H200")
    return KernelTable(arch="sm_90", gpu="h200", measured_on=("NVIDIA H200",),
                       dtypes={"f32": DtypeTable((kernel,), (rule,), 132)})


def written(tmp_path: Path, data) -> Path:
    path = tmp_path / "t.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


@pytest.mark.parametrize("field, text, fragment", [
    ("grid", "M #", "comment"),
    ("grid", "cdiv(M, 0)", "divides by a value that can be 0"),
    ("grid", "M // (N - 1)", "divides by a value that can be 0"),
    ("grid", "(M - 5) % 3", "divides a value that can be -4"),
    ("grid", " * ".join(["M"] * 200), "nested more than"),
    ("grid", "M * N * K * M * N", "beyond the 64-bit range"),
    ("grid", "M - 10", "below 1"),
    ("k_tiles", "M * N * K * M * N * K", "beyond the 64-bit range"),
    ("serves", "min(M, N, K)", "of two values"),
    ("grid", "cdiv", "may only be called"),
])
def test_a_table_file_with_an_expression_it_cannot_evaluate_is_refused_at_load(tmp_path, field, text, fragment):
    data = small_table().to_dict()
    launch = data["dtypes"]["f32"]["kernels"][0]["launch"]
    if field == "grid":
        launch["grid"][0] = text
    else:
        launch[field] = text
    with pytest.raises(TableError, match="is malformed") as error:
        read_table(written(tmp_path, data))
    assert fragment in str(error.value) and "\n" not in str(error.value)


def test_a_table_file_whose_expressions_hold_at_every_served_size_loads_and_picks(tmp_path):
    path = written(tmp_path, small_table().to_dict())
    table = read_table(path)
    assert table == small_table() and table.dtypes["f32"].pick(5000, 3000, 100).kernel == "k"
    assert table.dtypes["f32"].kernels[0].launch.grid_for(100, 200, 3) == (4, 2, 1)


@pytest.mark.parametrize("edit, fragment", [
    (lambda k, d: k["launch"].update(target="sm_90 */ int evil; /*"), "target"),
    (lambda k, d: k["launch"].update(block=[0, 1, 1]), "block"),
    (lambda k, d: k["launch"].update(block=[2**40, 1, 1]), "block"),
    (lambda k, d: k["launch"].update(dynamic_smem=-1), "dynamic_smem"),
    (lambda k, d: k["launch"].update(tensor_maps=[{"name": 'a", 0}; int evil; {"', "operand": "A", "box": [8, 8],
                                                   "swizzle": 0}]), "identifiers"),
    (lambda k, d: d.update(sms=10**30), "sms"),
])
def test_a_table_file_with_a_value_the_c_library_could_not_hold_is_refused_at_load(tmp_path, edit, fragment):
    data = small_table().to_dict()
    edit(data["dtypes"]["f32"]["kernels"][0], data["dtypes"]["f32"])
    with pytest.raises(TableError, match=fragment) as error:
        read_table(written(tmp_path, data))
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("number", ["Infinity", "-Infinity", "NaN", "0"])
def test_a_table_file_with_a_time_that_is_not_a_positive_finite_number_is_refused(tmp_path, number):
    text = json.dumps(small_table().to_dict()).replace('"ms": 2.8', f'"ms": {number}')
    assert number in text
    with pytest.raises(TableError, match="positive") as error:
        read_table(written(tmp_path, text))
    assert "\n" not in str(error.value)


def test_json_nested_a_hundred_thousand_deep_is_one_line(tmp_path):
    for text in ["[" * 100_000 + "]" * 100_000,
                 '{"kind": "autotune-kernel-table", "schema_version": 2, "dtypes": ' + "[" * 100_000 + "]" * 100_000 + "}"]:
        with pytest.raises(TableError, match="nests too deep") as error:
            read_table(written(tmp_path, text))
        assert "\n" not in str(error.value)


# -- planted results: no non-finite time in a table, no table retargeted -----------------------------------


class OneRowStore:
    """A results store holding one measurement at one shape."""

    shown_url = "planted"

    def __init__(self, ms: float, cublas_ms: float | None = None):
        config = seed(BM=128, BN=128, BK=8)
        self.row = BestRow(config.name, "sgemm", config.as_dict(), ms, 1.0, cublas_ms, None, "NVIDIA H200", "sm_90",
                           "580", None)

    def problems(self, key, dtype, layout="row"):
        return [square(1024)] if layout == "row" else []

    def best(self, key, problem, limit=10):
        return [self.row]

    def retimed(self, key, problem):
        return []


@pytest.mark.parametrize("ms, cublas_ms", [(math.inf, None), (math.nan, None), (0.0, None), (1.0, math.inf)])
def test_a_time_that_is_not_a_positive_finite_number_never_enters_a_table(ms, cublas_ms):
    with pytest.raises(TableError, match="not a positive finite number") as error:
        gather(OneRowStore(ms, cublas_ms), "h200", "f32")
    assert "\n" not in str(error.value)
    with pytest.raises(TableError, match="not a positive finite number"):
        TableRule(64, 64, 64, "k", ms=ms, cublas_ms=cublas_ms, measured_on="NVIDIA H200")


def test_an_inf_time_planted_in_a_database_makes_no_table_and_no_c(tmp_path, capsys):
    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    add(store, square(1024), seed(BM=128, BN=128, BK=8), 1.0)
    add(store, square(2048), seed(BM=64, BN=64), 2.0)
    store.close()
    with sqlite3.connect(tmp_path / "r.db") as planted:
        planted.execute("UPDATE measurements SET median_ms = 9e999")
    for args in (["table", "--gpu", "h200", "--json"],
                 ["export", "--gpu", "h200", "--dtype", "f32", "--format", "cuda", "--out", str(tmp_path / "lib")]):
        code, out, err = cli(capsys, *args, "--db", f"sqlite:///{tmp_path}/r.db")
        if code == 0:  # the row was refused as the database was read: what is left is served
            assert not any(word in out for word in ("Infinity", "NaN", "inf")), out
        else:
            assert_one_line(code, err)
    c_files = list((tmp_path / "lib").rglob("*.c")) if (tmp_path / "lib").exists() else []
    assert not any("inf" in path.read_text().split("*/", 1)[-1] for path in c_files)


def test_a_results_line_filing_another_architecture_under_a_known_gpu_does_not_retarget_its_table(
        tmp_path, capsys, monkeypatch):
    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    fast, slow = seed(BM=128, BN=128, BK=8), seed(BM=64, BN=64)
    add(store, square(1024), fast, 1.0)
    add(store, square(1024), slow, 0.5, env=Environment("h200", "NVIDIA H200", "sm_75", "580", "13.0", "13.0", "14"))
    table = build_table(store, ("f32",), gpu="h200")
    assert table.arch == "sm_90" and table.measured_on == ("NVIDIA H200",)
    [rule] = table.dtypes["f32"].rules
    assert rule.times == ((fast.name, 1.0),)  # the sm_75 time is not a time of this GPU
    assert [line for line in ignored_environments(store, gpu="h200") if "sm_75" in line and "sm_90" in line]
    assert build_table(store, ("f32",), arch="sm_75").dtypes["f32"].rules == ()  # nor is it an sm_75 GPU's

    code, out, err = cli(capsys, "export", "--gpu", "h200", "--dtype", "f32", "--format", "json", "--db", store.url,
                         "--out", str(tmp_path / "out"))
    assert code == 0 and "ignoring the results of h200" in err and "as 'sm_75'" in err, err
    assert json.loads((tmp_path / "out" / "autotune_table_h200.json").read_text())["arch"] == "sm_90"

    from autotune.runtime.sources import choose_table

    monkeypatch.setenv("AUTOTUNE_DB", store.url)
    assert choose_table("NVIDIA H200", "sm_90", 0).table.arch == "sm_90"


# -- export destinations: checked first, never written through a link ------------------------------------


def _no_work(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the export started its work before checking --out")

    monkeypatch.setattr("autotune.runtime.sources.shipped_store", refuse)
    monkeypatch.setattr("autotune.select.selection.build_table", refuse)


@pytest.mark.parametrize("make_out, fragment", [
    (lambda tmp: (tmp / "file").write_text("") or tmp / "file", "it is a file"),
    (lambda tmp: (tmp / "file").write_text("") or tmp / "file" / "sub", "is a file, not a directory"),
    (lambda tmp: (tmp / "gone").symlink_to(tmp / "nowhere") or tmp / "gone", "symbolic link to nothing"),
])
def test_export_checks_out_before_any_work(tmp_path, capsys, monkeypatch, make_out, fragment):
    _no_work(monkeypatch)
    out = make_out(tmp_path)
    for fmt in ("cuda", "python", "json"):
        code, _, err = cli(capsys, "export", "--gpu", "h200", "--shipped", "--format", fmt, "--out", str(out))
        assert_one_line(code, err, "--out", fragment)


def test_export_replaces_a_planted_link_and_never_writes_through_it(tmp_path, capsys):
    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    add(store, square(1024), seed(BM=128, BN=128, BK=8), 1.0)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    (out / "autotune_table_h200.json").symlink_to(victim)
    code, _, err = cli(capsys, "export", "--gpu", "h200", "--dtype", "f32", "--format", "json", "--db", store.url,
                       "--out", str(out))
    assert code == 0, err
    assert victim.read_text() == "precious"
    written_file = out / "autotune_table_h200.json"
    assert not written_file.is_symlink() and json.loads(written_file.read_text())["gpu"] == "h200"


def test_a_linked_folder_inside_out_is_refused_and_nothing_is_written_through_it(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "src").symlink_to(elsewhere)
    with pytest.raises(InputError, match="symbolic link") as error:
        write_files(out, {"README.md": "a", "src/table.c": "int x;"})
    assert "\n" not in str(error.value)
    assert list(elsewhere.iterdir()) == [] and (out / "README.md").read_text() == "a"


def test_export_to_an_out_it_can_use_writes_every_file(tmp_path):
    written_paths = write_files(tmp_path / "new" / "out", {"a.txt": "a", "src/b.c": b"b", "src/c/d.h": "d"})
    assert [p.read_bytes() for p in written_paths] == [b"a", b"b", b"d"]
    assert not [p for p in (tmp_path / "new" / "out").rglob("*") if "partial" in p.name]
    with pytest.raises(AutotuneError):
        write_files(tmp_path / "new" / "out", {"src": "a folder is there"})
