"""The command line as users run it, on real files: in this process where a process of its own would
prove nothing more, as one for the entry point and the whole offline pipeline."""

import hashlib
import json
import os
import subprocess
import sys

import pytest
from conftest import assert_one_line_error, autotune, autotune_process

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_space_t4_rejects_over_48kb_and_reports_resources():
    result = autotune("space", "--gpu", "t4", "--shape", "4096", "--compile", "4", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["arch"] == "sm_75" and report["feasible"] > 1000
    examples = [r["example"] for r in report["rejected"]]
    assert any(e.startswith("smem ") and e.endswith("> 48 KB (t4)") for e in examples)
    assert any("cp.async needs sm_80" in e for e in examples)
    assert sum(r["count"] for r in report["rejected"]) + report["feasible"] == report["configs"]
    assert len(report["compiled"]) == 4
    for row in report["compiled"]:
        assert row["registers"] > 0 and row["smem_bytes"] <= 48 * 1024
        assert row["status"] == "ok" or row["status"].startswith("resource:")


def test_space_text_output_names_reasons_and_resources():
    # on a T4, whose rules leave 140 thousand feasible configs (an H200 keeps 930 thousand: 4x the walk)
    result = autotune("space", "--gpu", "t4", "--shape", "1000x2000x300", "--compile", "2")
    assert result.returncode == 0, result.stderr
    assert "sgemm on t4 (sm_75)" in result.stdout
    assert "rejected (count, example reason)" in result.stdout
    assert "regs" in result.stdout and "smem KB" in result.stdout
    assert "sgemm_bm128_bn128_bk8" in result.stdout  # the first seed is compiled first


@pytest.mark.parametrize("args, fragments", [
    (["space", "--gpu", "t4", "--shape", "0"], ["'0'", "MxNxK"]),
    (["space", "--gpu", "t4", "--shape", "12x7"], ["'12x7'", "MxNxK"]),
    (["space", "--gpu", "t4", "--shape=-3x4x5"], ["'-3x4x5'"]),
    (["space", "--gpu", "t4", "--shape", "-5"], ["'-5'"]),
    (["space", "--gpu", "v100", "--shape", "64"], ["'v100'", "t4", "h200", "auto"]),
    (["space", "--gpu", "t4", "--shape", "64", "--dtype", "f64"], ["'f64'", "f32", "f16"]),
    (["space", "--gpu", "t4", "--shape", "64", "--compile", "lots"], ["'lots'", "all"]),
    (["search", "--gpu", "t4", "--shape", "64", "--trials", "0"], ["--trials 0", "> 0"]),
    (["query", "--gpu", "h100", "--shape", "64x64"], ["'64x64'"]),
    (["search", "--gpu", "h200", "--shape", "64", "--backend", "opencl"], ["'opencl'", "cupy", "fake"]),
    (["search", "--gpu", "h200", "--shape", "64", "--backend", "fake", "--sampler", "grid"],
     ["'grid'", "tpe", "random", "genetic"]),
    (["search", "--gpu", "h200", "--shape", "64", "--pin", "BM"], ["--pin 'BM'", "KNOB=VALUE"]),
    (["search", "--gpu", "h200", "--shape", "64", "--pin", "BM=x"], ["--pin 'BM=x'", "integer values"]),
    (["search", "--gpu", "h200", "--shape", "64", "--pin", "TILE=64"], ["--pin 'TILE'", "a knob of sgemm", "BM"]),
    (["search", "--gpu", "h200", "--shape", "64", "--pin", "BM=48"], ["--pin 'BM=48'", "a value of BM", "128"]),
    (["sweep", "--gpu", "h200", "--shapes", "llm", "--pin", "BM=48"], ["--pin 'BM=48'", "a value of BM"]),
    (["frobnicate"], ["frobnicate"]),
])
def test_bad_input_is_one_line_and_exit_2(args, fragments):
    assert_one_line_error(autotune(*args), *fragments)


def test_unreadable_database_is_untouched(tmp_path):
    path = tmp_path / "notes.db"
    path.write_bytes(b"this is not a database\n" * 100)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    result = autotune("query", "--gpu", "h200", "--shape", "64", "--db", f"sqlite:///{path}")
    assert_one_line_error(result, "notes.db", "not a database")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_database_in_missing_directory(tmp_path):
    result = autotune("query", "--gpu", "h200", "--shape", "64", "--db", f"sqlite:///{tmp_path}/no/such/dir/x.db")
    assert_one_line_error(result, "x.db")
    assert not (tmp_path / "no").exists()


def test_search_without_gpu_fails_cleanly(tmp_path):
    if not os.environ.get("CI") and _has_gpu():
        pytest.skip("a GPU is attached")
    result = autotune_process("search", "--gpu", "h200", "--shape", "64", "--db", f"sqlite:///{tmp_path}/r.db")
    assert_one_line_error(result, "no CUDA GPU")  # what the GPU worker process prints is in it too


def _has_gpu():
    from conftest import gpu_absent_reason

    return gpu_absent_reason() is None


def test_search_and_query_end_to_end_with_the_fake_backend(tmp_path):
    """The whole offline pipeline, first as a process of its own: rules, render, NVRTC, worker process, Optuna,
    SQLite, query, resume."""
    db = f"sqlite:///{tmp_path}/results.db"
    args = ["search", "--gpu", "h200", "--shape", "100x60x40", "--backend", "fake", "--db", db, "--jobs", "2"]
    first = autotune_process(*args, "--trials", "4")
    assert first.returncode == 0, first.stderr
    assert "4 configs evaluated on the GPU" in first.stdout
    assert "best: sgemm_" in first.stdout and "x cuBLAS" in first.stdout
    assert [path.name for path in tmp_path.iterdir()] == ["results.db"]  # closed: no WAL left behind

    resumed = autotune(*args, "--trials", "6")
    assert resumed.returncode == 0, resumed.stderr
    assert "6 configs evaluated on the GPU" in resumed.stdout  # 4 earlier + 2 new: the same study

    query = autotune("query", "--gpu", "h200-fake", "--shape", "100x60x40", "--db", db, "--json")
    assert query.returncode == 0, query.stderr
    rows = json.loads(query.stdout)
    assert 1 <= len(rows) <= 6
    assert all(r["config"].startswith("sgemm_") and r["ratio_to_cublas"] > 0 for r in rows)
    assert rows == sorted(rows, key=lambda r: r["median_ms"])

    other_gpu = autotune("query", "--gpu", "t4", "--shape", "100x60x40", "--db", db)
    assert other_gpu.returncode == 0 and "no results for t4" in other_gpu.stdout


def test_a_pinned_search_tries_only_the_pinned_values_in_a_study_of_its_own(tmp_path):
    db = f"sqlite:///{tmp_path}/results.db"
    args = ["search", "--gpu", "h200", "--shape", "100x60x40", "--backend", "fake", "--db", db, "--jobs", "2"]
    pinned = autotune(*args, "--trials", "5", "--pin", "BM=64", "--pin", "BK=8,16")
    assert pinned.returncode == 0, pinned.stderr
    assert "/pin:BK=8,16;BM=64: 5 configs evaluated" in pinned.stdout
    rows = json.loads(autotune("query", "--gpu", "h200-fake", "--shape", "100x60x40", "--db", db, "--json").stdout)
    assert rows and all("_bm64_" in row["config"] and ("_bk8_" in row["config"]) != ("_bk16_" in row["config"])
                        for row in rows)  # the family's results, every one of them pinned
    whole = autotune(*args, "--trials", "2")
    assert "2 configs evaluated" in whole.stdout  # the family's own study: the pinned one's trials are not in it


SPAWNING_SCRIPT = """
import multiprocessing
import sys
from {module} import {function}  # what the script pip writes for the entry point imports


def report(queue):
    queue.put(sorted(name for name in ("autotune.cli", "sqlalchemy", "optuna") if name in sys.modules))


if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")  # as the GPU worker and the compile processes start
    queue = context.Queue()
    context.Process(target=report, args=(queue,)).start()
    print(queue.get(timeout=120))
"""


def test_processes_the_autotune_command_starts_do_not_import_the_command_line(tmp_path):
    """A spawned process runs the command's script again first: only the entry point's module is imported."""
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as file:
        module, function = tomllib.load(file)["project"]["scripts"]["autotune"].split(":")
    script = tmp_path / "autotune"
    script.write_text(SPAWNING_SCRIPT.format(module=module, function=function))
    env = {**os.environ, "PYTHONPATH": ROOT}
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_search_refuses_a_gpu_that_is_not_attached(tmp_path):
    result = autotune("search", "--gpu", "t4", "--shape", "64", "--backend", "fake",
                      "--db", f"sqlite:///{tmp_path}/r.db")
    assert_one_line_error(result, "--gpu t4", "NVIDIA H200 (fake)", "h200")


def test_every_command_has_help_with_an_example():
    for command in ("space", "search", "query", "table", "ladder", "results", "gpus"):
        result = autotune(command, "--help")
        assert result.returncode == 0
        assert "example: autotune " + command in result.stdout


@pytest.mark.parametrize("gpu, family, arch", [
    ("t4", "hgemm_wmma", "sm_75"), ("a100", "hgemm_mma", "sm_80"), ("h200", "hgemm_wgmma", "sm_90a"),
])
def test_space_f16_picks_the_family_the_gpu_can_run(gpu, family, arch):
    result = autotune("space", "--gpu", gpu, "--dtype", "f16", "--shape", "4097x4095x31", "--compile", "1", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["family"] == family and report["feasible"] > 0 and report["arch"] == arch
    assert report["compiled"][0]["status"] == "ok"


def test_pareto_search_and_energy_queries_with_the_fake_backend(tmp_path):
    db = f"sqlite:///{tmp_path}/results.db"
    search = autotune("search", "--gpu", "h200", "--shape", "96x64x32", "--backend", "fake", "--db", db,
                      "--jobs", "2", "--trials", "3", "--objective", "pareto")
    assert search.returncode == 0, search.stderr
    assert "/pareto: 3 configs evaluated" in search.stdout
    assert "mJ per GEMM" in search.stdout and "cuBLAS:" in search.stdout
    assert "time/energy front" in search.stdout

    front = autotune("query", "--gpu", "h200-fake", "--shape", "96x64x32", "--db", db, "--objective", "pareto", "--json")
    assert front.returncode == 0, front.stderr
    report = json.loads(front.stdout)
    assert report["rows"] and report["cublas"]["config_name"] == "cublas"
    assert all(r["energy_per_gemm_j"] > 0 and r["mean_power_w"] > 0 for r in report["rows"])

    frugal = autotune("query", "--gpu", "h200-fake", "--shape", "96x64x32", "--db", db, "--objective", "energy")
    assert frugal.returncode == 0 and "most frugal configs" in frugal.stdout

    time_study = autotune("search", "--gpu", "h200", "--shape", "96x64x32", "--backend", "fake", "--db", db,
                          "--jobs", "2", "--trials", "1")
    assert "alpha1/beta0/" in time_study.stdout and "/pareto" not in time_study.stdout  # its own study


@pytest.mark.parametrize("command", ["search", "query"])
def test_bad_objective_is_one_line(command, tmp_path):
    args = [command, "--gpu", "h200", "--shape", "64", "--objective", "speed", "--db", f"sqlite:///{tmp_path}/r.db"]
    assert_one_line_error(autotune(*args), "'speed'")


def test_shipped_results_import_and_query_offline(tmp_path):
    db = f"sqlite:///{tmp_path}/r.db"
    imported = autotune("results", "import", os.path.join(ROOT, "tests", "data", "h200-v1.jsonl"), "--db", db)
    assert imported.returncode == 0, imported.stderr
    assert "measurements added" in imported.stdout
    query = autotune("query", "--gpu", "h200", "--shape", "4096", "--db", db, "--json")
    rows = json.loads(query.stdout)
    assert rows[0]["config"].startswith("sgemm_bm256_bn128_bk8") and rows[0]["config"].endswith("_lean_build1_lane_pairs0_copy_spread0_copy_ptrs0_whole_tiles0")
    assert 0.9 < rows[0]["ratio_to_cublas"] < 1.1
    half = json.loads(autotune("query", "--gpu", "h200", "--shape", "4096", "--dtype", "f16", "--db", db, "--json").stdout)
    assert half[0]["config"].startswith("hgemm_wgmma_") and 0.8 < half[0]["ratio_to_cublas"] < 1.0
    exported = autotune("results", "export", "--gpu", "h200", "--db", db, "--per-problem", "1")
    assert exported.returncode == 0 and len(exported.stdout.splitlines()) == 22  # 7 best + 15 cuBLAS references
    assert_one_line_error(autotune("results", "import", "--db", db), "tuned_db/h200.jsonl")
    assert_one_line_error(autotune("results", "export", "--db", db), "--gpu")


def test_ladder_with_the_fake_backend_ends_with_the_tuned_config(tmp_path):
    db = f"sqlite:///{tmp_path}/r.db"
    before = autotune("ladder", "--gpu", "h200", "--dtype", "f32", "--shape", "128", "--backend", "fake", "--db", db)
    assert before.returncode == 0, before.stderr
    assert "naive" in before.stdout and "register blocking" in before.stdout
    assert "no tuned result in the database" in before.stdout
    search = autotune("search", "--gpu", "h200", "--shape", "128", "--backend", "fake", "--db", db,
                      "--trials", "2", "--jobs", "2")
    assert search.returncode == 0, search.stderr
    after = autotune("ladder", "--gpu", "h200", "--dtype", "f32", "--shape", "128", "--backend", "fake", "--db", db)
    assert after.returncode == 0, after.stderr
    tuned_line = next(line for line in after.stdout.splitlines() if line.startswith("  tuned"))
    assert "sgemm_" in tuned_line
    assert_one_line_error(autotune("ladder", "--gpu", "t4", "--shape", "128", "--backend", "fake", "--db", db),
                          "--gpu t4")


def test_query_by_family(tmp_path):
    db = f"sqlite:///{tmp_path}/r.db"
    assert autotune("results", "import", os.path.join(ROOT, "tests", "data", "h200-v1.jsonl"), "--db", db).returncode == 0
    sgemm = autotune("query", "--gpu", "h200", "--shape", "2048", "--db", db, "--family", "sgemm", "--json")
    assert sgemm.returncode == 0 and all(r["family"] == "sgemm" for r in json.loads(sgemm.stdout))
    other = autotune("query", "--gpu", "h200", "--shape", "2048", "--db", db, "--family", "naive_f32", "--json")
    assert json.loads(other.stdout) == []
    assert_one_line_error(autotune("query", "--gpu", "h200", "--shape", "2048", "--db", db, "--family", "nope"),
                          "'nope'", "sgemm")


def test_selection_table_from_the_shipped_results(tmp_path):
    db = f"sqlite:///{tmp_path}/r.db"
    assert autotune("results", "import", os.path.join(ROOT, "tests", "data", "h200-v1.jsonl"), "--db", db).returncode == 0
    result = autotune("table", "--gpu", "h200", "--dtype", "f32", "--db", db, "--json")
    assert result.returncode == 0, result.stderr
    rows = {row["shape"]: row for row in json.loads(result.stdout)["rules"]}
    assert set(rows) == {"1024x1024x1024", "2048x2048x2048", "4096x4096x4096", "8192x8192x8192"}
    # cuBLAS was faster than every tuned kernel at 2048, 4096 and 8192 there: those rules go to cuBLAS, and the
    # table without a shape picks cuBLAS at it, timed there (best/pick above 1: cuBLAS beat the tuned best)
    assert [rows[f"{s}x{s}x{s}"]["cublas"] for s in (1024, 2048, 4096, 8192)] == [False, True, True, True]
    for shape in ("4096x4096x4096", "8192x8192x8192"):
        row = rows[shape]
        assert row["held_out_pick"] == "cublas" and row["held_out_fraction_of_best"] == row["best_ms"] / row["cublas_ms"]
    text = autotune("table", "--gpu", "h200", "--db", db)
    assert "held-out picks measured on" in text.stdout
    assert_one_line_error(autotune("table", "--gpu", "h200", "--dtype", "f64", "--db", db), "'f64'")
