"""sgemm_gemv offline: its space's configs render and compile for sm_90 without spills, and its kernels, run on the
CPU (tests/gemv_emulation.py: the rendered CUDA with a small emulation of what it uses), compute
C = alpha * A @ B + beta * C exactly where they should. No GPU involved.

Shared memory starts as NaNs, global loads outside A and B abort the run, and guard zones around C show a
write outside it: a kernel that reads shared memory nobody wrote, reads past A or B, writes C twice (beta 0.5)
or not at all (C is NaN where beta is 0) fails.
"""

from __future__ import annotations

import random

import numpy
import pytest
from gemv_emulation import build, compile_and_check, needs_compiler, run

from autotune.gpu_specs import gpu_spec
from autotune.kernel.compile import CompileFailure
from autotune.kernel.render import render
from autotune.kernel.resources import resource_violation
from autotune.problem import GemmProblem
from autotune.space.family import load_space
from autotune.space.survey import feasible_configs

H200 = gpu_spec("h200")

# Staged-A configs beside the seeds: each new knob's values, the edges of the epilogue's rounds (RED_ROWS below
# MAX_M), 1024 threads, and one column per thread.
STAGED = [
    {"MAX_M": 8, "COL_THREADS": 8, "VEC": 4, "K_GROUPS": 32, "UNROLL": 4, "A_ROWS": 512, "PREFETCH": 1},
    {"MAX_M": 8, "COL_THREADS": 8, "VEC": 4, "K_GROUPS": 32, "UNROLL": 4, "A_ROWS": 256, "PREFETCH": 0, "STREAM_B": 1},
    {"MAX_M": 8, "COL_THREADS": 4, "VEC": 4, "K_GROUPS": 16, "UNROLL": 4, "A_ROWS": 512, "PREFETCH": 1, "SPLIT_K": 2},
    {"MAX_M": 8, "COL_THREADS": 32, "VEC": 4, "K_GROUPS": 16, "UNROLL": 2, "A_ROWS": 256, "PREFETCH": 0, "SPLIT_K": 4},
    {"MAX_M": 4, "COL_THREADS": 16, "VEC": 4, "K_GROUPS": 16, "UNROLL": 8, "A_ROWS": 1024, "PREFETCH": 1, "SPLIT_K": 8},
    {"MAX_M": 4, "COL_THREADS": 32, "VEC": 2, "K_GROUPS": 32, "UNROLL": 1, "A_ROWS": 256, "PREFETCH": 1, "STREAM_B": 1},
    {"MAX_M": 2, "COL_THREADS": 16, "VEC": 2, "K_GROUPS": 64, "UNROLL": 2, "A_ROWS": 2048, "PREFETCH": 0},
    {"MAX_M": 1, "COL_THREADS": 32, "VEC": 4, "K_GROUPS": 8, "UNROLL": 8, "A_ROWS": 1024, "PREFETCH": 1, "SPLIT_K": 2},
    {"MAX_M": 1, "COL_THREADS": 32, "VEC": 1, "K_GROUPS": 8, "UNROLL": 4, "A_ROWS": 256, "PREFETCH": 1, "SPLIT_K": 8},
]


def staged_configs(space):
    return [space.config(values) for values in STAGED]


# -- the space: rules, seeds, shared memory --------------------------------------------------------------------


def test_old_configs_keep_their_names_and_kernel():
    """A config recorded before the staged-A knobs existed loads with their defaults: the kernel it measured."""
    space = load_space("sgemm_gemv")
    old = space.config({"MAX_M": 4, "COL_THREADS": 32, "VEC": 4, "K_GROUPS": 32, "UNROLL": 8})
    assert old.as_dict() == {**old.as_dict(), "A_ROWS": 0, "PREFETCH": 0, "SPLIT_K": 1, "STREAM_B": 0}
    code = render(space, old, H200).code
    assert "every 32-th row of B" in code and "cp.async" not in code and "__ldcs" not in code
    assert "__launch_bounds__(THREADS)" in code and "blockIdx.y" not in code


def test_seeds_cover_one_to_eight_rows_with_the_staged_kernel_and_are_feasible_at_llm_shapes():
    space = load_space("sgemm_gemv")
    staged = [seed for seed in space.seeds if seed["A_ROWS"]]
    assert {seed["MAX_M"] for seed in staged} == {1, 2, 4, 8}
    for m in (1, 2, 4, 8):
        for n, k in ((4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096), (11008, 4096), (4096, 11008)):
            problem = GemmProblem(m, n, k, "f32")
            fit = [seed for seed in staged if space.check(seed, H200, problem).feasible]
            assert fit, (m, n, k)


