"""Render and NVRTC-compile real configs offline; no GPU involved."""

from pathlib import Path

import pytest

from autotune.gpu_specs import gpu_spec
from autotune.kernel.compile import CompileFailure, compile_kernel, parse_resources
from autotune.kernel.render import KernelSource, render
from autotune.kernel.resources import resource_violation
from autotune.problem import make_problem
from autotune.records import Resources
from autotune.space.family import SearchSpace, load_space
from autotune.space.survey import feasible_configs

LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k' for 'sm_90'
ptxas info    : Function properties for k
ptxas         .     16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 128 registers, used 1 barriers, 49152 bytes smem, 396 bytes cmem[0]
"""


def test_parse_resources_reads_ptxas_report():
    r = parse_resources(LOG, dynamic_smem=1024)
    assert r == Resources(registers=128, smem_static=49152, smem_dynamic=1024, spill_stores=8, spill_loads=12,
                          stack_frame=16)
    assert r.smem_total == 50176


@pytest.mark.parametrize("gpu", ["t4", "a100", "h200"])
def test_seeds_compile_without_spills_and_smem_matches_estimate(gpu, pool):
    spec = gpu_spec(gpu)
    space = load_space("sgemm")
    seeds = [seed for seed in space.seeds if space.check(seed, spec).feasible]
    sources = [render(space, seed, spec) for seed in seeds]
    for seed, source, compiled in zip(seeds, sources, pool.map(sources, spec.sm)):
        assert f"{seed.name}(" in source.code
        assert not isinstance(compiled, CompileFailure), compiled
        res = compiled.resources
        assert 32 < res.registers <= 255
        dynamic = space.values(seed, spec)["SMEM_BYTES"] if seed["SMEM_OPT_IN"] else 0
        assert res.smem_static + dynamic == space.values(seed, spec)["SMEM_BYTES"]
        launch_threads = space.values(seed, spec)["THREADS"]
        res = Resources(**{**res.__dict__, "smem_dynamic": dynamic})
        assert resource_violation(res, launch_threads, spec, opt_in=bool(seed["SMEM_OPT_IN"])) is None
        assert compiled.cubin[:4] == b"\x7fELF"


def test_opt_in_kernel_uses_dynamic_smem():
    spec = gpu_spec("h200")
    space = load_space("sgemm")
    config = space.config({**space.seeds[1].as_dict(), "BK": 16, "STAGES": 3, "SMEM_OPT_IN": 1})
    assert space.check(config, spec).feasible
    compiled = compile_kernel(render(space, config, spec), spec.sm)
    assert compiled.resources.smem_static == 0  # all of it is dynamic
    assert space.values(config, spec)["SMEM_BYTES"] > 48 * 1024


def test_compile_error_is_reported_not_raised():
    result = compile_kernel(KernelSource("broken", 'extern "C" __global__ void broken() { int x = ; }', "h"),
                            "sm_90")
    assert isinstance(result, CompileFailure)
    assert "error" in result.message


COMPILE_IN_A_FRESH_PROCESS = """
import sys
from autotune.kernel.compile import compile_kernel
from autotune.kernel.source import KernelSource
compiled = compile_kernel(KernelSource("k", 'extern "C" __global__ void k(float *x) { x[threadIdx.x] = 1.0f; }', "h"),
                          "sm_90", use_cache=False)
print(compiled.resources.registers > 0, sorted({name.split(".")[0] for name in sys.modules} & {"numpy", "cupy", "jinja2"}))
"""


def test_a_compile_process_loads_nvrtc_alone_not_cupy_numpy_or_jinja():
    """Each compile process of a search starts on its own: CuPy, NumPy and Jinja would cost it a
    third of a second or more before its first compile."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", COMPILE_IN_A_FRESH_PROCESS], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["True", "[]"]


def test_a_prefetched_compile_is_handed_to_the_first_submit_of_its_source_even_once_finished(pool, tmp_path,
                                                                                         monkeypatch):
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path))
    source = KernelSource("k", 'extern "C" __global__ void k(float *x) { x[threadIdx.x] = 2.0f; }', "h", "sm_90")
    pool.prefetch(source)
    prefetched = pool._prefetched[(source.code, "sm_90")]
    prefetched.result(timeout=120)  # finished before the caller submits it
    handed = pool.submit(source)
    assert handed is prefetched and handed.result().seconds > 0  # that compile, with its timing
    again = pool.submit(source)  # a second submit is a compile of its own (here from the disk cache)
    assert again is not prefetched and again.result(timeout=120).seconds == 0


