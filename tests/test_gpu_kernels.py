"""Kernels of every family verified on a real GPU against cuBLAS, at shapes that are not tile multiples."""

import random

import pytest

from autotune.errors import FailureClass
from autotune.kernel.compile import CompileFailure, CompilePool
from autotune.kernel.render import render
from autotune.kernel.resources import resource_violation
from autotune.problem import GemmProblem
from autotune.records import Failure, Measurement
from autotune.space.family import load_space
from autotune.space.survey import feasible_configs

pytestmark = pytest.mark.gpu

ODD_SHAPES = [
    (1, 1, 1), (17, 33, 65), (127, 65, 33), (33, 257, 129), (4097, 129, 31), (129, 4095, 7),
    (64, 64, 64), (255, 255, 1), (3, 1000, 17), (1000, 3, 300), (513, 511, 1025),
    # K and N multiples of 8 but of no tile: the aligned main loops' zero-filled edges
    (200, 264, 72), (129, 136, 520),
]


def _sample_configs(space, gpu, count, seed=0):
    """The seeds, ``count`` random feasible configs, and for every knob value no config has yet, one that has it:
    each in its build for any shape (``[specialize]`` knobs at 0; whole-tile builds have a test of their own)."""
    feasible = list(dict.fromkeys(space.for_any_problem(c) for c in feasible_configs(space, gpu)))
    rng = random.Random(seed)
    configs = list(space.seeds) + rng.sample(feasible, min(count, len(feasible)))
    rng.shuffle(feasible)
    for knob, values in space.knobs.items():
        for value in values:
            if knob not in space.specialized and not any(c[knob] == value for c in configs):
                configs += [c for c in feasible if c[knob] == value][:1]
    return configs


def _run_all(worker, space, gpu, configs, problems):
    from autotune.gpu.tasks import KernelTask

    outcomes = []
    timed_out = set()  # a config that hangs once is not run again: the test fails anyway
    with CompilePool() as pool:
        compiled = list(pool.map(render(space, c, gpu) for c in configs))
    for config, kernel in zip(configs, compiled):
        assert not isinstance(kernel, CompileFailure), kernel
        for problem in problems:
            if config.name in timed_out:
                break
            launch = space.launch(config, gpu, problem)
            if resource_violation(kernel.resources, launch.block[0], gpu, launch.opt_in):
                continue
            task = KernelTask(cubin=kernel.cubin, entry=kernel.entry, grid=launch.grid, block=launch.block,
                              dynamic_smem=launch.dynamic_smem, problem=problem, seed=1, warmup=1, repeats=3,
                              resources=kernel.resources, tensor_maps=launch.tensor_maps, workspace=launch.workspace)
            outcome = worker.run(task, timeout_s=30)
            if isinstance(outcome, Failure) and outcome.failure_class == FailureClass.TIMEOUT.value:
                timed_out.add(config.name)
            outcomes.append((config.name, problem.shape, problem.beta, outcome))
    return outcomes


def _assert_verified(outcomes):
    """Every outcome a verified measurement; the first failures named."""
    bad = [(name, shape, beta, o) for name, shape, beta, o in outcomes if not isinstance(o, Measurement)]
    assert not bad, "\n".join(f"{n} {s} beta={b}: {o.failure_class}: {o.message}" for n, s, b, o in bad[:20])


def _ran_at_every_problem(configs, problems, outcomes, turned_away=3):
    """The configs that ran, each at every problem; at most ``turned_away`` were turned away for spilling."""
    ran = [c for c in configs if any(name == c.name for name, *_ in outcomes)]
    assert len(outcomes) == len(ran) * len(problems) and len(ran) >= len(configs) - turned_away
    return ran


def _both_betas(shapes, dtype):
    """Each shape with beta 0 (C poisoned, must not be read) and with alpha -1.5, beta 0.5."""
    return [GemmProblem(m, n, k, dtype, alpha=alpha, beta=beta) for (m, n, k) in shapes
            for alpha, beta in ((1.0, 0.0), (-1.5, 0.5))]


@pytest.mark.parametrize("family, dtype", [
    ("sgemm", "f32"), ("hgemm_wmma", "f16"), ("hgemm_mma", "f16"), ("hgemm_wgmma", "f16"),
    ("naive_f32", "f32"), ("tiled_f32", "f32"), ("coarse_f32", "f32"),
    ("naive_f16", "f16"), ("tiled_f16", "f16"), ("coarse_f16", "f16"),
])
def test_sampled_configs_verify_at_odd_shapes(worker, family, dtype):
    from autotune.gpu_specs import GPUS

    env = worker.environment()
    gpu = GPUS[env.gpu_key]
    space = load_space(family)
    configs = _sample_configs(space, gpu, 16)
    problems = [GemmProblem(m, n, k, dtype) for (m, n, k) in ODD_SHAPES]
    problems.append(GemmProblem(300, 200, 100, dtype, alpha=-1.5, beta=0.75))
    outcomes = _run_all(worker, space, gpu, configs, problems)
    _assert_verified(outcomes)
    assert len(outcomes) >= min(12, len(configs)) * len(problems)


