from pathlib import Path

import pytest

from autotune.errors import InputError, SpaceError
from autotune.gpus import gpu_spec
from autotune.problem import make_problem
from autotune.space import SearchSpace, load_space, resolve_family
from autotune.survey import feasible_configs

T4, H200 = gpu_spec("t4"), gpu_spec("h200")


@pytest.fixture(scope="module")
def sgemm():
    return load_space("sgemm")


def _with(space, base, **changes):
    return space.config({**base.as_dict(), **changes})


def test_seeds_are_feasible_on_h200(sgemm):
    assert sgemm.seeds
    for seed in sgemm.seeds:
        assert sgemm.check(seed, H200).feasible, seed.name


def test_config_names_are_deterministic_and_unique(sgemm):
    configs = feasible_configs(sgemm, H200)[:2000]
    names = {c.name for c in configs}
    assert len(names) == len(configs)
    seed = sgemm.seeds[0]
    assert sgemm.config(seed.as_dict()) == seed and hash(sgemm.config(seed.as_dict())) == hash(seed)
    assert seed.name.startswith("sgemm_bm128_bn128_bk8_")


def test_static_smem_over_48kb_rejected_with_reason(sgemm):
    base = sgemm.seeds[0]
    big = _with(sgemm, base, BK=32, STAGES=2, SMEM_OPT_IN=0, PAD_A=4, PAD_B=4)
    verdict = sgemm.check(big, T4)
    expected = 4 * 2 * 32 * (132 + 132)
    assert verdict.values["SMEM_BYTES"] == expected
    assert verdict.reason == f"smem {expected / 1024:.1f} KB > 48 KB (t4)"
    assert sgemm.check(big, H200).reason == f"smem {expected / 1024:.1f} KB > 48 KB (h200)"


def test_opt_in_allows_more_where_the_gpu_does(sgemm):
    base = sgemm.seeds[0]
    opted = _with(sgemm, base, BK=32, STAGES=2, SMEM_OPT_IN=1, PAD_A=4, PAD_B=4)  # 66 KB
    assert sgemm.check(opted, H200).feasible
    assert sgemm.check(opted, T4).reason.endswith("> 64 KB opt-in maximum (t4)")
    small = _with(sgemm, base, SMEM_OPT_IN=1)
    assert "opt-in is pointless" in sgemm.check(small, H200).reason


def test_cp_async_needs_sm80(sgemm):
    seed = sgemm.seeds[1]
    assert seed["CP_ASYNC"] == 1
    assert sgemm.check(seed, T4).reason == "cp.async needs sm_80 or newer (t4 is sm_75)"
    assert sgemm.check(seed, gpu_spec("a100")).feasible


def test_thread_layout_rule(sgemm):
    bad = _with(sgemm, sgemm.seeds[0], BM=32, BN=256, TM=8, TN=4, WARPS_M=8)  # 4-row warp tiles
    assert sgemm.check(bad, H200).reason == "warp tile 4x256 does not hold 32 lanes of 8x4"