def test_cache_returns_the_same_cubin(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path))
    space, spec = load_space("sgemm"), gpu_spec("h200")
    source = render(space, space.seeds[2], spec)
    first = compile_kernel(source, spec.sm)
    assert list(tmp_path.glob("cubins/*.cubin"))
    second = compile_kernel(source, spec.sm)
    assert second.cubin == first.cubin and second.resources == first.resources


def test_resource_violations():
    spec = gpu_spec("t4")
    fits = Resources(registers=128, smem_static=16384, smem_dynamic=0, spill_stores=0, spill_loads=0,
                     stack_frame=0)
    assert resource_violation(fits, 256, spec, opt_in=False) is None
    assert "65536" in resource_violation(fits, 1024, spec, opt_in=False)
    spills = Resources(64, 0, 0, 4, 4, 8)
    assert resource_violation(spills, 128, spec, opt_in=False).startswith("spills")
    big = Resources(64, 0, 60 * 1024, 0, 0, 0)
    assert resource_violation(big, 128, spec, opt_in=False) == "ptxas smem 60.0 KB > 48 KB (t4)"
    assert resource_violation(big, 128, spec, opt_in=True) is None


@pytest.mark.parametrize("gpu", ["t4", "a100", "h200"])
def test_cubin_resources_match_the_ptxas_report(gpu):
    """The fallback used when NVRTC's log has no ptxas report reads the same numbers from the cubin: for each
    seed the GPU can run (tiles from 16x64 to 256x128, split-K clusters, static and opt-in shared memory;
    built by the test above, so read from the session's cache here)."""
    from autotune.kernel.cubin import read_resources

    spec, space = gpu_spec(gpu), load_space("sgemm")
    configs = [seed for seed in space.seeds if space.check(seed, spec).feasible]
    for config in configs:
        compiled = compile_kernel(render(space, config, spec), spec.sm)
        from_cubin = read_resources(compiled.cubin, compiled.entry)
        assert from_cubin.registers == compiled.resources.registers
        assert from_cubin.smem_static == compiled.resources.smem_static
        assert (from_cubin.stack_frame > 0) == (compiled.resources.stack_frame > 0)
        assert (from_cubin.spill_stores > 0) == (compiled.resources.spill_stores > 0)


def test_cubin_resources_of_kernels_with_no_or_only_dynamic_shared_memory_match_the_ptxas_report():
    """sm_90 cubins hold a reserved shared-memory section: a kernel that uses none has no section of its own
    (static 0, not minus the reserved 1 KB), one with only dynamic shared memory a section of the reserved
    1 KB alone (static 0)."""
    from autotune.kernel.cubin import read_resources

    spec = gpu_spec("h200")
    tiny = SearchSpace(Path(__file__).parent / "data" / "tiny.toml")
    wgmma = load_space("hgemm_wgmma")
    for space, config in [(tiny, tiny.config({"ROWS": 2, "COLS": 2, "UNROLL": 2, "SKEW": 0})),
                          (wgmma, wgmma.seeds[0])]:
        compiled = compile_kernel(render(space, config, spec))
        assert not isinstance(compiled, CompileFailure), compiled.message
        from_cubin = read_resources(compiled.cubin, compiled.entry)
        assert from_cubin.smem_static == compiled.resources.smem_static == 0
        assert from_cubin.registers == compiled.resources.registers


def every_knob_value(space, spec, feasible, rng):
    """A few feasible configs that between them give each knob every value it takes in a feasible
    config: each the candidate (the feasible seeds first, then a random thousand) that adds the most
    values still missing."""
    missing = {pair for config in feasible for pair in config.params}
    candidates = [s for s in space.seeds if space.check(s, spec).feasible]
    candidates += rng.sample(feasible, min(1000, len(feasible)))
    chosen = []
    while missing:
        best = max(candidates, key=lambda config: len(missing.intersection(config.params)))
        if missing.isdisjoint(best.params):  # a value no candidate has: the first feasible config with it
            best = next(config for config in feasible if not missing.isdisjoint(config.params))
        chosen.append(best)
        missing -= set(best.params)
    return chosen


@pytest.mark.parametrize("family, gpu", [("hgemm_wmma", "t4"), ("hgemm_wmma", "h200"), ("hgemm_mma", "a100"),
                                         ("hgemm_mma", "h200"), ("hgemm_wgmma", "h200")])