# Few rows and long K (LLM decode) with edges of every kind: N and K past a multiple of 8, one row, 7 and 33
# rows (partial 16-, 32- and 64-row tiles), K shorter than BK * SPLIT_K (cluster blocks with no k-tile),
# N not a multiple of 4 (scalar stores of C).
SMALL_M_SHAPES = [
    (1, 4096 + 24, 14336 + 8), (7, 4096 + 24, 14336 + 8), (33, 4096 + 24, 14336 + 8), (64, 4096, 14336),
    (1, 4096, 4096), (7, 520, 4099), (33, 130, 20), (17, 257, 3), (1, 1, 1), (5, 1000, 129),
]


def _small_m_configs(space, gpu):
    """The split-K and small-M seeds; for every split factor and tile height of 16, 32 and 64 rows two random
    feasible configs; and split-K configs with every value of the knobs that pick the main loop and block order."""
    feasible = [c for c in dict.fromkeys(space.for_any_problem(c) for c in feasible_configs(space, gpu))
                if c["SPLIT_K"] > 1 or c["BM"] <= 32]
    rng = random.Random(2)
    configs = [s for s in space.seeds if s["SPLIT_K"] > 1 or s["BM"] <= 32]
    for split in space.knobs["SPLIT_K"]:
        for bm in (16, 32, 64):
            group = [c for c in feasible if c["SPLIT_K"] == split and c["BM"] == bm]
            configs += rng.sample(group, min(2, len(group)))
    for knob in ("STAGES", "CP_ASYNC", "PREFETCH", "SMEM_OPT_IN", "GROUP_M", "LEAN_BUILD", "LANE_PAIRS", "COPY_SPREAD"):
        for value in space.knobs[knob]:
            split_with = [c for c in feasible if c["SPLIT_K"] > 1 and c[knob] == value]
            if split_with and not any(c["SPLIT_K"] > 1 and c[knob] == value for c in configs):
                configs.append(rng.choice(split_with))
    return list(dict.fromkeys(configs))


def test_split_k_and_small_m_configs_verify_at_llm_decode_shapes(worker):
    """sgemm's split-K clusters and 16/32-row tiles against cuBLAS, with beta 0 (C poisoned with NaN) and 0.5."""
    from autotune.gpu_specs import GPUS

    gpu = GPUS[worker.environment().gpu_key]
    space = load_space("sgemm")
    configs = _small_m_configs(space, gpu)
    assert {c["BM"] for c in configs} >= {16, 32}
    if gpu.arch >= 90:
        assert {c["SPLIT_K"] for c in configs} == {1, 2, 4, 8}
    problems = _both_betas(SMALL_M_SHAPES, "f32")
    outcomes = _run_all(worker, space, gpu, configs, problems)
    _assert_verified(outcomes)
    ran = _ran_at_every_problem(configs, problems, outcomes)
    assert {c["BM"] for c in ran} >= {16, 32}
    if gpu.arch >= 90:
        assert {c["SPLIT_K"] for c in ran} == {1, 2, 4, 8}


INNER_LOOP_VARIANTS = [  # over the public-design seed (cp.async with register prefetch, lanes in pairs, spread copies)
    {}, {"COPY_SPREAD": 0}, {"STAGES": 3}, {"LANE_PAIRS": 0}, {"VEC": 2}, {"GROUP_M": 8},
    {"BM": 64, "BN": 64, "BK": 16, "TM": 4, "TN": 4, "WARPS_M": 2, "STAGES": 3, "LEAN_BUILD": 0},  # one build, any block
    {"BM": 256, "BN": 128, "WARPS_M": 2},  # 8x4 lanes
    # the lean build's copies from pointers, its partial k-tile first
    {"COPY_PTRS": 1}, {"COPY_PTRS": 1, "COPY_SPREAD": 0}, {"COPY_PTRS": 1, "VEC": 1, "COPY_SPREAD": 0},
    {"COPY_PTRS": 1, "STAGES": 3, "VEC": 1}, {"COPY_PTRS": 1, "BM": 256, "BN": 128, "WARPS_M": 2, "VEC": 2},
    # ... split over K: each rank's share copied the same way, the last rank's partial k-tile first; at K 5 every
    # rank but the first has no k-tile
    {"COPY_PTRS": 1, "SPLIT_K": 2, "BM": 64, "BN": 128, "TM": 8, "TN": 8, "WARPS_M": 2, "COPY_SPREAD": 0},
    {"COPY_PTRS": 1, "SPLIT_K": 8, "BM": 32, "BN": 128, "BK": 16, "TM": 8, "TN": 4, "WARPS_M": 2, "STAGES": 3,
     "COPY_SPREAD": 0, "SMEM_OPT_IN": 0},
]


