"""hgemm_gemv offline: fp16 and bf16 GEMM for M <= 16 in both layouts. Its space's rules and seeds, its configs
rendered and compiled for sm_90 (and sm_80) without spills, and its kernels run on the CPU (tests/gemv_emulation.py,
with an emulated mma.sync) against an fp64 reference, at shapes of no whole block, K of no 16-byte vector, both
betas (C poisoned with NaN where beta is 0) and misaligned operands. No GPU involved."""

from __future__ import annotations

import random

import numpy
import pytest
from gemv_emulation import build, compile_and_check, needs_compiler, run

from autotune.gpu.storage import narrow, widen
from autotune.gpu_specs import gpu_spec
from autotune.kernel.contract import contract_for
from autotune.kernel.render import render
from autotune.problem import ELEMENTS, GemmProblem
from autotune.search.start import choose_family
from autotune.space.family import families_for_dtype, load_space
from autotune.space.survey import feasible_configs

H200, A100 = gpu_spec("h200"), gpu_spec("a100")
LAYOUTS = ("nt", "row")
LLM_SHAPES = [(4096, 4096), (6144, 4096), (14336, 4096), (4096, 14336), (11008, 4096), (4096, 11008), (5120, 5120)]

# Configs beside the seeds, for the CPU runs: loop shapes the seeds leave out (one warp or one row of threads
# along K, one block of K per step, 4 tiles a warp, chunks of 2048, clusters of 8, epilogue rounds short of
# MAX_M, 8-byte loads of B, blocks of 32 and 512 threads).
EXTRA = {
    "nt": [
        {"MAX_M": 16, "COL_THREADS": 64, "TILES": 4, "K_GROUPS": 4, "UNROLL": 1, "A_CHUNK": 256, "SPLIT_K": 1,
         "STREAM_B": 0},
        {"MAX_M": 2, "COL_THREADS": 32, "TILES": 2, "K_GROUPS": 1, "UNROLL": 8, "A_CHUNK": 2048, "SPLIT_K": 8,
         "STREAM_B": 1},
        {"MAX_M": 8, "COL_THREADS": 128, "TILES": 2, "K_GROUPS": 2, "UNROLL": 1, "A_CHUNK": 0, "SPLIT_K": 2,
         "STREAM_B": 0},
    ],
    "row": [
        {"MAX_M": 16, "COL_THREADS": 32, "VEC": 8, "K_GROUPS": 8, "UNROLL": 2, "A_CHUNK": 256, "SPLIT_K": 1,
         "STREAM_B": 0},
        {"MAX_M": 2, "COL_THREADS": 8, "VEC": 4, "K_GROUPS": 4, "UNROLL": 1, "A_CHUNK": 2048, "SPLIT_K": 8,
         "STREAM_B": 1},
        {"MAX_M": 8, "COL_THREADS": 32, "VEC": 4, "K_GROUPS": 16, "UNROLL": 2, "A_CHUNK": 1024, "SPLIT_K": 2,
         "STREAM_B": 0},
    ],
}
DEFAULTS = {"VEC": 8, "TILES": 1}


def space_for(layout: str, dtype: str = "f16"):
    return load_space("hgemm_gemv", dtype, layout)


def own_seeds(layout: str, dtype: str = "f16"):
    space = space_for(layout, dtype)
    return [seed for seed in space.seeds if space.check(seed, H200).feasible]


def extra_configs(layout: str, dtype: str = "f16"):
    space = space_for(layout, dtype)
    return [space.config({**DEFAULTS, **values}) for values in EXTRA[layout]]


# -- the family and its space ------------------------------------------------------------------------------------


def test_a_few_row_family_of_both_dtypes_and_layouts_never_the_default():
    space = load_space("hgemm_gemv")
    assert space.dtypes == ("f16", "bf16") and space.layouts == ("row", "nt") and space.priority < 0
    for dtype in ("f16", "bf16"):
        for layout in LAYOUTS:
            families = families_for_dtype(dtype, layout)
            assert families.index("hgemm_gemv") > families.index("hgemm_wgmma")
            assert choose_family(None, dtype, H200, layout).family == "hgemm_wgmma"
            assert choose_family("hgemm_gemv", dtype, H200, layout).family == "hgemm_gemv"
    assert "hgemm_gemv" not in families_for_dtype("f32")


def test_every_seed_serves_one_layout_and_seeds_cover_the_few_row_llm_shapes():
    nt, row = own_seeds("nt"), own_seeds("row")
    assert len(nt) + len(row) == len(space_for("nt").seeds)  # each seed in one layout only
    assert {seed["MAX_M"] for seed in nt} == {seed["MAX_M"] for seed in row} == {1, 4, 8, 16}
    for layout in LAYOUTS:
        space = space_for(layout)
        for m in (1, 2, 3, 4, 8, 16):
            for n, k in LLM_SHAPES:
                problem = GemmProblem(m, n, k, "f16", layout=layout)
                assert any(space.check(seed, H200, problem).feasible for seed in space.seeds), (layout, m, n, k)


