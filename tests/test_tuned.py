"""Tuned results as JSON lines: export, import, idempotence, and the file that ships."""

import io
import json
from pathlib import Path

import pytest

from autotune import tuned
from autotune.db import ResultStore
from autotune.errors import InputError
from autotune.gpus import gpu_spec
from autotune.problem import GemmProblem
from autotune.records import Environment, Measurement, Resources, Timing
from autotune.space import load_space

ENV = Environment("h200", "NVIDIA H200", "sm_90", "580.159.04", "13.0", "13.0", "14.2.0")
PROBLEM = GemmProblem(512, 512, 512)
SHIPPED = Path(__file__).resolve().parents[1] / "tuned_db" / "h200.jsonl"


def _measurement(ms):
    timing = Timing(ms, ms * 0.9, ms * 1.2, ms * 0.95, ms * 1.05, (ms * 0.9, ms, ms * 1.2))
    return Measurement(timing, PROBLEM.tflops(ms), 0.1, 1980, 0, 50, Resources(128, 16640, 0, 0, 0, 0))


def _store(tmp_path, name):
    return ResultStore(f"sqlite:///{tmp_path / name}")


def test_export_import_round_trip(tmp_path):
    space = load_space("sgemm")
    source = _store(tmp_path, "a.db")
    for i, seed in enumerate(space.seeds[:4]):
        source.add_measurement(ENV, PROBLEM, seed, space.template_hash, _measurement(1.0 + i), "s")
        source.add_measurement(ENV, PROBLEM, seed, space.template_hash, _measurement(5.0 + i), "s")  # slower repeat
    source.add_measurement(ENV, PROBLEM, None, None, _measurement(0.9), "s")

    text = io.StringIO()
    assert tuned.export(source, "h200", text, per_problem=3) == 4  # cuBLAS + the 3 fastest kernels
    lines = [json.loads(line) for line in text.getvalue().splitlines()]
    assert lines[0]["family"] is None and [line["timing_ms"]["median"] for line in lines[1:]] == [1.0, 2.0, 3.0]

    path = tmp_path / "h200.jsonl"
    path.write_text(text.getvalue())
    target = _store(tmp_path, "b.db")
    assert tuned.import_file(target, path) == (4, 0)
    assert tuned.import_file(target, path) == (0, 4)  # idempotent
    assert [r.config_name for r in target.best("h200", PROBLEM)] == [s.name for s in space.seeds[:3]]
    assert target.cublas_reference("h200", PROBLEM) == 0.9


def test_a_bad_line_names_its_number(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"environment": {}}\n')
    with pytest.raises(InputError, match="line 1 of"):
        list(tuned.read(path))
    with pytest.raises(InputError, match="readable file"):
        list(tuned.read(tmp_path / "missing.jsonl"))


def test_the_shipped_h200_results_load_and_rank():
    """tuned_db/h200.jsonl: the H200 SGEMM and HGEMM searches, loadable on a machine with no GPU."""
    rows = list(tuned.read(SHIPPED))
    shapes = {(problem.m, problem.n, problem.k, problem.dtype) for _, problem, *_ in rows}
    assert {(n, n, n, "f32") for n in (1024, 2048, 4096, 8192)} <= shapes
    assert {(n, n, n, "f16") for n in (1024, 4096)} <= shapes
    h200 = gpu_spec("h200")
    for env, problem, config, template_hash, measurement, _, _ in rows:
        assert env.gpu_key == "h200" and measurement.max_error <= 1.0
        if config is not None:
            space = load_space(config.family)
            assert space.dtype == problem.dtype
            assert space.check(config, h200).feasible, config.name