def test_inner_loop_knobs_verify_at_odd_shapes(worker):
    """cp.async with register prefetch and one barrier per tile, copies spread or not, lanes in 2x2 groups or
    rows: every value against cuBLAS at shapes that are no tile multiples, with beta 0 (C poisoned) and 0.5."""
    from autotune.gpu_specs import GPUS

    gpu = GPUS[worker.environment().gpu_key]
    space = load_space("sgemm")
    seed = next(s for s in space.seeds if s["COPY_SPREAD"] and s["LANE_PAIRS"] and s["CP_ASYNC"])
    configs = [space.config({**seed.as_dict(), **changes}) for changes in INNER_LOOP_VARIANTS]
    configs += [s for s in space.seeds if s["LANE_PAIRS"] and s is not seed]
    configs = [c for c in configs if space.check(c, gpu).feasible]
    if gpu.arch < 80:
        pytest.skip("cp.async needs sm_80")
    assert {c["COPY_SPREAD"] for c in configs} == {0, 1} and {c["LANE_PAIRS"] for c in configs} == {0, 1}
    assert {c["COPY_PTRS"] for c in configs} == {0, 1}
    # interior blocks whose first k-tile is partial (K 1028, 4099, 5) or whole (K 24)
    shapes = ODD_SHAPES + [(4096 + 8, 4096 + 24, 1024 + 4), (130, 300, 4099), (256, 512, 5), (384, 768, 24)]
    problems = _both_betas(shapes, "f32")
    outcomes = _run_all(worker, space, gpu, configs, problems)
    _assert_verified(outcomes)
    ran = _ran_at_every_problem(configs, problems, outcomes)
    assert {c["COPY_SPREAD"] for c in ran} == {0, 1} and {c["LANE_PAIRS"] for c in ran} == {0, 1}
    assert {c["COPY_PTRS"] for c in ran} == {0, 1}
    if gpu.arch >= 90:
        assert {c["SPLIT_K"] for c in ran if c["COPY_PTRS"]} >= {1, 2, 8}


# Shapes of whole tiles for every sgemm block tile (M a multiple of 256, N of 256): K whole tiles of 8, 16 and 32,
# K = 1028 (a partial first k-tile where BK does not divide it) and K = 4 (one partial tile).
WHOLE_TILE_SHAPES = [(768, 1280, 1028), (256, 512, 4096), (512, 256, 4), (1024, 768, 520)]


def test_whole_tile_builds_verify_at_shapes_of_whole_tiles(worker):
    """WHOLE_TILES 1 (the lean build only, C stored 16 bytes wide unchecked) against cuBLAS where the tiles are
    whole, with beta 0 (C poisoned) and 0.5: the loop variants of the public design, every seed that is not
    split, and random feasible unsplit configs, lean build or not."""
    from autotune.gpu_specs import GPUS

    gpu = GPUS[worker.environment().gpu_key]
    space = load_space("sgemm")
    if gpu.arch < 80:
        pytest.skip("the variants use cp.async (sm_80)")
    seed = next(s for s in space.seeds if s["COPY_SPREAD"] and s["LANE_PAIRS"] and s["CP_ASYNC"])
    configs = [space.config({**seed.as_dict(), **changes}) for changes in INNER_LOOP_VARIANTS]
    configs += [s for s in space.seeds if s["SPLIT_K"] == 1]
    rng = random.Random(3)
    unsplit = [c for c in feasible_configs(space, gpu) if c["WHOLE_TILES"] and c["SPLIT_K"] == 1]
    configs += [c for lean in (0, 1) for c in rng.sample([c for c in unsplit if c["LEAN_BUILD"] == lean], 4)]
    configs = list(dict.fromkeys(space.config({**c.as_dict(), "WHOLE_TILES": 1}) for c in configs))
    problems = _both_betas(WHOLE_TILE_SHAPES, "f32")
    configs = [c for c in configs if all(space.check(c, gpu, p).feasible for p in problems)]
    assert {c["LEAN_BUILD"] for c in configs} == {0, 1} and {c["COPY_PTRS"] for c in configs} == {0, 1}
    assert len(configs) >= 20
    outcomes = _run_all(worker, space, gpu, configs, problems)
    _assert_verified(outcomes)
    ran = _ran_at_every_problem(configs, problems, outcomes)
    assert {c["LEAN_BUILD"] for c in ran} == {0, 1} and {c["COPY_PTRS"] for c in ran} == {0, 1}


