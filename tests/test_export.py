"""Launch contracts, kernel tables and ``autotune export``/``query --arch`` as users run them."""

import json

import pytest
from conftest import assert_one_line_error, autotune

from autotune.errors import SpaceError
from autotune.expression import SizeExpression
from autotune.gpu_specs import GPUS
from autotune.kernel.contract import LaunchContract, contract_for
from autotune.problem import GemmProblem
from autotune.select.kernel_table import read_table
from autotune.space.family import load_space


@pytest.mark.parametrize("family", ["sgemm", "hgemm_mma", "hgemm_wgmma"])
def test_contract_grid_matches_the_space_for_odd_shapes(family):
    space, gpu = load_space(family), GPUS["h200"]
    for config in space.seeds:
        contract = contract_for(space, config, gpu)
        grid = contract.grid_function()
        for shape in [(1, 1, 1), (1000, 3000, 77), (4096, 4096, 4096), (17, 8191, 300)]:
            want = space.launch(config, gpu, GemmProblem(*shape, space.dtype)).grid
            assert contract.grid_for(*shape) == want == grid(*shape)
        assert LaunchContract.from_dict(json.loads(json.dumps(contract.to_dict()))) == contract


def test_split_k_contract_launches_the_cluster_blocks_of_every_tile():
    space, gpu = load_space("sgemm"), GPUS["h200"]
    seed = next(s for s in space.seeds if s["SPLIT_K"] == 4 and s["BM"] == 16 and s["BN"] == 128)
    contract = contract_for(space, seed, gpu)
    assert contract.grid == ("cdiv(N, 128) * 4", "cdiv(M, 16)", "1")
    assert SizeExpression(contract.grid[0]).to_c() == "(AUTOTUNE_CDIV(N, 128) * 4)"
    assert contract.grid_for(1, 4096 + 24, 14336 + 8) == (33 * 4, 1, 1)
    assert contract.grid_for(33, 4096, 7) == (128, 3, 1)
    assert (contract.block, contract.dynamic_smem, contract.opt_in) == ((128, 1, 1), 0, False)


def test_grid_expressions_are_plain_and_have_a_c_form():
    space = load_space("hgemm_wgmma")
    contract = contract_for(space, space.seeds[0], GPUS["h200"])
    assert contract.grid[0].startswith("cdiv(N, ") and "problem" not in contract.grid[0]
    assert SizeExpression("cdiv(N, 128) * 2 if M > 3 else max(K // 2, 1)").to_c() == \
        "((M > 3) ? (AUTOTUNE_CDIV(N, 128) * 2) : AUTOTUNE_MAX((K / 2), 1))"
    for bad in ["__import__('os')", "M ** 99", "N.real", "lambda: 1", "X + 1"]:
        with pytest.raises(SpaceError):
            SizeExpression(bad)


def test_export_json_and_python_from_the_shipped_results(tmp_path):
    result = autotune("export", "--gpu", "h200", "--shipped", "--format", "json", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    data = json.loads((tmp_path / "autotune_table_h200.json").read_text())
    assert data["schema_version"] == 2 and data["arch"] == "sm_90" and data["gpu"] == "h200"
    assert data["measured_on"] == ["NVIDIA H200"] and set(data["dtypes"]) == {"f32", "f16", "bf16"}
    f16 = data["dtypes"]["f16"]
    assert {r["kernel"] for r in f16["rules"]} == {k["name"] for k in f16["kernels"]}
    assert all(k["launch"]["target"] == ("sm_90a" if k["name"].startswith("hgemm_wgmma") else "sm_90")
               for k in f16["kernels"])  # wgmma exists only in the arch-specific target
    assert all("cubin_base64" not in k for k in f16["kernels"])
    assert all(r["ratio_to_cublas"] > 0.5 for r in f16["rules"])

    result = autotune("export", "--gpu", "h200", "--shipped", "--dtype", "f32", "--format", "python",
                      "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    table = read_table(tmp_path / "autotune_table_h200_with_cubins.json")
    assert set(table.dtypes) == {"f32"}
    for kernel in table.dtypes["f32"].kernels:
        assert kernel.cubin[:4] == b"\x7fELF" and kernel.resources.registers > 0


def test_export_refuses_what_it_cannot_serve(tmp_path):
    assert_one_line_error(autotune("export", "--gpu", "h100", "--shipped", "--out", str(tmp_path)),
                          "'h100'", "h200", "--arch sm_90")
    assert_one_line_error(autotune("export", "--arch", "sm_99", "--shipped", "--out", str(tmp_path)), "sm_90")
    assert_one_line_error(autotune("export", "--gpu", "h200", "--dtype", "f32,f64", "--shipped",
                                   "--out", str(tmp_path)), "'f64'", "f32, f16, bf16")
    assert_one_line_error(autotune("export", "--gpu", "h200", "--format", "zip", "--shipped",
                                   "--out", str(tmp_path)), "'zip'", "cuda")
    assert list(tmp_path.iterdir()) == []


def test_query_per_architecture_and_same_architecture_stand_in(tmp_path):
    db = f"sqlite:///{tmp_path}/r.db"
    assert autotune("results", "import", "tests/data/h200-v1.jsonl", "--db", db).returncode == 0
    result = autotune("query", "--arch", "sm_90", "--shape", "4096", "--dtype", "f16", "--db", db, "--json")
    rows = json.loads(result.stdout)
    assert rows and all(r["arch"] == "sm_90" and r["gpu_name"] == "NVIDIA H200" for r in rows)
    assert not rows[0]["same_architecture_stand_in"]
    result = autotune("query", "--gpu", "h100", "--shape", "4096", "--dtype", "f16", "--db", db)
    assert result.returncode == 0, result.stderr
    assert "no results for h100" in result.stdout and "h200 (same sm_90)" in result.stdout
    assert "NVIDIA H200*" in result.stdout
    assert "no results for a100" in autotune("query", "--gpu", "a100", "--shape", "4096", "--db", db).stdout
    assert_one_line_error(autotune("query", "--shape", "64", "--db", db), "--gpu", "--arch")
