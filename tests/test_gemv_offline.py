"""sgemm_gemv offline: its space's configs render and compile for sm_90 without spills, and its kernels, run on the
CPU, compute C = alpha * A @ B + beta * C exactly where they should. No GPU involved.

The CPU runs are the rendered CUDA source itself, compiled by the host's C++ compiler with a small emulation of
what it uses (``EMULATION`` below): every thread of a block is a thread of its own, ``__syncthreads`` a barrier,
warp shuffles an exchange among the warp's 32 threads, ``cp.async`` a copy done when it is issued or, to catch a
chunk read before its copies are waited for, only at the wait; a cluster's blocks run together, with
``barrier.cluster`` and distributed shared-memory reads between them. Shared memory starts as NaNs, global loads
outside A and B abort the run, and guard zones around C show a write outside it: a kernel that reads shared
memory nobody wrote, reads past A or B, writes C twice (beta 0.5) or not at all (C is NaN where beta is 0) fails.
What it cannot show: speed, the hardware's own memory ordering (only barriers order threads here), a block that
leaves while its cluster still reads its shared memory (the emulation keeps it), and PTX the GPU would refuse
(NVRTC compiles every config here too).
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess

import numpy
import pytest

from autotune.gpu_specs import gpu_spec
from autotune.kernel.compile import CompileFailure, CompilePool
from autotune.kernel.render import render
from autotune.kernel.resources import resource_violation
from autotune.problem import GemmProblem
from autotune.records import Resources
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


@pytest.fixture(scope="module")
def pool():
    with CompilePool(2) as compile_pool:
        yield compile_pool


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


def compile_and_check(space, configs, pool, arch="sm_90"):
    """Compile ``configs`` for H200; each without spills or stack, within the block's registers, its shared memory
    the space file's SMEM_BYTES. Their (config, registers), printed (pytest -s)."""
    sources = [render(space, config, H200) for config in configs]
    registers = []
    for config, compiled in zip(configs, pool.map(sources, arch)):
        assert not isinstance(compiled, CompileFailure), f"{config.name}: {compiled.message}"
        res, values = compiled.resources, space.values(config, H200)
        assert res.spill_stores == res.spill_loads == res.stack_frame == 0, (config.name, res)
        assert res.smem_static == values["SMEM_BYTES"], config.name
        assert resource_violation(Resources(**{**res.__dict__, "smem_dynamic": 0}), values["THREADS"], H200,
                                  opt_in=False) is None, (config.name, res.registers)
        print(f"{config.name}: {res.registers} registers x {values['THREADS']} threads, {res.smem_static} B smem")
        registers.append((config, res.registers))
    return registers


def test_seeds_and_staged_configs_compile_for_sm90_without_spills(pool):
    space = load_space("sgemm_gemv")
    configs = list(dict.fromkeys([*space.seeds, *staged_configs(space)]))
    assert all(space.check(config, H200).feasible for config in configs)
    registers = dict(compile_and_check(space, configs, pool))
    # The 8-row staged seeds leave room for two 256-thread blocks per SM (65536 registers).
    eight = next(seed for seed in space.seeds if seed["MAX_M"] == 8 and seed["A_ROWS"])
    assert registers[eight] * eight["COL_THREADS"] * eight["K_GROUPS"] * 2 <= H200.regs_per_sm


def test_a_sample_of_the_staged_space_compiles_for_sm90_without_spills(pool):
    """Each value of each knob among feasible staged configs at 8x4096x11008 and 1x4096x4096."""
    space = load_space("sgemm_gemv")
    rng = random.Random(5)
    configs = []
    for shape in ((8, 4096, 11008), (1, 4096, 4096)):
        feasible = [c for c in feasible_configs(space, H200, GemmProblem(*shape, "f32")) if c["A_ROWS"]]
        for knob, values in space.knobs.items():
            for value in values:
                having = [c for c in feasible if c[knob] == value]
                configs += rng.sample(having, min(1, len(having)))
    configs = list(dict.fromkeys(configs))
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