def test_hgemm_spaces_compile_offline(family, gpu, pool):
    """The tensor-core families render and compile (headers from pip) for sm_75, sm_80, sm_90 and sm_90a,
    with every value of every knob that the GPU can run."""
    import random

    spec, space = gpu_spec(gpu), load_space(family)
    feasible = feasible_configs(space, spec)
    configs = every_knob_value(space, spec, feasible, random.Random(1))
    assert {pair for config in configs for pair in config.params} == {pair for c in feasible for pair in c.params}
    for config, compiled in zip(configs, pool.map(render(space, config, spec) for config in configs)):
        assert not isinstance(compiled, CompileFailure), compiled.message
        assert compiled.resources.registers > 0
        if not config["SMEM_OPT_IN"]:
            assert compiled.resources.smem_static == space.values(config, spec)["SMEM_BYTES"]
    assert all(not c.as_dict().get("CP_ASYNC") for c in configs) or spec.has_cp_async


@pytest.mark.parametrize("family", ["hgemm_wgmma", "hgemm_mma", "hgemm_wmma"])
def test_bf16_seeds_of_every_tensor_core_family_compile_for_sm90_without_spills(family, pool):
    """Each family's seeds built for bf16 (the same template, __nv_bfloat16 and .bf16 PTX operands): NVRTC
    compiles them for sm_90 (sm_90a for wgmma) with no spills and the shared memory the space file counts."""
    spec, space = gpu_spec("h200"), load_space(family, "bf16")
    seeds = [seed for seed in space.seeds if space.check(seed, spec).feasible]
    assert len(seeds) == len(space.seeds) > 0
    sources = [render(space, seed, spec) for seed in seeds]
    assert all(source.target == ("sm_90a" if family == "hgemm_wgmma" else "sm_90") for source in sources)
    for seed, source, compiled in zip(seeds, sources, pool.map(sources)):
        assert seed.name.endswith("_bf16") and f"{seed.name}(" in source.code and "__nv_bfloat16" in source.code
        assert not isinstance(compiled, CompileFailure), f"{seed.name}: {compiled.message}"
        assert compiled.resources.spill_stores == compiled.resources.spill_loads == 0, seed.name
        assert 0 < compiled.resources.registers <= 255
        if not seed["SMEM_OPT_IN"] and "SMEM_BYTES" in space.values(seed, spec):
            assert compiled.resources.smem_static == space.values(seed, spec)["SMEM_BYTES"], seed.name


def test_tensor_core_families_in_order_of_preference():
    from autotune.space.family import families_for_dtype

    # wgmma where the GPU has it (sm_90), then mma.sync, then WMMA; then the ladder-only families
    assert families_for_dtype("f16")[:3] == ["hgemm_wgmma", "hgemm_mma", "hgemm_wmma"]
    wgmma = load_space("hgemm_wgmma")
    assert not feasible_configs(wgmma, gpu_spec("a100"))
    assert wgmma.target(gpu_spec("h200")) == "sm_90a" and load_space("hgemm_mma").target(gpu_spec("h200")) == "sm_90"
    assert wgmma.target(gpu_spec("a100")) == "sm_80"  # no arch-specific target before sm_90
    mma = load_space("hgemm_mma")
    assert not feasible_configs(mma, gpu_spec("t4"))  # m16n8k16 needs sm_80
    assert mma.check(mma.seeds[0], gpu_spec("t4")).reason == "mma.sync m16n8k16 needs sm_80 or newer (t4 is sm_75)"


@pytest.mark.parametrize("dtype, gpu", [("f32", "t4"), ("f32", "h200"), ("f16", "t4"), ("f16", "h200")])
def test_every_ladder_rung_is_feasible_and_compiles(dtype, gpu):
    from autotune.search.ladder import LADDERS

    spec = gpu_spec(gpu)
    for step in LADDERS[dtype]:
        space = load_space(step.family)
        config = space.config(step.params)
        assert space.dtype == dtype
        assert space.check(config, spec).feasible, (step.label, space.check(config, spec).reason)
        compiled = compile_kernel(render(space, config, spec), spec.sm)
        assert not isinstance(compiled, CompileFailure), (step.label, compiled.message)