def test_rules_and_reasons():
    nt, row = space_for("nt"), space_for("row")
    seed = own_seeds("nt")[2]  # up to 4 rows, A staged, clusters of 2
    reason = lambda space, values, problem=None, gpu=H200: space.check(
        space.config({**seed.as_dict(), **values}), gpu, problem).reason
    assert "M above MAX_M = 4" in reason(nt, {}, GemmProblem(5, 4096, 4096, "f16", layout="nt"))
    assert reason(nt, {}, GemmProblem(4, 4095, 4097, "f16", layout="nt")) is None  # any N and K
    assert "sm_80" in reason(nt, {"SPLIT_K": 1}, gpu=gpu_spec("t4"))
    assert "sm_90" in reason(nt, {}, gpu=A100) and reason(nt, {"SPLIT_K": 1}, gpu=A100) is None
    assert "whole number of warps" in reason(nt, {"COL_THREADS": 16})
    assert "VEC 4 is the row layout's" in reason(nt, {"VEC": 4})
    assert "TILES 2 is the nt layout's" in reason(row, {"COL_THREADS": 32, "TILES": 2})
    assert "A_CHUNK 0 reads it through L1 in nt only" in reason(row, {"COL_THREADS": 32, "A_CHUNK": 0})
    assert "whole number of steps" in reason(nt, {"A_CHUNK": 256, "UNROLL": 8})
    assert "smem" in reason(nt, {"MAX_M": 16, "A_CHUNK": 2048})  # 2 x 16 rows x 2080 x 2 B
    assert "registers per thread" in reason(nt, {"COL_THREADS": 128, "K_GROUPS": 4, "TILES": 4, "UNROLL": 8})