EMULATION = r"""
// Host emulation of the CUDA the sgemm_gemv template uses (tests/test_gemv_offline.py).
#define GEMV_HOST_EMULATION 1
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <vector>
#include <pthread.h>
#include <math.h>
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __cluster_dims__(...)
#define __align__(n) alignas(n)
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct dim3 { unsigned x = 0, y = 0, z = 0; };
template <class T> inline T min(T a, T b) { return a < b ? a : b; }
template <class T> inline T max(T a, T b) { return a > b ? a : b; }

struct Range { const char* begin; const char* end; };
static std::vector<Range> g_readable;  // A and B: what global loads may read
static void check_read(const void* p, size_t bytes) {
    const char* c = static_cast<const char*>(p);
    for (const Range& r : g_readable)
        if (c >= r.begin && c + bytes <= r.end) return;
    std::fprintf(stderr, "global load outside A and B\n");
    std::exit(3);
}
template <class T> inline T __ldg(const T* p) { check_read(p, sizeof(T)); return *p; }
template <class T> inline T __ldcs(const T* p) { check_read(p, sizeof(T)); return *p; }

struct Warp { float slots[32]; std::barrier<> bar{32}; };
struct Block {
    std::vector<float> arena;
    std::barrier<>* bar;
    std::vector<Warp*> warps;
};
static Block* g_blocks[16];
static std::barrier<>* g_cluster_bar;
static bool g_eager;  // cp.async copies when issued (else at the wait)
static thread_local dim3 threadIdx, blockIdx;
static thread_local unsigned t_rank;
static thread_local size_t t_arena_used;
static thread_local std::vector<float*> t_dst;
static thread_local std::vector<const float*> t_src;
static thread_local std::vector<int> t_bytes, t_size;

static float* emu_shared(size_t bytes) {
    Block* b = g_blocks[t_rank];
    t_arena_used = (t_arena_used + 15) / 16 * 16;
    float* p = b->arena.data() + t_arena_used / 4;
    t_arena_used += bytes;
    if (t_arena_used > b->arena.size() * 4 - 4096) { std::fprintf(stderr, "shared memory arena too small\n"); std::exit(4); }
    return p;
}
inline void __syncthreads() { g_blocks[t_rank]->bar->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float v, int off) {
    Warp* w = g_blocks[t_rank]->warps[threadIdx.x / 32];
    const int lane = threadIdx.x % 32;
    w->slots[lane] = v;
    w->bar.arrive_and_wait();
    const float r = w->slots[lane ^ off];
    w->bar.arrive_and_wait();
    return r;
}
static void do_copy(float* dst, const float* src, int bytes, int src_bytes) {
    if (src_bytes > 0) check_read(src, src_bytes);
    std::memset(dst, 0, bytes);
    std::memcpy(dst, src, src_bytes);
}
template <int BYTES> inline void cp_async(float* dst, const float* src, int src_bytes) {
    if (reinterpret_cast<uintptr_t>(src) % BYTES || reinterpret_cast<uintptr_t>(dst) % BYTES || src_bytes < 0 ||
        src_bytes > BYTES) { std::fprintf(stderr, "cp.async misaligned or oversized\n"); std::exit(5); }
    if (g_eager) { do_copy(dst, src, BYTES, src_bytes); return; }
    t_dst.push_back(dst); t_src.push_back(src); t_bytes.push_back(src_bytes); t_size.push_back(BYTES);
}
inline void cp_async_commit() {}
inline void cp_async_wait_all() {
    for (size_t i = 0; i < t_dst.size(); ++i) do_copy(t_dst[i], t_src[i], t_size[i], t_bytes[i]);
    t_dst.clear(); t_src.clear(); t_bytes.clear(); t_size.clear();
}
inline void cluster_sync() { g_cluster_bar->arrive_and_wait(); }
inline unsigned cluster_rank() { return t_rank; }
inline float load_cluster(const float* local, unsigned rank) {
    const ptrdiff_t at = local - g_blocks[t_rank]->arena.data();
    return g_blocks[rank]->arena[at];
}
"""