def test_tma_kernels_take_the_tensor_maps_their_space_names():
    """After the GEMM arguments a TMA kernel takes one 128-byte map per entry of its space file;
    a launch that would pass something else fails before it reaches the GPU."""
    from autotune.kernel.cubin import parameter_sizes
    from autotune.search.evaluate import kernel_task

    wgmma, h200, problem = load_space("hgemm_wgmma"), gpu_spec("h200"), make_problem("1024", "f16")
    tma = [s for s in wgmma.seeds if s["TMA"]]
    assert tma
    for seed in tma:
        compiled = compile_kernel(render(wgmma, seed, h200))
        assert not isinstance(compiled, CompileFailure), compiled.message
        specs = wgmma.launch(seed, h200, problem).tensor_maps
        assert [spec.operand for spec in specs] == ["A", "B", "C"]
        assert parameter_sizes(compiled.cubin, compiled.entry) == (8, 8, 8, 4, 4, 4, 4, 4) + (128,) * len(specs)
    plain = compile_kernel(render(wgmma, wgmma.seeds[0], h200))
    assert parameter_sizes(plain.cubin, plain.entry) == (8, 8, 8, 4, 4, 4, 4, 4)
    mismatch = kernel_task(wgmma, tma[0], plain, h200, problem, seed=0, warmup=1, repeats=1)
    assert mismatch.failure_class == "launch_error" and "takes parameters of" in mismatch.message


@pytest.mark.parametrize("family, gpu", [("sgemm", "t4"), ("hgemm_wmma", "t4"), ("hgemm_mma", "a100")])
def test_kernels_of_older_gpus_take_the_gemm_arguments(family, gpu):
    """The launcher's parameter check reads sm_75 and sm_80 cubins too: A, B, C, M, N, K, alpha, beta."""
    from autotune.kernel.cubin import parameter_sizes

    spec, space = gpu_spec(gpu), load_space(family)
    compiled = compile_kernel(render(space, space.seeds[0], spec))
    assert parameter_sizes(compiled.cubin, compiled.entry) == (8, 8, 8, 4, 4, 4, 4, 4)


SPLIT_VARIANTS = [  # over the 16x128 split-K seed: each main loop and block order of the template, split 2/4/8
    {"SPLIT_K": 2, "STAGES": 2, "CP_ASYNC": 0, "PREFETCH": 1},
    {"SPLIT_K": 8, "STAGES": 2, "CP_ASYNC": 0},
    {"SPLIT_K": 8, "STAGES": 1, "CP_ASYNC": 0, "GROUP_M": 8},
    {"SPLIT_K": 4, "STAGES": 2, "CP_ASYNC": 1, "LEAN_BUILD": 1},
    {"SPLIT_K": 2, "BM": 32, "TM": 8, "TN": 8, "WARPS_M": 1, "BN": 256, "BK": 8},  # 1x4 warps of 32x64
    {"SPLIT_K": 4, "BM": 64, "BN": 256, "BK": 8, "TM": 8, "TN": 8, "WARPS_M": 2, "STAGES": 2, "CP_ASYNC": 0,
     "SMEM_OPT_IN": 1},  # the 66560-byte partial tile in dynamic shared memory
]


def test_split_k_and_small_m_configs_compile_for_sm90_without_spills():
    """The split-K seeds and variants of them build for sm_90 as cluster kernels whose shared memory holds
    the stages or the partial tile; what NVRTC reports is printed (pytest -s)."""
    spec, space = gpu_spec("h200"), load_space("sgemm")
    base = next(s for s in space.seeds if s["SPLIT_K"] > 1 and s["BM"] == 16)
    configs = [s for s in space.seeds if s["SPLIT_K"] > 1 or s["BM"] == 16]
    configs += [space.config({**base.as_dict(), **changes}) for changes in SPLIT_VARIANTS]
    assert {c["SPLIT_K"] for c in configs} == {1, 2, 4, 8} and {c["BM"] for c in configs} == {16, 32, 64}
    assert {c["COPY_PTRS"] for c in configs if c["SPLIT_K"] > 1} == {0, 1}
    for config in configs:
        assert space.check(config, spec).feasible, (config.name, space.check(config, spec).reason)
        values = space.values(config, spec)
        source = render(space, config, spec)
        assert (f"__cluster_dims__({config['SPLIT_K']}, 1, 1)" in source.code) == (config["SPLIT_K"] > 1)
        compiled = compile_kernel(source, spec.sm)
        assert not isinstance(compiled, CompileFailure), compiled.message
        res = compiled.resources
        dynamic = values["SMEM_BYTES"] if config["SMEM_OPT_IN"] else 0
        assert res.smem_static + dynamic == values["SMEM_BYTES"] >= values["REDUCE_BYTES"]
        assert res.spill_stores == res.spill_loads == 0 and res.stack_frame == 0
        assert resource_violation(Resources(**{**res.__dict__, "smem_dynamic": dynamic}), values["THREADS"], spec,
                                  opt_in=bool(config["SMEM_OPT_IN"])) is None
        print(f"{config.name}: {res.registers} registers, {values['SMEM_BYTES']} B shared memory, "
              f"{values['THREADS']} threads")