def test_wrong_kernel_is_caught(worker):
    """A config that skips the last partial k-tile must fail verification at K % BK != 0."""
    from autotune.gpu.tasks import KernelTask
    from autotune.gpu_specs import GPUS
    from autotune.kernel.compile import compile_kernel
    from autotune.kernel.render import KernelSource

    env = worker.environment()
    gpu = GPUS[env.gpu_key]
    space = load_space("sgemm")
    seed = space.seeds[0]
    source = render(space, seed, gpu)
    broken = source.code.replace("const int k_tiles = (K + BK - 1) / BK;", "const int k_tiles = K / BK;")
    assert broken != source.code
    kernel = compile_kernel(KernelSource(source.entry, broken, "broken"), gpu.sm)
    problem = GemmProblem(256, 256, 100, "f32")
    launch = space.launch(seed, gpu, problem)
    task = KernelTask(cubin=kernel.cubin, entry=kernel.entry, grid=launch.grid, block=launch.block,
                      dynamic_smem=0, problem=problem, seed=1, warmup=1, repeats=3, resources=kernel.resources)
    outcome = worker.run(task, timeout_s=60)
    assert isinstance(outcome, Failure) and outcome.failure_class == FailureClass.WRONG_ANSWER.value


# At most 8 rows: one row, every MAX_M's own edge (2, 4, 8) and the rows between, N past a multiple of 4 and
# odd (VEC 2 and 1 builds only), K shorter than K_GROUPS, past a multiple of UNROLL * K_GROUPS, and long.
GEMV_SHAPES = [(1, 1, 1), (1, 4096, 4096), (2, 4104, 14344), (3, 1000, 17), (4, 130, 3), (5, 1000, 129),
               (7, 4096 + 24, 14336 + 8), (8, 1027, 4099), (8, 14336, 4096)]


def test_gemv_configs_verify_at_few_rows(worker):
    """sgemm_gemv (M <= 8): its seeds, two random configs of every MAX_M, VEC, UNROLL and K_GROUPS and one of every
    value of the staged-A knobs (A_ROWS, PREFETCH, SPLIT_K, STREAM_B, MIN_BLOCKS), each at the shapes its rules
    admit, against cuBLAS with beta 0 (C poisoned with NaN) and 0.5."""
    from autotune.gpu_specs import GPUS

    gpu = GPUS[worker.environment().gpu_key]
    space = load_space("sgemm_gemv")
    feasible = feasible_configs(space, gpu)
    rng = random.Random(3)
    configs = list(space.seeds)
    for knob, count in (("MAX_M", 2), ("VEC", 2), ("UNROLL", 2), ("K_GROUPS", 2), ("A_ROWS", 1), ("PREFETCH", 1),
                        ("SPLIT_K", 1), ("STREAM_B", 1), ("MIN_BLOCKS", 1)):
        for value in space.knobs[knob]:
            having = [c for c in feasible if c[knob] == value]
            configs += rng.sample(having, min(count, len(having)))
    configs = [c for c in dict.fromkeys(configs) if space.check(c, gpu).feasible]
    outcomes = []
    for problem in _both_betas(GEMV_SHAPES, "f32"):
        admitted = [c for c in configs if space.check(c, gpu, problem).feasible]
        assert admitted, problem
        outcomes += _run_all(worker, space, gpu, admitted, [problem])
    _assert_verified(outcomes)
    never_ran = {c.name for c in configs} - {name for name, *_ in outcomes}  # turned away by ptxas's resources
    assert len(never_ran) <= 5, never_ran  # (1024 threads of 8 rows each can need more registers than a block has)
    assert len(outcomes) >= 2 * len(GEMV_SHAPES) * 4
    assert any(c["A_ROWS"] and c["SPLIT_K"] > 1 for c in configs if c.name not in never_ran) or gpu.arch < 90


def test_gemv_staged_kernels_serve_rows_past_max_m_and_any_n(worker):
    """The staged-A kernels (A_ROWS > 0) at shapes their rules keep from the search but a table's nearest shape
    may send them: rows past MAX_M (blocks along y), N not a multiple of VEC (scalar loads), K not a multiple of 4
    (4-byte copies of A), split-K shares short or empty."""
    from autotune.gpu_specs import GPUS

    gpu = GPUS[worker.environment().gpu_key]
    if gpu.arch < 80:
        pytest.skip("A staged in shared memory needs sm_80")
    space = load_space("sgemm_gemv")
    configs = [seed for seed in space.seeds if seed["A_ROWS"] and space.check(seed, gpu).feasible]
    shapes = [(9, 1000, 4100), (20, 257, 1031), (3, 1001, 129), (12, 4098, 4096), (1, 7, 5)]
    outcomes = _run_all(worker, space, gpu, configs, _both_betas(shapes, "f32"))
    _assert_verified(outcomes)
    assert len(outcomes) == len(configs) * len(shapes) * 2