HARNESS = r"""
// Launch: argv M N K alpha beta grid_x grid_y threads cluster eager a_offset b_offset; A, B, C from a.bin, b.bin,
// c.bin (C's result written to out.bin).
struct Args { unsigned tid, block_x, block_y, rank; };
static const float *g_A, *g_B; static float* g_C; static int g_M, g_N, g_K; static float g_alpha, g_beta;
static void* run_thread(void* p) {
    Args* a = static_cast<Args*>(p);
    threadIdx.x = a->tid; blockIdx.x = a->block_x; blockIdx.y = a->block_y; t_rank = a->rank; t_arena_used = 0;
    KERNEL(g_A, g_B, g_C, g_M, g_N, g_K, g_alpha, g_beta);
    if (!t_dst.empty()) { std::fprintf(stderr, "cp.async copies never waited for\n"); std::exit(6); }
    return nullptr;
}
static std::vector<float> read_file(const char* name, size_t count) {
    std::vector<float> v(count);
    FILE* f = std::fopen(name, "rb");
    if (!f || std::fread(v.data(), 4, count, f) != count) { std::fprintf(stderr, "cannot read %s\n", name); std::exit(2); }
    std::fclose(f);
    return v;
}
int main(int argc, char** argv) {
    g_M = std::atoi(argv[1]); g_N = std::atoi(argv[2]); g_K = std::atoi(argv[3]);
    g_alpha = std::atof(argv[4]); g_beta = std::atof(argv[5]);
    const unsigned grid_x = std::atoi(argv[6]), grid_y = std::atoi(argv[7]), threads = std::atoi(argv[8]);
    const unsigned cluster = std::atoi(argv[9]);
    g_eager = std::atoi(argv[10]);
    const int a_offset = std::atoi(argv[11]), b_offset = std::atoi(argv[12]);
    const size_t guard = 8 * size_t(g_N) + 64;  // floats of sentinel before and after C (a row of C past M lands in it)
    std::vector<float> a = read_file("a.bin", size_t(g_M) * g_K), b = read_file("b.bin", size_t(g_K) * g_N);
    std::vector<float> c0 = read_file("c.bin", size_t(g_M) * g_N);
    std::vector<float> A(a.size() + 8), B(b.size() + 8), C(c0.size() + 2 * guard, 12345.0f);
    std::memcpy(A.data() + a_offset, a.data(), a.size() * 4);
    std::memcpy(B.data() + b_offset, b.data(), b.size() * 4);
    std::memcpy(C.data() + guard, c0.data(), c0.size() * 4);
    g_A = A.data() + a_offset; g_B = B.data() + b_offset; g_C = C.data() + guard;
    g_readable = {{reinterpret_cast<const char*>(g_A), reinterpret_cast<const char*>(g_A + a.size())},
                  {reinterpret_cast<const char*>(g_B), reinterpret_cast<const char*>(g_B + b.size())}};
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1 << 18);
    for (unsigned y = 0; y < grid_y; ++y)
        for (unsigned x0 = 0; x0 < grid_x; x0 += cluster) {
            std::barrier<> cluster_bar(cluster * threads);
            g_cluster_bar = &cluster_bar;
            std::vector<Block> blocks(cluster);
            std::vector<std::barrier<>*> bars;
            for (unsigned r = 0; r < cluster; ++r) {
                blocks[r].arena.assign(64 * 1024, std::nanf(""));
                blocks[r].bar = new std::barrier<>(threads);
                for (unsigned w = 0; w < threads / 32; ++w) blocks[r].warps.push_back(new Warp());
                g_blocks[r] = &blocks[r];
            }
            std::vector<pthread_t> ids(cluster * threads);
            std::vector<Args> args(cluster * threads);
            for (unsigned r = 0; r < cluster; ++r)
                for (unsigned t = 0; t < threads; ++t) {
                    args[r * threads + t] = Args{t, x0 + r, y, r};
                    if (pthread_create(&ids[r * threads + t], &attr, run_thread, &args[r * threads + t])) {
                        std::fprintf(stderr, "pthread_create failed\n"); return 7;
                    }
                }
            for (pthread_t id : ids) pthread_join(id, nullptr);
            for (Block& block : blocks) { delete block.bar; for (Warp* w : block.warps) delete w; }
        }
    for (size_t i = 0; i < guard; ++i)
        if (C[i] != 12345.0f || C[guard + c0.size() + i] != 12345.0f) { std::fprintf(stderr, "write outside C\n"); return 8; }
    FILE* f = std::fopen("out.bin", "wb");
    std::fwrite(g_C, 4, c0.size(), f);
    std::fclose(f);
    return 0;
}
"""

SHARED = re.compile(r"__shared__\s+(?:__align__\(\d+\)\s+)?float\s+(\w+)((?:\[[^\]]+\])+);")


def host_source(code: str, entry: str) -> str:
    """The rendered kernel as host C++: shared arrays from the block's arena, the kernel an ordinary function."""
    code = SHARED.sub(lambda m: f"auto& {m[1]} = *reinterpret_cast<float(*){m[2]}>(emu_shared(sizeof(float{m[2]})));",
                      code)
    assert "__shared__" not in code
    code = code.replace('extern "C" ', "")
    return EMULATION + code + HARNESS.replace("KERNEL", entry)


needs_compiler = pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler (g++)")


def build_on_host(space, config, folder):
    source = render(space, config, H200)
    (folder / "kernel.cpp").write_text(host_source(source.code, source.entry))
    subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", "-w", "-o", str(folder / "kernel"),
                    str(folder / "kernel.cpp")], check=True, capture_output=True, timeout=300)
    return folder / "kernel"