def test_staged_rules_and_reasons():
    space = load_space("sgemm_gemv")
    base = {"MAX_M": 8, "COL_THREADS": 8, "VEC": 4, "K_GROUPS": 32, "UNROLL": 4, "A_ROWS": 512, "PREFETCH": 1}
    assert space.check(space.config(base), H200).feasible
    reason = lambda **changes: space.check(space.config({**base, **changes}), H200,
                                           GemmProblem(8, 4096, 4096, "f32")).reason
    assert "whole number of steps" in reason(UNROLL=8, K_GROUPS=64, A_ROWS=256)
    assert "A staged in shared memory" in reason(A_ROWS=0)  # PREFETCH 1 without staging
    assert "cp.async, sm_80" in space.check(space.config(base), gpu_spec("t4")).reason
    assert "sm_90" in space.check(space.config({**base, "SPLIT_K": 2}), gpu_spec("a100")).reason
    assert "smem" in reason(A_ROWS=1024)  # 2 x 8 rows x 1024 x 4 B = 64 KB
    assert "less than one step" in space.check(space.config({**base, "SPLIT_K": 8}), H200,
                                               GemmProblem(8, 4096, 512, "f32")).reason


def test_rows_past_max_m_go_to_more_blocks_along_y():
    """Only in the staged kernel; the L1 kernel (A_ROWS 0) is the one the shipped results measured, unchanged."""
    space = load_space("sgemm_gemv")
    old = space.seeds[1]
    assert old["A_ROWS"] == 0 and space.launch(old, H200, GemmProblem(20, 1000, 4096, "f32")).grid[1] == 1
    config = space.config(STAGED[2])
    assert space.launch(config, H200, GemmProblem(8, 1000, 4096, "f32")).grid == (2 * 63, 1, 1)  # 16 columns a strip
    assert space.launch(config, H200, GemmProblem(20, 1000, 4096, "f32")).grid == (2 * 63, 3, 1)


# -- NVRTC: registers, spills, shared memory ---------------------------------------------------------------------


def test_seeds_and_staged_configs_compile_for_sm90_without_spills(pool):
    space = load_space("sgemm_gemv")
    configs = list(dict.fromkeys([*space.seeds, *staged_configs(space)]))
    assert all(space.check(config, H200).feasible for config in configs)
    registers = compile_and_check(space, configs, pool)
    # The 8-row staged seeds leave room for two 256-thread blocks per SM (65536 registers).
    eight = next(seed for seed in space.seeds if seed["MAX_M"] == 8 and seed["A_ROWS"])
    assert registers[eight] * eight["COL_THREADS"] * eight["K_GROUPS"] * 2 <= H200.regs_per_sm


def test_a_sample_of_the_staged_space_compiles_for_sm90_without_spills(pool):
    """Each value of each knob, once, among feasible staged configs at 8x4096x11008 or 1x4096x4096."""
    space = load_space("sgemm_gemv")
    rng = random.Random(5)
    feasible = list(dict.fromkeys(c for shape in ((8, 4096, 11008), (1, 4096, 4096))
                                  for c in feasible_configs(space, H200, GemmProblem(*shape, "f32")) if c["A_ROWS"]))
    configs = []
    for knob, values in space.knobs.items():
        for value in values:
            if any(c[knob] == value for c in configs):
                continue  # a config sampled for another knob has it
            having = [c for c in feasible if c[knob] == value]
            configs += rng.sample(having, min(1, len(having)))
    assert all(any(c[knob] == value for c in configs) for knob, values in space.knobs.items() for value in values
               if any(c[knob] == value for c in feasible))
    sources = [render(space, config, H200) for config in configs]
    over = []
    for config, compiled in zip(configs, pool.map(sources, "sm_90")):
        assert not isinstance(compiled, CompileFailure), f"{config.name}: {compiled.message}"
        res, threads = compiled.resources, space.values(config, H200)["THREADS"]
        assert res.smem_static == space.values(config, H200)["SMEM_BYTES"], config.name
        if resource_violation(res, threads, H200, opt_in=False):  # ptxas held to 65536 / THREADS registers
            over.append((config.name, res.registers, res.spill_stores))
    assert len(over) <= len(configs) // 10, over


# -- the kernels run on the CPU -----------------------------------------------------------------------------------

class HostKernels:
    """The staged configs and the seeds, compiled by the host's compiler into one program (one compile for the
    module's tests); ``binary`` and each config's ``index`` in it."""

    def __init__(self, space, configs, folder):
        self.configs = list(dict.fromkeys(configs))
        sources = [render(space, config, H200) for config in self.configs]
        self.binary = build([(source.code, source.entry, "float") for source in sources], folder)

    def index(self, config) -> int:
        return self.configs.index(config)


@pytest.fixture(scope="module")
def host_kernels(tmp_path_factory):
    space = load_space("sgemm_gemv")
    return HostKernels(space, [*staged_configs(space), *space.seeds], tmp_path_factory.mktemp("gemv_host"))


