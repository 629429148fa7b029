"""bench/compile_cost.py without a GPU: the configs it names render, and a run reports every case it compiled."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))
import compile_cost  # noqa: E402

from autotune.space.family import load_space  # noqa: E402


def test_default_configs_are_sgemm_configs_of_the_space():
    """Each name the script measures by default renders the config it names (a renamed knob would break it)."""
    space = load_space("sgemm")
    for name in compile_cost.DEFAULT_CONFIGS:
        code = compile_cost.render_config(name)
        assert code.startswith(f"// {name}\n")  # the config it names, every knob given
        assert all(f"_{knob.lower()}" in name for knob in space.knobs)
    with pytest.raises(SystemExit, match="expected a value for every knob"):
        compile_cost.render_config("sgemm_bm128_bn128")


def test_a_run_reports_each_case_and_count(tmp_path, monkeypatch):
    cheap = compile_cost.DEFAULT_CONFIGS[2]
    source = tmp_path / "tiny.cu"
    source.write_text('extern "C" __global__ void tiny(float* x) { x[threadIdx.x] *= 2.0f; }\n')
    monkeypatch.setattr(sys, "argv", ["compile_cost.py", "--out", str(tmp_path / "out"), "--config", cheap,
                                      "--source", str(source), "--parallel", "1,2", "--reps", "1"])
    compile_cost.main()
    report = json.loads((tmp_path / "out" / "compile_cost.json").read_text())
    assert [case["case"] for case in report["cases"]] == [cheap, str(source)]
    for case in report["cases"]:
        assert case["alone_cpu_s"] > 0
        assert [row["processes"] for row in case["parallel"]] == [1, 2]
        assert all(row["compiles_per_s"] > 0 for row in case["parallel"])
    assert report["machine"]["cpus"] >= 1
    assert "16 at once" not in (tmp_path / "out" / "compile_cost.txt").read_text()