def run_on_host(binary, space, config, shape, alpha, beta, eager, a_offset=0, b_offset=0, seed=0):
    """C from the kernel run on the CPU at ``shape``, and the fp64 reference; C is NaN where beta is 0."""
    m, n, k = shape
    rng = numpy.random.default_rng(seed)
    a = rng.uniform(-1, 1, (m, k)).astype(numpy.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(numpy.float32)
    c = numpy.full((m, n), numpy.nan, numpy.float32) if beta == 0 else rng.uniform(-1, 1, (m, n)).astype(numpy.float32)
    folder = binary.parent
    for name, array in (("a", a), ("b", b), ("c", c)):
        array.tofile(folder / f"{name}.bin")
    launch = space.launch(config, H200, GemmProblem(m, n, k, "f32", alpha=alpha, beta=beta))
    cluster = config["SPLIT_K"]
    assert launch.grid[0] % cluster == 0
    argv = [str(binary), *map(str, (m, n, k, alpha, beta, launch.grid[0], launch.grid[1], launch.block[0], cluster,
                                    int(eager), a_offset, b_offset))]
    result = subprocess.run(argv, check=False, cwd=folder, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{config.name} {shape}: exit {result.returncode}: {result.stderr.strip()}"
    out = numpy.fromfile(folder / "out.bin", numpy.float32).reshape(m, n)
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
def test_staged_kernels_compute_c_on_the_cpu(index, tmp_path):
    space = load_space("sgemm_gemv")
    config = space.config(STAGED[index])
    binary = build_on_host(space, config, tmp_path)
    for i, shape in enumerate(HOST_SHAPES):
        if i % 3 != index % 3 and i:  # each config a third of the shapes (and 1x1x1); every shape, three configs
            continue
        alpha, beta = ((1.0, 0.0), (-1.5, 0.5))[(i + index) % 2]
        eager = (i + index // 2) % 2 == 0  # copies at the issue and at the wait, each half the runs
        out, reference, scale = run_on_host(binary, space, config, shape, alpha, beta, eager, seed=i)
        assert_close(config, shape, out, reference, scale)


@needs_compiler
@pytest.mark.parametrize("seed_index", range(4, 9))
def test_staged_seeds_compute_c_on_the_cpu(seed_index, tmp_path):
    """The staged seeds at shapes of the GPU test's kind: rows past MAX_M, N of no strip, K of no chunk."""
    space = load_space("sgemm_gemv")
    config = space.seeds[seed_index]
    assert config["A_ROWS"]
    binary = build_on_host(space, config, tmp_path)
    for i, shape in enumerate([(9, 300, 1100), (3, 1001, 129), (1, 7, 5)]):
        alpha, beta = ((1.0, 0.0), (-1.5, 0.5))[(i + seed_index) % 2]
        out, reference, scale = run_on_host(binary, space, config, shape, alpha, beta, beta == 0, seed=i)
        assert_close(config, shape, out, reference, scale)


@needs_compiler
@pytest.mark.parametrize("index", [0, 2, 7])
def test_staged_kernels_take_misaligned_a_and_b(index, tmp_path):
    """A one float past a 16-byte boundary: 4-byte copies; B so too: scalar loads (the launcher never passes
    these, but the kernel does not rely on it)."""
    space = load_space("sgemm_gemv")
    config = space.config(STAGED[index])
    binary = build_on_host(space, config, tmp_path)
    for shape in ((4, 136, 1028), (1, 36, 300)):
        for eager in (False, True):
            out, reference, scale = run_on_host(binary, space, config, shape, 0.5, 0.25, eager, a_offset=1,
                                                b_offset=1 + int(eager))
            assert_close(config, shape, out, reference, scale)


@needs_compiler
@pytest.mark.parametrize("seed_index", range(4))
def test_the_l1_kernel_of_the_first_seeds_computes_c_on_the_cpu(seed_index, tmp_path):
    """The kernel the shipped results measured (A_ROWS 0: unchanged, one block along y), at shapes its rules admit."""
    space = load_space("sgemm_gemv")
    config = space.seeds[seed_index]
    assert config["A_ROWS"] == 0
    binary = build_on_host(space, config, tmp_path)
    top = config["MAX_M"]
    for i, shape in enumerate([(1, 64, 100), (top, 128, 333), (max(1, top - 1), 132, 70), (min(3, top), 4, 17)]):
        assert space.check(config, H200, GemmProblem(*shape, "f32")).feasible, shape
        out, reference, scale = run_on_host(binary, space, config, shape, -1.5, 0.5 if i % 2 else 0.0, False, seed=i)
        assert_close(config, shape, out, reference, scale)