def test_the_rows_rule_is_what_a_table_serves_and_the_launch():
    for layout in LAYOUTS:
        space = space_for(layout)
        for seed in own_seeds(layout):
            contract = contract_for(space, seed, H200)
            top = seed["MAX_M"]
            assert contract.serves_shape(top, 4097, 1031) and not contract.serves_shape(top + 1, 4096, 4096)
            launch = space.launch(seed, H200, GemmProblem(top, 1000, 4095, "f16", layout=layout))
            bn = space.values(seed, H200)["BN"]
            assert launch.grid == (-(-1000 // bn) * seed["SPLIT_K"], 1, 1) and launch.dynamic_smem == 0


# -- NVRTC: registers, spills, shared memory ---------------------------------------------------------------------


def test_seeds_compile_for_sm90_in_both_dtypes_without_spills(pool):
    for layout in LAYOUTS:
        for dtype in ("f16", "bf16"):
            space = space_for(layout, dtype)
            for config, registers in compile_and_check(space, own_seeds(layout, dtype), pool).items():
                values = space.values(config, H200)
                blocks = min(H200.regs_per_sm // (-(-registers // 8) * 8 * values["THREADS"]),
                             H200.smem_per_sm // max(values["SMEM_BYTES"], 1), H200.max_threads_per_sm // values["THREADS"])
                assert blocks * values["THREADS"] >= 512, config.name  # 16 warps per SM or more keep B's loads in flight


def test_seeds_without_clusters_compile_for_sm80(pool):
    """The first and last seed of each layout (1 and 16 rows), with SPLIT_K 1, in bf16 for an A100."""
    for layout in LAYOUTS:
        space = space_for(layout, "bf16")
        seeds = own_seeds(layout)
        configs = [space.config({**seed.as_dict(), "SPLIT_K": 1}) for seed in (seeds[0], seeds[-1])]
        assert all(space.check(config, A100).feasible for config in configs)
        compile_and_check(space, configs, pool, A100)


def covering_sample(space, configs, rng):
    """A few of ``configs`` that hold every value of every knob they hold: each the one of a shuffled order that
    holds the most values not held yet."""
    configs = list(configs)
    rng.shuffle(configs)
    missing = {(knob, config[knob]) for config in configs for knob in space.knobs}
    chosen = []
    while missing:
        best = max(configs, key=lambda c: len(missing & set(c.params)))
        chosen.append(best)
        missing -= set(best.params)
    return chosen


def test_a_sample_of_the_space_compiles_for_sm90_without_spills(pool):
    """A few feasible configs of each layout at 1x4096x4096 that hold every value of every knob between them, in
    fp16 and bf16 by turns, and the CPU runs' extra configs."""
    rng = random.Random(7)
    for layout in LAYOUTS:
        space = space_for(layout)
        sample = covering_sample(space, feasible_configs(space, H200, GemmProblem(1, 4096, 4096, "f16", layout=layout)),
                                 rng)
        assert len(sample) <= 8
        configs = {"f16": sample[0::2] + extra_configs(layout), "bf16": sample[1::2]}
        for dtype, chosen in configs.items():
            compile_and_check(space_for(layout, dtype), [space_for(layout, dtype).config(c.as_dict()) for c in chosen],
                              pool)


# -- the kernels run on the CPU -----------------------------------------------------------------------------------


def emulated_configs():
    """(layout, dtype, config) of every kernel the CPU runs: each layout's seeds in fp16 and two of them in bf16,
    and its extra configs."""
    kernels = []
    for layout in LAYOUTS:
        seeds = own_seeds(layout)
        kernels += [(layout, "f16", seed) for seed in seeds]
        kernels += [(layout, "bf16", space_for(layout, "bf16").config(seed.as_dict())) for seed in seeds[-2:]]
        kernels += [(layout, "f16", config) for config in extra_configs(layout)]
    return kernels


KERNELS = emulated_configs()


@pytest.fixture(scope="module")
def host_program(tmp_path_factory):
    """One host program of every emulated kernel."""
    sources = []
    for layout, dtype, config in KERNELS:
        source = render(space_for(layout, dtype), config, H200)
        sources.append((source.code, source.entry, ELEMENTS[dtype].c_type))
    return build(sources, tmp_path_factory.mktemp("hgemm_gemv_host"))


def run_and_check(binary, index, shape, alpha, beta, eager, a_offset=0, b_offset=0, seed=0):
    """Kernel ``index`` of ``binary`` on the CPU at ``shape`` against an fp64 reference of the same inputs, within
    what fp32 sums of K products and one rounding of the result allow (the GPU check's bound, tests' factor 1)."""
    layout, dtype, config = KERNELS[index]
    space, element = space_for(layout, dtype), ELEMENTS[dtype]
    m, n, k = shape
    assert space.check(config, H200, GemmProblem(m, n, k, dtype, layout=layout)).feasible
    rng = numpy.random.default_rng(seed)
    a = narrow(rng.uniform(-1, 1, (m, k)).astype(numpy.float32), element)
    b = narrow(rng.uniform(-1, 1, (n, k) if layout == "nt" else (k, n)).astype(numpy.float32), element)
    c = narrow(rng.uniform(-1, 1, (m, n)).astype(numpy.float32) if beta else
               numpy.full((m, n), numpy.nan, numpy.float32), element)
    launch = space.launch(config, H200, GemmProblem(m, n, k, dtype, layout=layout, alpha=alpha, beta=beta))
    out = run(binary, index, element.c_type, a, b, c, alpha, beta, launch.grid[:2], launch.block[0],
              config["SPLIT_K"], eager, a_offset, b_offset, what=config.name)
    a64, b64 = widen(a, element).astype(numpy.float64), widen(b, element).astype(numpy.float64)
    b64 = b64.T if layout == "nt" else b64
    c64 = widen(c, element).astype(numpy.float64) if beta else numpy.zeros((m, n))
    reference = alpha * a64 @ b64 + beta * c64
    scale = abs(alpha) * numpy.abs(a64) @ numpy.abs(b64) + abs(beta) * numpy.abs(c64)
    bound = (k * 2.0**-23 * scale + element.unit_roundoff * (numpy.abs(reference) + abs(beta) * numpy.abs(c64))
             + element.subnormal_step + 1e-30)
    ratio = numpy.abs(widen(out, element).astype(numpy.float64) - reference) / bound
    bad = ~(ratio <= 1.0)  # NaN included
    assert not bad.any(), (f"{config.name} at {shape}: {bad.sum()} of {out.size} wrong, first at "
                           f"{tuple(numpy.argwhere(bad)[0])}: worst {numpy.nanmax(ratio)} of the bound")


@needs_compiler
@pytest.mark.parametrize("index", range(len(KERNELS)), ids=[f"{lay}-{dt}-{i}" for i, (lay, dt, _) in enumerate(KERNELS)])
def test_kernels_compute_c_on_the_cpu(host_program, index):
    """Rows 1, 3 and MAX_M; N of no whole block and odd; K of no 16-byte vector (element-wise loads of B in nt,
    element-wise copies of A), of several chunks of A (cp.async copies at their issue and at the wait), shorter
    than a block's step; beta 0 with C poisoned and 0.5; A and B one element past a 16-byte boundary."""
    config = KERNELS[index][2]
    top = config["MAX_M"]
    shapes = [((top, 37, 1031), 0, 0), ((min(3, top), 40, 2112), 0, 0), ((1, 1, 1), 0, 0),
              ((top, 21, 67), 1, 1), ((min(3, top), 24, 520), 1, 3)]
    for i, (shape, a_offset, b_offset) in enumerate(shapes):
        alpha, beta = ((1.0, 0.0), (-1.5, 0.5))[(i + index) % 2]
        run_and_check(host_program, index, shape, alpha, beta, eager=(i + index // 2) % 2 == 0,
                      a_offset=a_offset, b_offset=b_offset, seed=i)
