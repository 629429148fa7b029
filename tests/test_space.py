from pathlib import Path

import pytest

from autotune.errors import InputError, SpaceError
from autotune.gpu_specs import gpu_spec
from autotune.problem import make_problem
from autotune.space.family import SearchSpace, load_space, resolve_family
from autotune.space.survey import feasible_configs

T4, H200 = gpu_spec("t4"), gpu_spec("h200")


@pytest.fixture(scope="module")
def sgemm():
    return load_space("sgemm")


# Knobs that change how a tile is copied and read, not its shape, threads or split: pinned to their plain
# values for the survey below, which then walks 0.6 million combinations instead of 160 million.
COPY_KNOBS = {"PAD_A": [0], "PAD_B": [0], "PREFETCH": [0], "GROUP_M": [1], "LEAN_BUILD": [0], "LANE_PAIRS": [0],
              "COPY_SPREAD": [0], "COPY_PTRS": [0]}
DECODE = make_problem("1x4096x14336", "f32")


@pytest.fixture(scope="module")
def llm_decode_survey(sgemm):
    """sgemm on an H200 for an LLM's decode step (one row, long K), its copy knobs pinned (COPY_KNOBS): the
    feasible tiles, thread layouts and splits that the tests below share."""
    from autotune.space.subspace import pin
    from autotune.space.survey import survey

    return survey(pin(sgemm, COPY_KNOBS), H200, DECODE)


def _with(space, base, **changes):
    return space.config({**base.as_dict(), **changes})


def test_seeds_are_feasible_on_h200(sgemm):
    assert sgemm.seeds
    for seed in sgemm.seeds:
        assert sgemm.check(seed, H200).feasible, seed.name


def test_config_names_are_deterministic_and_unique(sgemm, llm_decode_survey):
    configs = [verdict.config for verdict in llm_decode_survey.feasible[:2000]]
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


