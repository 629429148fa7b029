"""A newcomer's first minutes: imports in batches, progress on long work, first errors that lead somewhere,
tables that fit a terminal."""

from __future__ import annotations

import dataclasses
import io
import json
import re
from pathlib import Path

import jinja2
import pytest
from results_data import fill, snapshot
from sqlalchemy import event


from autotune.cli import search as search_command
from autotune.cli.progress import TerminalProgress
from autotune.cli.text import paragraph, same_in_every_row, table, terminal_width, wrap_text
from autotune.errors import NoGpuError
from autotune.gpu.worker import no_gpu_message
from autotune.gpu_specs import GPUS
from autotune.problem import GemmProblem
from autotune.results import FailureEntry, MeasurementEntry, ResultStore, bulk
from autotune.results import files as tuned
from autotune.space import survey as survey_module
from autotune.space.family import load_space
from conftest import cli

ROOT = Path(__file__).resolve().parents[1]
V1 = ROOT / "tests" / "data" / "h200-v1.jsonl"  # 185 lines: f32 results of 4 shapes
CONFIG = "sgemm_bm128_bn128_bk8_split_k1_tm8_tn8_warps_m4_pad_a4_pad_b0_vec4_stages2_cp_async0_smem_opt_in0_" \
         "prefetch0_group_m1_lean_build0_lane_pairs0_copy_spread0_copy_ptrs0_whole_tiles1"


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("autotune: error: ") and "Traceback" not in err, err
    return lines[0]


class Recorder:
    """A progress callback that keeps every call."""

    def __init__(self):
        self.calls: list[tuple[str, int, int]] = []

    def __call__(self, what: str, done: int, total: int) -> None:
        self.calls.append((what, done, total))

    def of(self, what: str) -> list[tuple[int, int]]:
        return [(done, total) for called, done, total in self.calls if called == what]


def assert_goes_from_0_to_total(steps: list[tuple[int, int]]) -> None:
    assert steps, "no progress reported"
    total = steps[0][1]
    assert steps[0] == (0, total) and steps[-1] == (total, total)
    assert all(t == total for _, t in steps)
    done = [d for d, _ in steps]
    assert done == sorted(done)


@pytest.fixture
def v1_db(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'v1.db'}"
    with ResultStore(url) as store:
        tuned.import_files(store, [V1])
    return url


# -- imports in batches ----------------------------------------------------------------------------------------


def _exported_lines(tmp_path: Path) -> Path:
    """Every kind of line: candidates, cuBLAS, energy windows, failures (results_data.fill), as a file."""
    with ResultStore(f"sqlite:///{tmp_path / 'source.db'}") as source:
        fill(source)
        text = io.StringIO()
        tuned.export(source, "h200", text)
    path = tmp_path / "all.jsonl"
    path.write_text(text.getvalue())
    return path


def test_a_file_given_twice_in_one_import_adds_each_result_once(tmp_path):
    path = _exported_lines(tmp_path)
    with ResultStore(f"sqlite:///{tmp_path / 'source.db'}") as source:
        expected = snapshot(source)
    with ResultStore(f"sqlite:///{tmp_path / 'target.db'}") as target:
        first, second = tuned.import_files(target, [path, path])
        assert (first.measurements_added, first.energy_windows_added, first.failures_added) == (9, 3, 3)
        assert (first.measurements_present, first.failures_present) == (0, 0)
        assert (second.measurements_added, second.energy_windows_added, second.failures_added) == (0, 0, 0)
        assert (second.measurements_present, second.failures_present) == (9, 3)
        assert snapshot(target) == expected


def test_windows_missing_from_a_stored_measurement_are_added(tmp_path):
    path = _exported_lines(tmp_path)
    entries = tuned.read(path)
    bare = [dataclasses.replace(e, energy_windows=()) if isinstance(e, MeasurementEntry) else e for e in entries]
    with ResultStore(f"sqlite:///{tmp_path / 'target.db'}") as target:
        target.add_entries(bare)
        report, = tuned.import_files(target, [path])
    assert (report.measurements_added, report.measurements_present, report.energy_windows_added) == (0, 9, 3)


