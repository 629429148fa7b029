"""bench/part_costs.py without a GPU: the rows that fill whole waves, and the source without its epilogue,
whose main loop ptxas must keep."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))
import part_costs  # noqa: E402

from autotune.gpu_specs import gpu_spec  # noqa: E402
from autotune.kernel.compile import CompileFailure, compile_kernel  # noqa: E402
from autotune.kernel.render import render  # noqa: E402
from autotune.space.family import load_space  # noqa: E402

ONE_TILE_A_BLOCK = {"WG_M": 2, "WG_N": 1, "M_TILES": 1, "WN": 256, "BK": 64, "STAGES": 4, "WAIT_DEPTH": 1,
                    "SMEM_OPT_IN": 1, "GROUP_M": 1, "SMEM_EPILOGUE": 1, "SPLIT_K": 1, "PRODUCER": 1, "TMA": 1}


def test_filled_rows_grow_m_to_the_last_whole_wave():
    assert part_costs.filled_rows(4096, 4096, 128, 256, 132) == 4224  # 512 tiles -> 528 = 4 waves of 132
    assert part_costs.filled_rows(8192, 8192, 128, 256, 132) == 8448  # 2048 -> 2112 = 16 waves
    assert part_costs.filled_rows(2048, 2048, 128, 256, 132) == 2048  # 128 tiles: 132 // 8 columns leaves 16 rows
    assert part_costs.filled_rows(4224, 4096, 128, 256, 132) == 4224


def _compiled(source):
    compiled = compile_kernel(source, use_cache=False)
    assert not isinstance(compiled, CompileFailure), compiled.message
    return compiled


def test_without_its_epilogue_a_kernel_keeps_its_accumulators_and_writes_no_tile():
    space, h200 = load_space("hgemm_wgmma"), gpu_spec("h200")
    config = space.config(ONE_TILE_A_BLOCK)
    source = render(space, config, h200)
    cut = part_costs.without_epilogue(source.code)
    assert cut.count("part_costs: epilogue left out") == 1 and "    return;  // part_costs" in cut
    resources = _compiled(dataclasses.replace(source, code=cut)).resources
    # 128 accumulators a thread stay live: ptxas drops a main loop whose results nobody reads
    assert resources.registers >= space.values(config, h200)["ACCUMULATORS"]
    persistent = [seed for seed in space.seeds if seed["PERSISTENT"]][0]
    code = part_costs.without_epilogue(render(space, persistent, h200).code)
    loop = code.index("for (int tile = 0; tile < my_tiles; ++tile)")
    assert code.index("        continue;  // part_costs") > loop
    with pytest.raises(SystemExit, match="no epilogue to leave out"):
        part_costs.without_epilogue("__global__ void k() {}")


def test_without_c_stores_the_persistent_epilogue_keeps_its_work_and_stores_nothing():
    space, h200 = load_space("hgemm_wgmma"), gpu_spec("h200")
    persistent = [seed for seed in space.seeds if seed["PERSISTENT"] and seed["SMEM_EPILOGUE"]][0]
    source = render(space, persistent, h200)
    cut = part_costs.without_c_stores(source.code)
    assert "tma_store(&tensor_map_c" not in cut and cut.count("stmatrix_x4(box") == 1
    assert cut.count("tma_store_commit();") == source.code.count("tma_store_commit();")
    _compiled(dataclasses.replace(source, code=cut))
    with pytest.raises(SystemExit, match="no C stores to leave out"):
        part_costs.without_c_stores(render(space, space.config(ONE_TILE_A_BLOCK), h200).code)


def test_main_times_each_kernel_once_a_round_beside_cublas_at_both_sizes(monkeypatch, capsys):
    """The script's run without a GPU: each variant compiled once, launched at the problem's size, the kernel
    as it ships also at the rows that fill the last wave, cuBLAS at both; the report reads those medians."""
    from autotune.gpu import detect, measure
    from autotune.records import Timing

    compiled, launched = [], []
    monkeypatch.setattr(part_costs, "compile_kernel", lambda source, use_cache: compiled.append(source) or source)
    monkeypatch.setattr(part_costs, "_cublas", lambda problem: (f"cuBLAS at M={problem.m}", None))
    monkeypatch.setattr(part_costs, "_kernel", lambda space, config, source, gpu, problem, operands:
                        launched.append((source.code.count("part_costs:"), problem.m)) or f"kernel {problem.m}")
    monkeypatch.setattr(detect, "attached_gpu", lambda: gpu_spec("h200"))
    times = {"cuBLAS at M=4096": 1.0, "cuBLAS at M=4224": 1.03, "kernel 4096": 1.0, "kernel 4224": 1.0}
    monkeypatch.setattr(measure, "time_launches", lambda launch, warmup, repeats: Timing.from_samples([times[launch]]))
    persistent = [seed for seed in load_space("hgemm_wgmma").seeds if seed["PERSISTENT"] and seed["SMEM_EPILOGUE"]][0]
    monkeypatch.setattr(sys, "argv", ["part_costs.py", "--shape", "4096", "--config", persistent.name, "--rounds", "2"])
    part_costs.main()
    assert len(compiled) == 3  # full, no-epilogue, no-c-stores: each once
    assert sorted(launched) == [(0, 4096), (0, 4224), (1, 4096), (1, 4096)]
    out = capsys.readouterr().out
    assert "filled waves at M = 4224" in out and out.count("  round ") == 2
    assert "epilogue: 0.0% of the kernel's time" in out and "filled waves: 1.0312x the work in 1.0000x the time" in out
    assert "ratio to cuBLAS: full 1.000x, at M=4224 1.030x" in out
