"""tuned_db/ holds one results file per GPU, named by its key; the runtime and `results import --shipped` load those."""

from pathlib import Path

from autotune import data_files

ROOT = Path(__file__).resolve().parents[1]


def test_the_shipped_results_are_one_file_per_gpu_key():
    assert data_files.shipped_results() == [data_files.data_dir("tuned_db") / "h200.jsonl"]


def test_only_files_named_after_a_known_gpu_are_loaded(tmp_path, monkeypatch):
    for name in ("h200.jsonl", "t4.jsonl", "h200-old.jsonl", "h300.jsonl", "a100.json"):
        (tmp_path / name).write_text("")
    monkeypatch.setattr(data_files, "data_dir", lambda name: tmp_path)
    assert data_files.shipped_results() == [tmp_path / "t4.jsonl", tmp_path / "h200.jsonl"]  # in the GPUs' order


def test_the_version_1_test_file_is_the_start_of_the_shipped_h200_file():
    shipped = (ROOT / "tuned_db" / "h200.jsonl").read_text()
    v1 = (ROOT / "tests" / "data" / "h200-v1.jsonl").read_text()
    assert shipped.startswith(v1) and len(shipped) > len(v1)
    assert all('"schema_version"' not in line for line in v1.splitlines())