def test_an_import_takes_a_few_statements_per_batch_not_one_per_row(tmp_path):
    entries = tuned.read(ROOT / "tuned_db" / "h200.jsonl")
    with ResultStore(f"sqlite:///{tmp_path / 'r.db'}") as store:
        statements = []
        listener = lambda *args: statements.append(args[2])  # noqa: E731 - (conn, cursor, statement, ...)
        event.listen(store._engine, "before_cursor_execute", listener)
        recorder = Recorder()
        added = store.add_entries(entries, recorder)
        event.remove(store._engine, "before_cursor_execute", listener)
    assert len(added) == len(entries) and all(result.row for result in added)
    batches = -(-len(entries) // bulk.BATCH)
    inserts = [s for s in statements if s.lstrip().upper().startswith("INSERT INTO MEASUREMENTS")]
    assert len(inserts) == batches  # one multi-row insert per batch
    assert len(statements) < 6 * batches + 20  # lookups: a query per batch per table, not per row
    assert_goes_from_0_to_total(recorder.of(bulk.WRITING))


def test_an_import_reports_the_lines_checked_then_the_rows_added(tmp_path):
    recorder = Recorder()
    with ResultStore(f"sqlite:///{tmp_path / 'r.db'}") as store:
        tuned.import_files(store, [V1], recorder)
    assert_goes_from_0_to_total(recorder.of(tuned.CHECKING))
    assert_goes_from_0_to_total(recorder.of(bulk.WRITING))
    assert recorder.of(tuned.CHECKING)[-1][0] == len(V1.read_text().splitlines())
    assert [what for what, _, _ in recorder.calls].index(bulk.WRITING) > 0  # checked first, then written


# -- progress --------------------------------------------------------------------------------------------------


def test_a_survey_reports_how_many_configs_are_judged_and_counts_the_same(monkeypatch):
    space, gpu, problem = load_space("tiled_f32"), GPUS["t4"], GemmProblem(1024, 1024, 1024)
    quiet = survey_module.survey(space, gpu, problem)
    monkeypatch.setattr(survey_module, "PROGRESS_STEPS", 3)
    recorder = Recorder()
    heard = survey_module.survey(space, gpu, problem, progress=recorder)
    assert heard.feasible_count == quiet.feasible_count and heard.feasible == quiet.feasible
    assert [(r.example, r.count) for r in heard.rejections] == [(r.example, r.count) for r in quiet.rejections]
    steps = recorder.of(survey_module.CHECKING)
    assert_goes_from_0_to_total(steps)
    assert steps[0][1] == space.size and len(steps) > 2  # heard along the way, not only at the ends


def test_space_shows_what_it_does_on_a_terminal(monkeypatch, capsys):
    from autotune.cli import space as space_command

    recorder = Recorder()

    class Line(TerminalProgress):
        def __init__(self):
            super().__init__(io.StringIO())

        def __call__(self, what, done, total):
            recorder(what, done, total)

    monkeypatch.setattr(space_command, "TerminalProgress", Line)
    code, out, err = cli(capsys, "space", "--gpu", "t4", "--shape", "1024", "--dtype", "f32", "--family", "tiled_f32",
                         "--compile", "1")
    assert code == 0, err
    assert_goes_from_0_to_total(recorder.of(survey_module.CHECKING))
    assert recorder.of(space_command.PICKING) == []  # the walk that counts the configs also samples them
    assert recorder.of(space_command.COMPILING) == [(0, 1), (1, 1)]
    recorder.calls.clear()
    code, out, err = cli(capsys, "space", "--gpu", "t4", "--shape", "64", "--dtype", "f32", "--family", "naive_f32",
                         "--compile", "all")
    assert code == 0, err
    assert_goes_from_0_to_total(recorder.of(space_command.PICKING))  # every config: listed by a second walk


def test_the_progress_line_is_drawn_on_a_terminal_only():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    drawn, piped = Terminal(), io.StringIO()
    for stream in (drawn, piped):
        with TerminalProgress(stream, clock=iter(range(100)).__next__, interval=0) as progress:
            progress("adding results", 0, 4)
            progress("adding results", 2, 4)
    assert "adding results: 2/4 (50%), about 1 s left" in drawn.getvalue()
    assert piped.getvalue() == ""


# -- first errors ----------------------------------------------------------------------------------------------


def test_a_gpu_command_without_a_gpu_says_why_and_what_runs_without_one(monkeypatch, capsys):
    reason = "CUDARuntimeError: cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version"

    def no_gpu(args):
        raise NoGpuError(no_gpu_message(reason))

    monkeypatch.setattr(search_command, "run", no_gpu)
    code, _, err = cli(capsys, "search", "--gpu", "h200", "--shape", "64")
    line = one_line(err)
    assert code == 2
    assert "no NVIDIA driver is installed, or one older than CuPy's CUDA" in line
    assert "--backend fake" in line and "autotune space, query, table, plot, export, results" in line


def test_an_offline_command_takes_gpu_auto_as_the_attached_model(monkeypatch, capsys, v1_db):
    monkeypatch.setattr("autotune.gpu.detect.attached_device_name", lambda index=0: "NVIDIA H200")
    code, out, err = cli(capsys, "table", "--gpu", "auto", "--db", v1_db)
    assert code == 0, err
    assert out.startswith("selection table for h200 f32")
    code, _, err = cli(capsys, "results", "export", "--gpu", "auto", "--db", v1_db)
    assert code == 0 and "exported 185 measurements" in err

    from autotune.cli import export as export_command

    seen = []
    monkeypatch.setattr(export_command, "run", lambda args: seen.append(args.gpu) or 0)
    assert cli(capsys, "export", "--gpu", "auto", "--shipped", "--out", "deploy")[0] == 0
    assert seen == ["h200"]


def test_gpu_auto_without_a_gpu_is_one_line_naming_the_models(monkeypatch, capsys, v1_db):
    def none_attached(index=0):
        raise NoGpuError("--gpu auto needs an attached NVIDIA GPU and none was found (NVML Shared Library Not Found); "
                         f"name one of {', '.join(GPUS)}")

    monkeypatch.setattr("autotune.gpu.detect.attached_device_name", none_attached)
    for args in (["table", "--gpu", "auto"], ["plot", "--gpu", "auto", "--out", "plots"],
                 ["results", "export", "--gpu", "auto"]):
        code, _, err = cli(capsys, *args, "--db", v1_db)
        line = one_line(err)
        assert code == 2 and "--gpu auto needs an attached NVIDIA GPU" in line and "h200" in line
        assert "--backend fake" not in line  # that is for the GPU commands


@pytest.mark.parametrize("args", [
    ["query", "--gpu", "h200", "--shape", "4096"],
    ["table", "--gpu", "h200"],
    ["results", "export", "--gpu", "h200"],
])
def test_an_empty_or_missing_database_names_the_import_command(tmp_path, capsys, args):
    for db in (str(tmp_path / "typo.db"), f"sqlite:///{tmp_path / 'empty.db'}"):
        if db.startswith("sqlite"):
            ResultStore(db).close()  # created, migrated, empty
        code, out, err = cli(capsys, *args, "--db", db)
        assert code == 0, err
        said = out + err
        assert "`autotune results import --shipped` loads those that ship with autotune (h200)" in said
        assert ("there is no database file" in said) == (not db.startswith("sqlite"))
    assert not (tmp_path / "typo.db").exists()  # a reading command creates nothing


def test_plot_of_an_empty_database_names_the_import_command(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    code, _, err = cli(capsys, "plot", "--gpu", "h200", "--out", str(tmp_path / "plots"), "--db",
                       str(tmp_path / "none.db"))
    assert code == 2 and "autotune results import --shipped" in one_line(err)


def test_a_query_of_a_shape_not_tuned_names_the_nearest_tuned_ones(capsys, v1_db):
    code, out, err = cli(capsys, "query", "--gpu", "h200", "--shape", "4000", "--db", v1_db)
    assert code == 0, err
    assert "no results for h200 4000x4000x4000 f32" in out
    assert "f32 results are there for 4 other shapes, the nearest in size 4096x4096x4096" in out
    assert "autotune table --gpu h200 --dtype f32 lists them all" in out
    code, out, _ = cli(capsys, "query", "--gpu", "t4", "--shape", "4096", "--db", v1_db)
    assert "it holds results for h200 (sm_90)" in out


@pytest.mark.parametrize("args, fragments", [
    ([], ["a command is missing", "space, search", "gpus", "autotune results import --shipped"]),
    (["results"], ["import FILE", "export --gpu NAME"]),
    (["table", "--gpu", "h200", "--db", "{tmp}"], ["is a directory", "results.db"]),
    (["query", "--gpu", "h200", "--shape", "64", "--db", "postgres://localhost/x"],
     ["unknown dialect 'postgres'", "postgresql://"]),
    (["query", "--gpu", "h200", "--shape", "4096x4096", "--db", "{tmp}/r.db"], ["'4096x4096'", "MxNxK"]),
    (["table", "--gpu", "h200", "--dtype", "fp16", "--db", "{tmp}/r.db"], ["'fp16'", "f16"]),
    (["space", "--gpu", "t4", "--shape", "64", "--family", "tiled"], ["'tiled'", "tiled_f32"]),
    (["export", "--gpu", "h200-fake", "--shipped", "--format", "json", "--out", "{tmp}/out"],
     ["--gpu 'h200-fake'", "results shipped with autotune: h200"]),
])
def test_a_newcomers_mistake_is_one_line_that_says_what_to_do(tmp_path, capsys, args, fragments):
    code, _, err = cli(capsys, *(arg.replace("{tmp}", str(tmp_path)) for arg in args))
    line = one_line(err)
    assert code == 2
    for fragment in fragments:
        assert fragment in line, line


# -- tables that fit -------------------------------------------------------------------------------------------


def test_a_config_name_wraps_at_its_knob_boundaries():
    lines = wrap_text(CONFIG, 40, "  ")
    assert "".join(line.strip() for line in lines) == CONFIG
    assert all(len(line) <= 40 for line in lines)
    assert all(line.strip().endswith("_") for line in lines[:-1])
    assert all(re.search(r"\d_$", line) for line in lines[:-1])  # after a knob's value, never inside a knob's name
    assert all(line.startswith("  ") for line in lines[1:])
    assert wrap_text("short", 40) == ["short"]


def test_a_table_fits_its_width_with_columns_aligned():
    headers = ["kernel", "rules", "config"]
    rows = [["k1", 3, CONFIG], ["k12", 11, CONFIG.replace("bm128", "bm64")]]
    text = table(headers, rows, 60, wrap=["config"])
    lines = text.splitlines()
    assert all(len(line) <= 60 for line in lines)
    starts = [lines[0].index(header) for header in headers]
    assert starts == [m.start() for m in re.finditer(r"-+", lines[1])]  # the dashes under each header
    assert lines[2][starts[2]:].startswith("sgemm_bm128") and lines[2][:starts[1]].strip() == "k1"
    assert lines[2][starts[1]:starts[2]].strip() == "3" and lines[2][starts[2] - 3] == "3"  # numbers right-aligned
    whole = table(headers, rows)
    assert CONFIG in whole and len(whole.splitlines()) == 4


def test_a_table_too_wide_to_wrap_is_cut_into_tables_that_repeat_the_first_column():
    headers = ["knob", *(f"k{i}" for i in range(1, 31))]
    rows = [["wait_depth", *range(30)], ["stages", *range(100, 130)]]
    text = table(headers, rows, 50)
    parts = text.split("\n\n")
    assert len(parts) > 1
    for part in parts:
        lines = part.splitlines()
        assert all(len(line) <= 50 for line in lines)
        assert lines[0].startswith("knob") and lines[2].startswith("wait_depth") and lines[3].startswith("stages")
    shown = [header for part in parts for header in part.splitlines()[0].split()[1:]]
    assert shown == headers[1:]  # every column once, in order


def test_what_every_row_shares_is_said_once():
    headers, rows, note = same_in_every_row(["config", "gpu", "ms"], [["a", "NVIDIA H200", 1.0],
                                                                       ["b", "NVIDIA H200", 2.0]], ["gpu", "ms"])
    assert (headers, rows, note) == (["config", "ms"], [["a", 1.0], ["b", 2.0]], "gpu NVIDIA H200")
    assert same_in_every_row(["gpu"], [["x"]], ["gpu"])[2] == ""  # one row: nothing to fold


def test_the_width_is_the_terminals_or_columns_and_none_when_wide_or_piped(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delenv("COLUMNS", raising=False)
    assert terminal_width(stream=io.StringIO()) is None
    assert terminal_width(stream=Terminal()) > 0
    monkeypatch.setenv("COLUMNS", "72")
    assert terminal_width(stream=io.StringIO()) == 72 and terminal_width(True) is None
    assert paragraph("a " * 60, 30).count("\n") >= 3 and "\n" not in paragraph("a " * 60, None)


def test_the_selection_table_fits_80_columns_and_its_knob_values_line_up(monkeypatch, capsys, v1_db):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = cli(capsys, "table", "--gpu", "h200", "--db", v1_db)
    assert code == 0, err
    assert all(len(line) <= 80 for line in out.splitlines()), max(out.splitlines(), key=len)
    matrix = out.split("the knobs whose values differ between the kernels:\n")[1].split("\n\n")[0].splitlines()
    header, dashes, *rows = matrix
    assert header.split()[0] == "knob" and header.split()[1] == "k1"
    columns = [(m.start(), m.end()) for m in re.finditer(r"-+", dashes)]
    for row in rows[:3]:
        for start, end in columns[1:]:
            assert row[start:end].strip().isdigit() and (end >= len(row) or row[end] == " ")  # under its header
    kernels = out.split("kernels, in the order the cover chose them")[1]
    assert "sgemm_bm" in kernels and CONFIG not in out  # the configs are there, wrapped


def test_the_wide_table_shows_each_rules_knob_values_under_their_headers(monkeypatch, capsys, v1_db):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = cli(capsys, "table", "--gpu", "h200", "--db", v1_db, "--wide")
    assert code == 0, err
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("shape "))
    dashes = lines[lines.index(header) + 1]
    columns = dict(zip(header.split(), (m.span() for m in re.finditer(r"-+", dashes))))
    assert "bm" in columns and "bn" in columns and len(header) > 80
    rule = lines[lines.index(header) + 2]
    for knob in ("bm", "bn"):
        start, end = columns[knob]
        assert rule[start:end].strip().isdigit()
    assert any(len(line) > 80 for line in lines)  # --wide: nothing cut to the terminal


# -- the C library's README ------------------------------------------------------------------------------------


def test_the_library_readme_has_one_tuned_shape_per_row():
    from autotune.export.cuda import LIBRARY_FILES

    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(LIBRARY_FILES), keep_trailing_newline=True,
                                     trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    rules = [{"m": 2 ** i, "n": 4096, "k": 4096, "cublas": i % 3 == 0, "kernel_name": f"sgemm_k{i % 5}"}
             for i in range(56)]
    text = environment.get_template("README.md.j2").render(
        scope="h200", arch="sm_90", version="0", source="tests", measured_on="NVIDIA H200",
        dtypes=[{"name": "f32", "function": "autotune_sgemm", "rules": rules,
                 "tuned_range": [{"axis": "m", "low": 1, "high": 2 ** 56}, {"axis": "n", "low": 2048, "high": 8192},
                                 {"axis": "k", "low": 2048, "high": 8192}]},
                {"name": "f16", "function": "autotune_hgemm", "rules": [], "tuned_range": []}])
    rows = [line for line in text.splitlines() if line.startswith("| ") and "x4096x4096" in line]
    assert len(rows) == 56
    for rule, row in zip(rules, rows):
        assert row.count("x4096x4096") == 1 and f"| {rule['m']}x4096x4096: " in row and "<br>" not in row
        assert ("cuBLAS (else `" in row) == rule["cublas"]
    assert rows[0].startswith("| f32 | `autotune_sgemm` |") and rows[1].startswith("|  |  |")
    assert "| f16 | `autotune_hgemm` | none: returns `AUTOTUNE_ERROR_UNSUPPORTED` |" in text
    assert "\nf32 m 1..72057594037927936, n 2048..8192, k 2048..8192.\ncuBLAS is loaded" in text  # the range, outside: cuBLAS


def test_failure_entries_import_in_the_same_batches(tmp_path):
    path = _exported_lines(tmp_path)
    entries = tuned.read(path)
    failures = [entry for entry in entries if isinstance(entry, FailureEntry)]
    with ResultStore(f"sqlite:///{tmp_path / 'target.db'}") as target:
        added = target.add_entries(failures + failures)
    assert [result.row for result in added] == [True] * len(failures) + [False] * len(failures)
    assert json.dumps([result.energy_windows for result in added]) == json.dumps([0] * 2 * len(failures))


def test_the_export_summary_says_which_tuned_shapes_run_cublas(tmp_path, capsys):
    """Where the table's kernel is slower than cuBLAS at its own tuned shape, the summary says cuBLAS runs there."""
    code, out, _ = cli(capsys, "export", "--gpu", "h200", "--shipped", "--format", "json", "--out", str(tmp_path))
    assert code == 0
    rows = [line.split() for line in out.splitlines() if re.match(r"f(16|32)\s+\d+x\d+x\d+\s", line)]
    assert rows and {row[2] for row in rows} == {"cuBLAS", "kernel"}
    for row in rows:  # the kernel's ratio to cuBLAS at its own shape decides what runs there (1.000x: either)
        ratio = float(row[-1].rstrip("x"))
        assert ratio == 1.0 or (row[2] == "cuBLAS") == (ratio < 1.0), row