def test_every_feasible_config_has_a_sane_launch(sgemm):
    problem = make_problem("1000x777x33", "f32")
    for config in feasible_configs(sgemm, H200)[::97]:
        launch = sgemm.launch(config, H200, problem)
        values = sgemm.values(config, H200)
        assert launch.block[0] == values["THREADS"] and 64 <= launch.block[0] <= 1024
        assert launch.grid == (-(-777 // config["BN"]) * config["SPLIT_K"], -(-1000 // config["BM"]), 1)
        assert launch.dynamic_smem == (values["SMEM_BYTES"] if config["SMEM_OPT_IN"] else 0)
        assert values["THR_M"] * values["THR_N"] == 32


def test_bad_knob_values_name_the_choices(sgemm):
    with pytest.raises(InputError, match="BM.*32, 64, 128, 256"):
        sgemm.config({**sgemm.seeds[0].as_dict(), "BM": 96})
    with pytest.raises(InputError, match="knob"):
        sgemm.config({**sgemm.seeds[0].as_dict(), "XX": 1})


def test_a_config_recorded_before_a_knob_existed_gets_the_knobs_default(sgemm):
    assert sgemm.defaults == {"LEAN_BUILD": 0, "SPLIT_K": 1}
    old = {knob: value for knob, value in sgemm.seeds[0].as_dict().items() if knob not in ("LEAN_BUILD", "SPLIT_K")}
    assert sgemm.config(old)["LEAN_BUILD"] == 0 and sgemm.config(old)["SPLIT_K"] == 1
    assert sgemm.config({**old, "LEAN_BUILD": 1})["LEAN_BUILD"] == 1
    without = {knob: value for knob, value in old.items() if knob != "GROUP_M"}  # no default for GROUP_M
    with pytest.raises(InputError, match="a value for every knob"):
        sgemm.config(without)


def test_defaults_must_name_knobs(tmp_path):
    path = _space_file(tmp_path, "A == 1")
    path.write_text(path.read_text().replace("[launch]", "[defaults]\nB = 1\n[launch]"))
    with pytest.raises(SpaceError, match="'B', which is not a knob"):
        SearchSpace(path)


def _space_file(tmp_path, require):
    path = tmp_path / "bad.toml"
    path.write_text(
        'family = "bad"\ndtype = "f32"\ntemplate = "sgemm.cu.j2"\n[knobs]\nA = [1]\n'
        '[launch]\nblock = "1"\ngrid_x = "1"\ngrid_y = "1"\nsmem_bytes = "0"\nopt_in = "0"\ndynamic_smem = "0"\n'
        f'[[rules]]\nrequire = "{require}"\nreason = "r"\n'
    )
    return path


@pytest.mark.parametrize("expression", [
    "__import__('os')", "A.__class__", "gpu._secret", "[x for x in A]", "open('f')",
])
def test_expressions_are_whitelisted(tmp_path, expression):
    with pytest.raises(SpaceError):
        SearchSpace(_space_file(tmp_path, expression))


def test_unknown_family_lists_choices():
    with pytest.raises(InputError, match="sgemm"):
        load_space("nope")


def test_tma_configs_name_their_tensor_maps_and_launch_whole_clusters():
    from autotune.tensor_map import TensorMapSpec

    wgmma, h200 = load_space("hgemm_wgmma"), gpu_spec("h200")
    clustered = next(s for s in wgmma.seeds if s["TMA"] and s["CLUSTER_N"] == 2)
    assert (clustered["WG_M"], clustered["WN"], clustered["BK"]) == (2, 64, 64)  # a 128x64x64 tile
    launch = wgmma.launch(clustered, h200, make_problem("200x136x72", "f16"))
    assert launch.tensor_maps == (
        TensorMapSpec("tensor_map_a", "A", (64, 64), 128),  # half of A's 128 rows per block of the pair
        TensorMapSpec("tensor_map_b", "B", (64, 64), 128),
        TensorMapSpec("tensor_map_c", "C", (64, 16), 128),  # a warp's 16-row strip per TMA store
    )
    assert launch.grid == (4, 2, 1)  # 136 columns need 3 tiles of 64: rounded up to whole clusters of 2
    plain = next(s for s in wgmma.seeds if not s["TMA"])
    assert wgmma.launch(plain, h200, make_problem("200x136x72", "f16")).tensor_maps == ()


def test_tma_rules_reject_with_reasons():
    wgmma, h200 = load_space("hgemm_wgmma"), gpu_spec("h200")
    seed = next(s for s in wgmma.seeds if s["TMA"]).as_dict()
    assert wgmma.check(wgmma.config({**seed, "PRODUCER": 0}), h200).reason == \
        "TMA loads are issued by the producer warpgroup (PRODUCER is 0)"
    assert wgmma.check(wgmma.config({**seed, "TMA": 0, "CLUSTER_M": 2}), h200).reason == \
        "a 1x2 cluster shares tiles through TMA multicast (TMA is 0)"
    old = {knob: value for knob, value in seed.items() if knob not in ("TMA", "CLUSTER_M", "CLUSTER_N")}
    assert wgmma.config({**old, "PRODUCER": 0}).as_dict()["TMA"] == 0  # results from before TMA load as cp.async


def test_tensor_map_entries_are_checked(tmp_path):
    path = _space_file(tmp_path, "A == 1")
    entry = '[[launch.tensor_maps]]\nname = "m"\noperand = "A"\nbox = ["A"]\nswizzle = "128"\n'
    path.write_text(path.read_text().replace("[[rules]]", entry + "[[rules]]"))
    with pytest.raises(SpaceError, match=r"box must be \[columns, rows\]"):
        SearchSpace(path)
    path.write_text(path.read_text().replace('box = ["A"]', 'box = ["A", "300"]'))
    space = SearchSpace(path)
    with pytest.raises(SpaceError, match="each side must be 1..256"):
        space.launch(space.config({"A": 1}), gpu_spec("h200"), make_problem("64", "f32"))


def test_tensor_map_spec_validates_and_knows_operand_shapes():
    from autotune.tensor_map import TensorMapSpec, fits_tma

    spec = TensorMapSpec("tensor_map_b", "B", (64, 32), 128)
    assert spec.shape(m=100, n=200, k=300) == (300, 200)
    assert TensorMapSpec("c", "C", (64, 64), 0).shape(100, 200, 300) == (100, 200)
    for bad in [dict(operand="D"), dict(swizzle=16), dict(box=(257, 8))]:
        with pytest.raises(ValueError):
            TensorMapSpec(**{"name": "x", "operand": "A", "box": (64, 64), "swizzle": 128, **bad})
    assert fits_tma(0x1000, 8, 2) and not fits_tma(0x1008, 8, 2) and not fits_tma(0x1000, 12, 2)


EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "column_sgemm" / "column_sgemm.toml"


def test_the_example_family_loads_from_its_path_and_compiles_offline():
    from autotune.compile import CompileFailure, compile_kernel
    from autotune.render import render

    space = resolve_family(str(EXAMPLE))
    assert (space.family, space.dtype, space.template_dir) == ("column_sgemm", "f32", EXAMPLE.parent)
    for gpu in (T4, H200):
        feasible = feasible_configs(space, gpu)
        assert len(feasible) == space.size - 2  # 64x64 tiles of 2 rows a thread need 2048 threads
        for config in [space.seeds[0], feasible[0], feasible[-1]]:
            source = render(space, config, gpu)
            assert f"{config.name}(" in source.code and source.target == gpu.sm
            compiled = compile_kernel(source)
            assert not isinstance(compiled, CompileFailure), compiled.message
            assert compiled.resources.spill_stores == 0
            assert compiled.resources.smem_static == space.values(config, gpu)["SMEM_BYTES"]


@pytest.mark.gpu
def test_the_example_family_is_searched_and_verified_on_the_gpu(tmp_path):
    from test_cli import autotune

    result = autotune("search", "--gpu", "auto", "--shape", "300x200x100", "--family", str(EXAMPLE),
                      "--trials", "6", "--jobs", "4", "--db", f"sqlite:///{tmp_path}/r.db")
    assert result.returncode == 0, result.stderr
    assert "best: column_sgemm_" in result.stdout and "wrong_answer" not in result.stdout


def test_a_family_named_on_the_command_line_is_a_name_or_a_path(tmp_path):
    assert resolve_family("hgemm_mma") is load_space("hgemm_mma")
    with pytest.raises(InputError, match="or the path of a space file"):
        resolve_family("my_space")  # neither shipped nor a path
    with pytest.raises(InputError, match="no such file"):
        resolve_family("./my_space")