def run_on_host(kernels, space, config, shape, alpha, beta, eager, a_offset=0, b_offset=0, seed=0):
    """C from the kernel run on the CPU at ``shape``, and the fp64 reference; C is NaN where beta is 0."""
    m, n, k = shape
    rng = numpy.random.default_rng(seed)
    a = rng.uniform(-1, 1, (m, k)).astype(numpy.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(numpy.float32)
    c = numpy.full((m, n), numpy.nan, numpy.float32) if beta == 0 else rng.uniform(-1, 1, (m, n)).astype(numpy.float32)
    launch = space.launch(config, H200, GemmProblem(m, n, k, "f32", alpha=alpha, beta=beta))
    cluster = config["SPLIT_K"]
    assert launch.grid[0] % cluster == 0
    out = run(kernels.binary, kernels.index(config), "float", a, b, c, alpha, beta, launch.grid[:2], launch.block[0],
              cluster, eager, a_offset, b_offset, what=config.name)
    a64, b64 = a.astype(numpy.float64), b.astype(numpy.float64)
    reference = alpha * a64 @ b64 + (beta * c.astype(numpy.float64) if beta else 0.0)
    scale = abs(alpha) * numpy.abs(a64) @ numpy.abs(b64) + (abs(beta) * numpy.abs(c) if beta else 0.0)
    return out, reference, scale


def assert_close(config, shape, out, reference, scale):
    bad = ~(numpy.abs(out - reference) <= 1e-5 * scale + 1e-6)
    assert not bad.any(), (f"{config.name} at {shape}: {bad.sum()} of {out.size} wrong, first at "
                           f"{tuple(numpy.argwhere(bad)[0])}: {out[tuple(numpy.argwhere(bad)[0])]} for "
                           f"{reference[tuple(numpy.argwhere(bad)[0])]}")


# Every MAX_M's own edge and the rows below it, rows past MAX_M (blocks along y), N past a strip and not a
# multiple of 4 (scalar loads of B), K short of a step, of a chunk, past several chunks, not a multiple of 4
# (4-byte copies of A), and split-K shares that are short or empty.
HOST_SHAPES = [(1, 1, 1), (3, 130, 17), (8, 132, 1031), (5, 257, 2052), (2, 64, 4100), (9, 40, 300), (7, 200, 1536)]


@needs_compiler
@pytest.mark.parametrize("index", range(len(STAGED)))
def test_staged_kernels_compute_c_on_the_cpu(index, host_kernels):
    space = load_space("sgemm_gemv")
    config = space.config(STAGED[index])
    for i, shape in enumerate(HOST_SHAPES):
        if i % 3 != index % 3 and i:  # each config a third of the shapes (and 1x1x1); every shape, three configs
            continue
        alpha, beta = ((1.0, 0.0), (-1.5, 0.5))[(i + index) % 2]
        eager = (i + index // 2) % 2 == 0  # copies at the issue and at the wait, each half the runs
        out, reference, scale = run_on_host(host_kernels, space, config, shape, alpha, beta, eager, seed=i)
        assert_close(config, shape, out, reference, scale)


@needs_compiler
@pytest.mark.parametrize("seed_index", range(4, 9))
def test_staged_seeds_compute_c_on_the_cpu(seed_index, host_kernels):
    """The staged seeds at shapes of the GPU test's kind: rows past MAX_M, N of no strip, K of no chunk."""
    space = load_space("sgemm_gemv")
    config = space.seeds[seed_index]
    assert config["A_ROWS"]
    for i, shape in enumerate([(9, 300, 1100), (3, 1001, 129), (1, 7, 5)]):
        alpha, beta = ((1.0, 0.0), (-1.5, 0.5))[(i + seed_index) % 2]
        out, reference, scale = run_on_host(host_kernels, space, config, shape, alpha, beta, beta == 0, seed=i)
        assert_close(config, shape, out, reference, scale)


@needs_compiler
@pytest.mark.parametrize("index", [0, 2, 7])
def test_staged_kernels_take_misaligned_a_and_b(index, host_kernels):
    """A one float past a 16-byte boundary: 4-byte copies; B so too: scalar loads (the launcher never passes
    these, but the kernel does not rely on it)."""
    space = load_space("sgemm_gemv")
    config = space.config(STAGED[index])
    for shape in ((4, 136, 1028), (1, 36, 300)):
        for eager in (False, True):
            out, reference, scale = run_on_host(host_kernels, space, config, shape, 0.5, 0.25, eager, a_offset=1,
                                                b_offset=1 + int(eager))
            assert_close(config, shape, out, reference, scale)


@needs_compiler
@pytest.mark.parametrize("seed_index", range(4))
def test_the_l1_kernel_of_the_first_seeds_computes_c_on_the_cpu(seed_index, host_kernels):
    """The kernel the shipped results measured (A_ROWS 0: unchanged, one block along y), at shapes its rules admit."""
    space = load_space("sgemm_gemv")
    config = space.seeds[seed_index]
    assert config["A_ROWS"] == 0
    top = config["MAX_M"]
    for i, shape in enumerate([(1, 64, 100), (top, 128, 333), (max(1, top - 1), 132, 70), (min(3, top), 4, 17)]):
        assert space.check(config, H200, GemmProblem(*shape, "f32")).feasible, shape
        out, reference, scale = run_on_host(host_kernels, space, config, shape, -1.5, 0.5 if i % 2 else 0.0, False, seed=i)
        assert_close(config, shape, out, reference, scale)