def test_every_feasible_config_has_a_sane_launch(sgemm, llm_decode_survey):
    problem = make_problem("1000x777x33", "f32")
    for config in [verdict.config for verdict in llm_decode_survey.feasible[::97]]:
        launch = sgemm.launch(config, H200, problem)
        values = sgemm.values(config, H200)
        assert launch.block[0] == values["THREADS"] and 64 <= launch.block[0] <= 1024
        assert launch.grid == (-(-777 // config["BN"]) * config["SPLIT_K"], -(-1000 // config["BM"]), 1)
        assert launch.dynamic_smem == (values["SMEM_BYTES"] if config["SMEM_OPT_IN"] else 0)
        assert values["THR_M"] * values["THR_N"] == 32


SPLIT_REASON = ("split-K by {} sums partial tiles through a thread-block cluster's distributed shared memory: "
                "sm_90 or newer ({} is sm_{})")


def test_split_k_needs_sm90_small_m_tiles_and_16_byte_loads(sgemm):
    split = [seed for seed in sgemm.seeds if seed["SPLIT_K"] > 1]
    assert {seed["SPLIT_K"] for seed in split} == {2, 4, 8}
    for seed in split:
        assert sgemm.check(seed, H200).feasible, seed.name
        for gpu in (T4, gpu_spec("a100")):
            assert sgemm.check(seed, gpu).reason == SPLIT_REASON.format(seed["SPLIT_K"], gpu.key, gpu.arch)
        assert sgemm.check(_with(sgemm, seed, SPLIT_K=1), T4).reason != SPLIT_REASON.format(1, "t4", 75)
    seed = split[0]
    wide = _with(sgemm, seed, BM=128, TM=8, TN=8, WARPS_M=4, STAGES=2)  # feasible without split-K
    assert sgemm.check(_with(sgemm, wide, SPLIT_K=1), H200).feasible
    assert sgemm.check(wide, H200).reason == f"split-K by {seed['SPLIT_K']} is built for tiles of at most 64 rows (BM is 128)"
    assert sgemm.check(_with(sgemm, seed, VEC=2), H200).reason == f"split-K by {seed['SPLIT_K']} is built for 16-byte loads (VEC 4, not 2)"


def test_split_k_shared_memory_holds_the_partial_tile(sgemm):
    seed = next(seed for seed in sgemm.seeds if seed["SPLIT_K"] > 1 and seed["BM"] == 16)
    values = sgemm.check(seed, H200).values
    assert values["REDUCE_BYTES"] == 4 * 16 * (seed["BN"] + 4)
    assert values["SMEM_BYTES"] == max(values["PIPELINE_BYTES"], values["REDUCE_BYTES"])
    # 64x256: the partial tile (66560 B) outgrows 48 KB of stages and needs the opt-in
    big = _with(sgemm, seed, BM=64, BN=256, BK=8, TM=8, TN=8, WARPS_M=2, STAGES=2, CP_ASYNC=0)
    assert sgemm.check(big, H200).reason == "smem 65.0 KB > 48 KB (h200)"
    assert sgemm.check(_with(sgemm, big, SMEM_OPT_IN=1), H200).feasible
    assert sgemm.check(_with(sgemm, big, SPLIT_K=1), H200).values["SMEM_BYTES"] == 4 * 2 * 8 * (68 + 256)


def _tile_cover(values):
    """The (row, column) of every accumulator of every thread, as the template's epilogue maps them."""
    cells = []
    for tid in range(values["THREADS"]):
        warp, lane = divmod(tid, 32)
        warp_m, warp_n = divmod(warp, values["WARPS_N"])
        lane_m, lane_n = divmod(lane, values["THR_N"])
        for g in range(values["TM"] // 4):
            for i in range(4):
                row = warp_m * values["WTM"] + g * values["THR_M"] * 4 + lane_m * 4 + i
                for h in range(values["TN"] // 4):
                    for j in range(4):
                        cells.append((row, warp_n * values["WTN"] + h * values["THR_N"] * 4 + lane_n * 4 + j))
    return cells


def test_one_row_long_k_problem_gets_split_k_and_small_m_tiles(sgemm, llm_decode_survey):
    feasible = [verdict.values for verdict in llm_decode_survey.feasible]  # knob and derived values
    kinds = {(values["SPLIT_K"], values["BM"]) for values in feasible}
    assert {(split, bm) for split in (1, 2, 4, 8) for bm in (16, 32, 64)} <= kinds
    assert {bm for split, bm in kinds if split > 1} == {16, 32, 64}
    assert all(sgemm.check(seed, H200, DECODE).feasible for seed in sgemm.seeds)
    split = sum(values["SPLIT_K"] > 1 for values in feasible)
    print(f"feasible at 1x4096x14336 on h200: {len(feasible)}, {split} of them split-K")
    assert 0 < split < len(feasible)


def test_small_m_thread_layouts_cover_the_tile_once(llm_decode_survey):
    """Every distinct 16- and 32-row layout the rules let through gives each tile element to one thread."""
    layouts = {}
    for verdict in llm_decode_survey.feasible:
        v = verdict.values
        if v["BM"] <= 32:
            layouts.setdefault((v["BM"], v["BN"], v["TM"], v["TN"], v["WARPS_M"]), v)
    assert {bm for bm, *_ in layouts} == {16, 32} and len(layouts) >= 10
    for (bm, bn, *_), values in layouts.items():
        cells = _tile_cover(values)
        assert len(cells) == bm * bn and set(cells) == {(r, c) for r in range(bm) for c in range(bn)}, values


def test_bad_knob_values_name_the_choices(sgemm):
    with pytest.raises(InputError, match="BM.*16, 32, 64, 128, 256"):
        sgemm.config({**sgemm.seeds[0].as_dict(), "BM": 96})
    with pytest.raises(InputError, match="knob"):
        sgemm.config({**sgemm.seeds[0].as_dict(), "XX": 1})


def test_a_config_recorded_before_a_knob_existed_gets_the_knobs_default(sgemm):
    assert sgemm.defaults == {"LEAN_BUILD": 0, "SPLIT_K": 1, "LANE_PAIRS": 0, "COPY_SPREAD": 0, "COPY_PTRS": 0,
                              "WHOLE_TILES": 0}
    old = {knob: value for knob, value in sgemm.seeds[0].as_dict().items() if knob not in sgemm.defaults}
    assert {knob: sgemm.config(old)[knob] for knob in sgemm.defaults} == sgemm.defaults
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
    from autotune.kernel_abi import TensorMapSpec

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
    from autotune.kernel_abi import TensorMapSpec, fits_tma

    spec = TensorMapSpec("tensor_map_b", "B", (64, 32), 128)
    assert spec.shape(m=100, n=200, k=300) == (300, 200)
    assert TensorMapSpec("c", "C", (64, 64), 0).shape(100, 200, 300) == (100, 200)
    for bad in [dict(operand="D"), dict(swizzle=16), dict(box=(257, 8))]:
        with pytest.raises(ValueError):
            TensorMapSpec(**{"name": "x", "operand": "A", "box": (64, 64), "swizzle": 128, **bad})
    assert fits_tma(0x1000, 8, 2) and not fits_tma(0x1008, 8, 2) and not fits_tma(0x1000, 12, 2)


EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "column_sgemm" / "column_sgemm.toml"


def test_the_example_family_loads_from_its_path_and_compiles_offline():
    from autotune.kernel.compile import CompileFailure, compile_kernel
    from autotune.kernel.render import render

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


def _public_design(sgemm):
    """The seed of the public 128x256x8 design: cp.async with register prefetch, lanes in 2x2 groups, spread copies."""
    return next(s for s in sgemm.seeds if s["COPY_SPREAD"] and s["LANE_PAIRS"] and s["CP_ASYNC"])


def test_register_prefetch_runs_with_cp_async_at_two_and_three_stages(sgemm):
    seed = _public_design(sgemm)
    assert (seed["BM"], seed["BN"], seed["BK"], seed["TM"], seed["TN"], seed["STAGES"]) == (128, 256, 8, 16, 8, 2)
    assert sgemm.check(seed, H200).values["WARPS_N"] == 4 and sgemm.check(seed, H200).values["WTM"] == 64
    assert sgemm.check(_with(sgemm, seed, STAGES=3), H200).feasible
    assert sgemm.check(_with(sgemm, seed, COPY_SPREAD=0), H200).feasible
    single = _with(sgemm, sgemm.seeds[0], STAGES=1, PREFETCH=1)
    assert sgemm.check(single, H200).reason == "register prefetch is built for 2 or more stages (STAGES is 1)"


def test_copy_spread_needs_cp_async_with_register_prefetch(sgemm):
    seed = _public_design(sgemm)
    reason = "spreading the copies over the k-steps is built for cp.async with register prefetch (CP_ASYNC {}, PREFETCH {})"
    assert sgemm.check(_with(sgemm, seed, PREFETCH=0), H200).reason == reason.format(1, 0)
    assert sgemm.check(_with(sgemm, seed, CP_ASYNC=0, VEC=4), H200).reason == reason.format(0, 1)
    assert sgemm.check(_with(sgemm, seed, COPY_SPREAD=0, PREFETCH=0), H200).feasible
    assert sgemm.check(seed, T4).reason == "cp.async needs sm_80 or newer (t4 is sm_75)"


def test_lane_pairs_only_where_they_change_the_kernel(sgemm):
    pairs = _with(sgemm, sgemm.seeds[0], LANE_PAIRS=1)  # 128x128, 8x8, 4 warps along M: 4x8 lanes
    assert sgemm.check(pairs, T4).feasible and sgemm.check(pairs, H200).feasible
    one_row = _with(sgemm, pairs, BM=64, BN=256, WARPS_M=8)  # warp tile 8x256: 1x32 lanes
    assert sgemm.check(one_row, H200).reason == ("lanes in 2x2 groups change nothing in a warp of 1x32 lanes "
                                                 "(same kernel as without)")
    two_columns = _with(sgemm, pairs, BM=256, BN=32, WARPS_M=2)  # warp tile 128x16: 16x2 lanes
    assert sgemm.check(two_columns, H200).reason.endswith("in a warp of 16x2 lanes (same kernel as without)")
    assert sgemm.check(_with(sgemm, two_columns, LANE_PAIRS=0), H200).feasible


def test_register_estimate_of_cp_async_with_prefetch(sgemm):
    """Calibrated on ptxas for sm_90: a 16x8 micro-tile with register prefetch fits the public design's copied
    chunks per thread, not 18 (32x256x16 by 64 threads, 16-byte copies); 512 threads leave 128 registers, too
    few for a 16x4 micro-tile with both fragments twice."""
    seed = _public_design(sgemm)
    assert sgemm.check(seed, H200).feasible
    narrow = _with(sgemm, seed, BM=32, BN=256, BK=16, WARPS_M=1, VEC=4)
    assert sgemm.check(narrow, H200).reason == (
        "a 16x8 micro-tile with register prefetch and 64 threads copying 32x16 and 16x256 tiles 4 floats at a time "
        "with cp.async spills")
    staged = sgemm.check(_with(sgemm, narrow, CP_ASYNC=0, COPY_SPREAD=0), H200).reason  # the older rules judge it
    assert staged is None or "with cp.async spills" not in staged
    wide = _with(sgemm, seed, BM=128, BN=256, BK=16, TM=16, TN=4, WARPS_M=4, VEC=4, SMEM_OPT_IN=1)
    assert sgemm.check(wide, H200).values["THREADS"] == 512
    assert "16x4 micro-tile with register prefetch and 512 threads" in sgemm.check(wide, H200).reason


# -- knobs the problem sets ([specialize]) ---------------------------------------------------------------


def test_whole_tiles_is_built_only_for_problems_of_whole_tiles(sgemm):
    """WHOLE_TILES 1 is valid where M and N are multiples of the block tile and K of VEC, unsplit; 0 anywhere."""
    base = _public_design(sgemm)  # 128x256 tiles, VEC 4
    whole, anywhere = _with(sgemm, base, WHOLE_TILES=1), _with(sgemm, base, WHOLE_TILES=0)
    for shape in ("4096", "128x256x4", "256x512x1028"):
        assert sgemm.check(whole, H200, make_problem(shape, "f32")).feasible, shape
    for shape in ("4000x4096x4096", "4096x4000x4096", "4096x4096x4098", "1x4096x14336"):
        verdict = sgemm.check(whole, H200, make_problem(shape, "f32"))
        assert not verdict.feasible and "WHOLE_TILES 1 builds the kernel" in verdict.reason, shape
    for shape in ("4096", "4000x4096x4098"):
        assert sgemm.check(anywhere, H200, make_problem(shape, "f32")).feasible, shape
    assert sgemm.check(whole, H200).feasible  # without a problem: a GPU can run it on some


def test_a_search_tries_each_config_in_the_build_its_problem_sets(sgemm):
    base = _public_design(sgemm)
    at_4096, at_4000 = make_problem("4096", "f32"), make_problem("4000x4096x4096", "f32")
    assert sgemm.for_problem(base, H200, at_4096)["WHOLE_TILES"] == 1
    assert sgemm.for_problem(_with(sgemm, base, WHOLE_TILES=1), H200, at_4000)["WHOLE_TILES"] == 0
    split = _with(sgemm, base, BM=16, TM=4, TN=4, WARPS_M=1, SPLIT_K=4, STAGES=3, PREFETCH=0, COPY_SPREAD=0,
                  LEAN_BUILD=0, LANE_PAIRS=0)
    assert sgemm.for_problem(split, H200, at_4096)["WHOLE_TILES"] == 0  # split over K: never whole tiles
    whole = _with(sgemm, base, WHOLE_TILES=1)
    assert sgemm.for_problem(whole, H200, at_4096) == whole
    assert sgemm.for_problem(_with(sgemm, base, WHOLE_TILES=0), H200, at_4096) != _with(sgemm, base, WHOLE_TILES=0)
    assert sgemm.build_for(whole, H200, at_4096) == whole  # what runs on a shape: the build for it, or for any
    assert sgemm.build_for(whole, H200, at_4000) == _with(sgemm, base, WHOLE_TILES=0)
    assert sgemm.for_any_problem(_with(sgemm, base, WHOLE_TILES=1)) == _with(sgemm, base, WHOLE_TILES=0)


def test_a_search_draws_whole_tile_builds_where_the_problem_has_whole_tiles(sgemm):
    from autotune.search.draws import FeasibleDraws

    for shape, whole in (("4096", {0, 1}), ("4001x4096x4096", {0}), ("4096x4001x4096", {0})):
        problem = make_problem(shape, "f32")
        draws = FeasibleDraws(sgemm, H200, problem, seed=1)
        opening = draws.opening(40)
        assert all(sgemm.check(c, H200, problem).feasible for c in opening)
        assert all(c["WHOLE_TILES"] == int(c["SPLIT_K"] == 1 and sgemm.check(_with(sgemm, c, WHOLE_TILES=1), H200,
                                                                            problem).feasible) for c in opening)
        assert {c["WHOLE_TILES"] for c in opening} == whole, shape
        seeds = [c for c in opening if sgemm.for_any_problem(c) in set(sgemm.seeds)]
        assert len(seeds) >= len(sgemm.seeds) - 6, shape  # the seeds, in their build for the problem


def _specialize_file(tmp_path, knob_values="[0, 1]", default="0", expression="problem.m % A == 0"):
    path = tmp_path / "spec.toml"
    path.write_text(
        'family = "spec"\ndtype = "f32"\ntemplate = "sgemm.cu.j2"\n'
        f'[knobs]\nA = [16, 32]\nW = {knob_values}\n[defaults]\nW = {default}\n'
        '[launch]\nblock = "32"\ngrid_x = "cdiv(problem.n, A)"\ngrid_y = "1"\nsmem_bytes = "0"\nopt_in = "0"\n'
        'dynamic_smem = "0"\n'
        f'[specialize]\nW = "{expression}"\n'
    )
    return path


def test_a_specialized_knob_is_read_from_the_space_file(tmp_path):
    from autotune.kernel.contract import contract_for

    space = SearchSpace(_specialize_file(tmp_path))
    config = space.config({"A": 32, "W": 1})
    assert space.check(config, H200, make_problem("64x10x10", "f32")).feasible
    assert not space.check(config, H200, make_problem("48x10x10", "f32")).feasible
    launch = contract_for(space, config, H200)
    assert launch.serves == "(M % 32 == 0)"
    assert launch.serves_shape(64, 5, 5) and not launch.serves_shape(48, 5, 5)
    assert contract_for(space, space.config({"A": 32, "W": 0}), H200).serves == "1"


@pytest.mark.parametrize("changes, message", [
    ({"knob_values": "[0, 1, 2]"}, "expected a knob of values \\[0, 1\\] with default 0"),
    ({"default": "1"}, "expected a knob of values"),
    ({"expression": "A == 16"}, "does not read the problem"),
    ({"expression": "problem.m % B == 0"}, "'B'"),
])
def test_a_bad_specialized_knob_is_one_line_naming_it(tmp_path, changes, message):
    with pytest.raises(SpaceError, match=message):
        SearchSpace(_specialize_file(tmp_path, **changes))


def test_a_whole_tile_build_is_never_launched_on_a_shape_it_is_not_built_for(sgemm):
    """Whatever names it (a config given by hand, a stale record), the task that would launch a build for
    whole tiles on a shape of partial ones is a launch failure naming both, not a fault on the GPU."""
    from autotune.errors import FailureClass
    from autotune.kernel.compile import CompiledKernel
    from autotune.records import Failure, Resources
    from autotune.search.evaluate import kernel_task

    whole = _with(sgemm, _public_design(sgemm), WHOLE_TILES=1)
    compiled = CompiledKernel(whole.name, "sm_90", b"", Resources(128, 0, 0, 0, 0, 0), "")
    odd = make_problem("4000x4096x4096", "f32")
    task = kernel_task(sgemm, whole, compiled, H200, odd, seed=1, warmup=1, repeats=1)
    assert isinstance(task, Failure) and task.failure_class == FailureClass.LAUNCH_ERROR.value
    assert task.message == f"{whole.name} is built for problems where [specialize] WHOLE_TILES holds, not 4000x4096x4096"
    assert sgemm.unbuilt_for(whole, H200, make_problem("4096", "f32")) is None
    assert sgemm.unbuilt_for(sgemm.for_any_problem(whole), H200, odd) is None