@pytest.mark.parametrize("gpu", ["t4", "a100"])
def test_small_m_tiles_compile_before_sm90_and_split_k_is_refused_there(gpu):
    spec, space = gpu_spec(gpu), load_space("sgemm")
    split = next(s for s in space.seeds if s["SPLIT_K"] > 1 and s["BM"] == 16)
    assert space.check(split, spec).reason.endswith(f"sm_90 or newer ({gpu} is sm_{spec.arch})")
    unsplit = space.config({**split.as_dict(), "SPLIT_K": 1, "STAGES": 2, "CP_ASYNC": 0})
    for config in [unsplit, space.config({**unsplit.as_dict(), "BM": 32, "TN": 8, "WARPS_M": 2})]:
        assert space.check(config, spec).feasible, space.check(config, spec).reason
        compiled = compile_kernel(render(space, config, spec), spec.sm)
        assert not isinstance(compiled, CompileFailure), compiled.message
        assert compiled.resources.spill_stores == 0 and "__cluster_dims__" not in render(space, config, spec).code


INNER_LOOP_VARIANTS = [  # over the public-design seed: each value of the inner-loop knobs, and their neighbours
    ({"COPY_SPREAD": 0}, ("sm_80", "sm_90")),
    ({"STAGES": 3}, ("sm_90",)),
    ({"LANE_PAIRS": 0, "VEC": 2}, ("sm_90",)),
    ({"BM": 64, "BN": 64, "BK": 16, "TM": 4, "TN": 4, "WARPS_M": 2, "STAGES": 3, "LEAN_BUILD": 0}, ("sm_80", "sm_90")),
    ({"BM": 16, "BN": 128, "BK": 16, "TM": 4, "TN": 4, "WARPS_M": 1, "VEC": 4, "SPLIT_K": 4, "STAGES": 3}, ("sm_90",)),
    # copies from pointers in a split build: each rank's share of K copied like a whole K
    ({"BM": 64, "BN": 128, "TM": 8, "TN": 8, "WARPS_M": 2, "SPLIT_K": 2, "COPY_SPREAD": 0, "COPY_PTRS": 1}, ("sm_90",)),
]


def test_inner_loop_knobs_compile_without_spills(pool):
    """cp.async with register prefetch (one barrier per tile, copies spread or not) and lanes in 2x2 groups build
    for the archs that may run them, in registers; what NVRTC reports is printed (pytest -s)."""
    space = load_space("sgemm")
    seed = next(s for s in space.seeds if s["COPY_SPREAD"] and s["LANE_PAIRS"] and s["CP_ASYNC"])
    pairs_staged = next(s for s in space.seeds if s["LANE_PAIRS"] and not s["CP_ASYNC"])
    configs = [(seed, ("sm_80", "sm_90")), (pairs_staged, ("sm_75", "sm_90"))]
    configs += [(space.config({**seed.as_dict(), **changes}), archs) for changes, archs in INNER_LOOP_VARIANTS]
    gpus = {"sm_75": gpu_spec("t4"), "sm_80": gpu_spec("a100"), "sm_90": gpu_spec("h200")}
    builds = [(config, arch) for config, archs in configs for arch in archs]
    for config, arch in builds:
        assert space.check(config, gpus[arch]).feasible, (config.name, arch, space.check(config, gpus[arch]).reason)
    futures = [pool.submit(render(space, config, gpus[arch]), arch) for config, arch in builds]
    for (config, arch), future in zip(builds, futures):
        compiled = future.result()
        assert not isinstance(compiled, CompileFailure), compiled.message
        res = compiled.resources
        assert res.spill_stores == res.spill_loads == res.stack_frame == 0, (config.name, arch, res)
        print(f"{config.name} {arch}: {res.registers} registers")


def _lane_layout(code: str, thr_m: int, thr_n: int) -> dict[int, tuple[int, int]]:
    """(lane_m, lane_n) of each lane, evaluated from the kernel source's own definition of them."""
    line = next(line for line in code.splitlines() if "const int lane_m =" in line)
    lane_m, lane_n = (part.split("=", 1)[1].strip().rstrip(";")
                      for part in line.strip().removeprefix("const int ").split(", lane_n"))
    names = {"THR_M": thr_m, "THR_N": thr_n}
    return {lane: (eval(lane_m.replace("/", "//"), {}, {**names, "lane": lane}),
                   eval(lane_n.replace("/", "//").lstrip("= "), {}, {**names, "lane": lane})) for lane in range(32)}


def test_lanes_in_pairs_share_fragment_addresses():
    """With LANE_PAIRS a warp's lanes still cover its THR_M x THR_N grid once, lanes l and l^1 read the same
    A fragment and lanes l and l^2 the same B fragment (the pairings that halve a 16-byte read's wavefronts);
    without it the lanes run along N, as the recorded results were measured."""
    space, h200 = load_space("sgemm"), gpu_spec("h200")
    seed = next(s for s in space.seeds if s["COPY_SPREAD"] and s["LANE_PAIRS"] and s["CP_ASYNC"])
    for bm, bn, warps_m, lanes in ((128, 256, 2, (4, 8)), (256, 128, 8, (2, 16)), (256, 128, 2, (8, 4))):
        config = space.config({**seed.as_dict(), "BM": bm, "BN": bn, "WARPS_M": warps_m})
        verdict = space.check(config, h200)
        thr_m, thr_n = verdict.values["THR_M"], verdict.values["THR_N"]
        assert verdict.feasible and (thr_m, thr_n) == lanes
        paired = _lane_layout(render(space, config, h200).code, thr_m, thr_n)
        assert sorted(paired.values()) == [(m, n) for m in range(thr_m) for n in range(thr_n)]
        assert all(paired[lane][0] == paired[lane ^ 1][0] and paired[lane][1] == paired[lane ^ 2][1]
                   for lane in range(32)), (thr_m, thr_n)
        rows = _lane_layout(render(space, space.config({**config.as_dict(), "LANE_PAIRS": 0}), h200).code,
                            thr_m, thr_n)
        assert rows == {lane: (lane // thr_n, lane % thr_n) for lane in range(32)}
        assert not all(rows[lane][1] == rows[lane ^ 2][1] for lane in range(32))  # B reads: 4 wavefronts


def test_a_build_for_whole_tiles_is_the_lean_loop_alone_and_much_smaller(pool):
    """WHOLE_TILES 1 drops the main loop for edge blocks and the epilogue's column checks and scalar stores:
    without spills, it compiles to well under half the SASS of the build for any shape (what makes a
    search's compiles cheap at shapes of whole tiles)."""
    space = load_space("sgemm")
    h200 = gpu_spec("h200")
    lean = [s for s in space.seeds if s["LEAN_BUILD"] and s["SPLIT_K"] == 1]
    assert {s["COPY_PTRS"] for s in lean} == {0, 1}
    builds = [(s, space.config({**s.as_dict(), "WHOLE_TILES": whole})) for s in lean for whole in (0, 1)]
    futures = [pool.submit(render(space, config, h200), "sm_90") for _, config in builds]
    sizes = {}
    for (seed, config), future in zip(builds, futures):
        compiled = future.result()
        assert not isinstance(compiled, CompileFailure), compiled.message
        res = compiled.resources
        assert res.spill_stores == res.spill_loads == res.stack_frame == 0, (config.name, res)
        sizes[(seed.name, config["WHOLE_TILES"])] = len(compiled.cubin)
        code = render(space, config, h200).code
        assert ("if (a_vec_ok && b_vec_ok && m_full && n_full)" in code) == (not config["WHOLE_TILES"])
        assert ("col + 3 < N" in code) == (not config["WHOLE_TILES"])
    for seed in lean:
        assert sizes[(seed.name, 1)] < 0.6 * sizes[(seed.name, 0)], (seed.name, sizes)


def test_resources_refuse_what_is_not_a_count():
    """Resources refuse what is not a count, so a wrong reading never reaches a results database (which
    would then refuse to read the row back)."""
    for bad in (-1024, 1.5, True, None):
        with pytest.raises(ValueError, match=f"smem_static {bad!r} is not a count"):
            Resources(registers=32, smem_static=bad, smem_dynamic=0, spill_stores=0, spill_loads=0, stack_frame=0)
