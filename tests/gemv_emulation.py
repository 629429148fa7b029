"""The rendered CUDA of the few-row families (sgemm_gemv, hgemm_gemv) run on the CPU, and their NVRTC
builds checked (:func:`compile_and_check`).

A kernel's source is compiled by the host's C++ compiler with a small emulation of what it uses
(``EMULATION``): every thread of a block is a thread of its own, ``__syncthreads`` a barrier, warp shuffles
and ``mma.sync`` an exchange among the warp's 32 threads, ``cp.async`` a copy done when it is issued or, to
catch a chunk read before its copies are waited for, only at the wait; a cluster's blocks run together, with
``barrier.cluster`` and distributed shared-memory reads between them. Shared memory starts as NaNs (in fp32,
fp16 and bf16 alike), global loads outside A and B abort the run, and guard zones around C show a write
outside it. Several kernels go into one program (each in a namespace of its own), chosen by index at launch.
What it cannot show: speed, the hardware's own memory ordering (only barriers order threads here), a block
that leaves while its cluster still reads its shared memory (the emulation keeps it), and PTX the GPU would
refuse (NVRTC compiles the same sources).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy
import pytest

from autotune.gpu_specs import GpuSpec, gpu_spec
from autotune.kernel.compile import CompileFailure
from autotune.kernel.render import render
from autotune.kernel.resources import resource_violation
from autotune.records import Resources

EMULATION = r"""
// Host emulation of the CUDA the few-row templates use (tests/gemv_emulation.py).
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
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
struct dim3 { unsigned x = 0, y = 0, z = 0; };
template <class T> inline T min(T a, T b) { return a < b ? a : b; }
template <class T> inline T max(T a, T b) { return a > b ? a : b; }

// fp16 and bf16 as their bits, with the conversions of cuda_fp16.h and cuda_bf16.h (round to nearest even).
struct half { unsigned short bits; };
struct alignas(4) half2 { half x, y; };
struct __nv_bfloat16 { unsigned short bits; };
struct alignas(4) __nv_bfloat162 { __nv_bfloat16 x, y; };
inline float __half2float(half h) { _Float16 f; std::memcpy(&f, &h.bits, 2); return static_cast<float>(f); }
inline half __float2half(float v) { const _Float16 f = static_cast<_Float16>(v); half h; std::memcpy(&h.bits, &f, 2); return h; }
inline float2 __half22float2(half2 h) { return float2{__half2float(h.x), __half2float(h.y)}; }
inline float __bfloat162float(__nv_bfloat16 h) {
    const uint32_t u = uint32_t(h.bits) << 16; float f; std::memcpy(&f, &u, 4); return f;
}
inline __nv_bfloat16 __float2bfloat16(float v) {
    uint32_t u; std::memcpy(&u, &v, 4);
    __nv_bfloat16 h;
    h.bits = std::isnan(v) ? 0x7FC0 : static_cast<unsigned short>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
    return h;
}
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return float2{__bfloat162float(h.x), __bfloat162float(h.y)}; }
inline float emu_to_float(float v) { return v; }
inline float emu_to_float(half v) { return __half2float(v); }
inline float emu_to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

struct Range { const char* begin; const char* end; };
static std::vector<Range> g_readable;  // A and B: what global loads may read
static void check_read(const void* p, size_t bytes) {
    const char* c = static_cast<const char*>(p);
    for (const Range& r : g_readable)
        if (c >= r.begin && c + bytes <= r.end) return;
    std::fprintf(stderr, "global load outside A and B\n");
    std::exit(3);
}
template <class T> inline T __ldg(const T* p) {
    if (reinterpret_cast<uintptr_t>(p) % sizeof(T)) { std::fprintf(stderr, "misaligned global load\n"); std::exit(9); }
    check_read(p, sizeof(T)); return *p;
}
template <class T> inline T __ldcs(const T* p) { return __ldg(p); }

struct MmaFragments { unsigned a[4]; unsigned b[2]; };
struct Warp { float slots[32]; MmaFragments mma[32]; std::barrier<> bar{32}; };
struct Block {
    std::vector<uint32_t> arena;
    std::barrier<>* bar;
    std::vector<Warp*> warps;
};
static Block* g_blocks[16];
static std::barrier<>* g_cluster_bar;
static bool g_eager;  // cp.async copies when issued (else at the wait)
static thread_local dim3 threadIdx, blockIdx;
static thread_local unsigned t_rank;
static thread_local size_t t_arena_used;
static thread_local std::vector<void*> t_dst;
static thread_local std::vector<const void*> t_src;
static thread_local std::vector<int> t_bytes, t_size;

static void* emu_shared(size_t bytes) {
    Block* b = g_blocks[t_rank];
    t_arena_used = (t_arena_used + 15) / 16 * 16;
    char* p = reinterpret_cast<char*>(b->arena.data()) + t_arena_used;
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
// mma.sync.aligned.m16n8k16.row.col.f32.E.E.f32, d += a * b: the PTX fragment layouts, fp32 sums in k order.
template <class E> inline float emu_element(unsigned word, int high) {
    const unsigned short bits = high ? static_cast<unsigned short>(word >> 16) : static_cast<unsigned short>(word & 0xFFFF);
    E e; std::memcpy(&e, &bits, 2);
    return emu_to_float(e);
}
template <class E> inline void emu_mma(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                       unsigned b0, unsigned b1) {
    Warp* w = g_blocks[t_rank]->warps[threadIdx.x / 32];
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    w->mma[lane] = MmaFragments{{a0, a1, a2, a3}, {b0, b1}};
    w->bar.arrive_and_wait();
    for (int i = 0; i < 4; ++i) {
        const int row = g + 8 * (i / 2), col = 2 * t + i % 2;
        float sum = d[i];
        for (int k = 0; k < 16; ++k) {
            const MmaFragments& fa = w->mma[(row % 8) * 4 + (k % 8) / 2];
            const MmaFragments& fb = w->mma[col * 4 + (k % 8) / 2];
            const float a = emu_element<E>(fa.a[(row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)], k % 2);
            const float b = emu_element<E>(fb.b[k >= 8 ? 1 : 0], k % 2);
            sum += a * b;
        }
        d[i] = sum;
    }
    w->bar.arrive_and_wait();
}
static void do_copy(void* dst, const void* src, int bytes, int src_bytes) {
    if (src_bytes > 0) check_read(src, src_bytes);
    std::memset(dst, 0, bytes);
    std::memcpy(dst, src, src_bytes);
}
template <int BYTES> inline void cp_async(void* dst, const void* src, int src_bytes) {
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
    const ptrdiff_t at = reinterpret_cast<const char*>(local) - reinterpret_cast<const char*>(g_blocks[t_rank]->arena.data());
    float v;
    std::memcpy(&v, reinterpret_cast<const char*>(g_blocks[rank]->arena.data()) + at, 4);
    return v;
}
"""

HARNESS = r"""
// Launch: argv KERNEL M N K alpha beta grid_x grid_y threads cluster eager a_offset b_offset (offsets in elements);
// A, B, C from a.bin, b.bin, c.bin in the kernel's element type (C's result written to out.bin).
static const void *g_A, *g_B; static void* g_C; static int g_M, g_N, g_K; static float g_alpha, g_beta;
static void* g_kernel;
struct Args { unsigned tid, block_x, block_y, rank; };
template <class E> static void* run_thread(void* p) {
    Args* a = static_cast<Args*>(p);
    threadIdx.x = a->tid; blockIdx.x = a->block_x; blockIdx.y = a->block_y; t_rank = a->rank; t_arena_used = 0;
    reinterpret_cast<void (*)(const E*, const E*, E*, int, int, int, float, float)>(g_kernel)(
        static_cast<const E*>(g_A), static_cast<const E*>(g_B), static_cast<E*>(g_C), g_M, g_N, g_K, g_alpha, g_beta);
    if (!t_dst.empty()) { std::fprintf(stderr, "cp.async copies never waited for\n"); std::exit(6); }
    return nullptr;
}
template <class E> static std::vector<E> read_file(const char* name, size_t count) {
    std::vector<E> v(count);
    FILE* f = std::fopen(name, "rb");
    if (!f || std::fread(v.data(), sizeof(E), count, f) != count) { std::fprintf(stderr, "cannot read %s\n", name); std::exit(2); }
    std::fclose(f);
    return v;
}
template <class E> static int launch(void (*kernel)(const E*, const E*, E*, int, int, int, float, float), char** argv) {
    g_kernel = reinterpret_cast<void*>(kernel);
    g_M = std::atoi(argv[2]); g_N = std::atoi(argv[3]); g_K = std::atoi(argv[4]);
    g_alpha = std::atof(argv[5]); g_beta = std::atof(argv[6]);
    const unsigned grid_x = std::atoi(argv[7]), grid_y = std::atoi(argv[8]), threads = std::atoi(argv[9]);
    const unsigned cluster = std::atoi(argv[10]);
    g_eager = std::atoi(argv[11]);
    const int a_offset = std::atoi(argv[12]), b_offset = std::atoi(argv[13]);
    const size_t guard = 8 * size_t(g_N) + 64;  // elements of sentinel before and after C (a row of C past M lands in it)
    std::vector<E> a = read_file<E>("a.bin", size_t(g_M) * g_K), b = read_file<E>("b.bin", size_t(g_K) * g_N);
    std::vector<E> c0 = read_file<E>("c.bin", size_t(g_M) * g_N);
    std::vector<E> A(a.size() + 16), B(b.size() + 16), C(c0.size() + 2 * guard);
    std::memset(C.data(), 0xA5, C.size() * sizeof(E));
    std::memcpy(A.data() + a_offset, a.data(), a.size() * sizeof(E));
    std::memcpy(B.data() + b_offset, b.data(), b.size() * sizeof(E));
    std::memcpy(C.data() + guard, c0.data(), c0.size() * sizeof(E));
    g_A = A.data() + a_offset; g_B = B.data() + b_offset; g_C = C.data() + guard;
    g_readable = {{reinterpret_cast<const char*>(A.data() + a_offset), reinterpret_cast<const char*>(A.data() + a_offset + a.size())},
                  {reinterpret_cast<const char*>(B.data() + b_offset), reinterpret_cast<const char*>(B.data() + b_offset + b.size())}};
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1 << 18);
    for (unsigned y = 0; y < grid_y; ++y)
        for (unsigned x0 = 0; x0 < grid_x; x0 += cluster) {
            std::barrier<> cluster_bar(cluster * threads);
            g_cluster_bar = &cluster_bar;
            std::vector<Block> blocks(cluster);
            for (unsigned r = 0; r < cluster; ++r) {
                blocks[r].arena.assign(64 * 1024, 0x7FFF7FFFu);  // NaN as fp32, and as two fp16s or bf16s
                blocks[r].bar = new std::barrier<>(threads);
                for (unsigned w = 0; w < threads / 32; ++w) blocks[r].warps.push_back(new Warp());
                g_blocks[r] = &blocks[r];
            }
            std::vector<pthread_t> ids(cluster * threads);
            std::vector<Args> args(cluster * threads);
            for (unsigned r = 0; r < cluster; ++r)
                for (unsigned t = 0; t < threads; ++t) {
                    args[r * threads + t] = Args{t, x0 + r, y, r};
                    if (pthread_create(&ids[r * threads + t], &attr, run_thread<E>, &args[r * threads + t])) {
                        std::fprintf(stderr, "pthread_create failed\n"); return 7;
                    }
                }
            for (pthread_t id : ids) pthread_join(id, nullptr);
            for (Block& block : blocks) { delete block.bar; for (Warp* w : block.warps) delete w; }
        }
    std::vector<unsigned char> sentinel(guard * sizeof(E), 0xA5);
    if (std::memcmp(C.data(), sentinel.data(), sentinel.size()) ||
        std::memcmp(C.data() + guard + c0.size(), sentinel.data(), sentinel.size())) {
        std::fprintf(stderr, "write outside C\n"); return 8;
    }
    FILE* f = std::fopen("out.bin", "wb");
    std::fwrite(g_C, sizeof(E), c0.size(), f);
    std::fclose(f);
    return 0;
}
"""

SHARED = re.compile(r"__shared__\s+(?:__align__\(\d+\)\s+)?float\s+(\w+)((?:\[[^\]]+\])+);")
CUDA_INCLUDE = re.compile(r"^#include <cuda_\w+\.h>\n", re.MULTILINE)
# The element types of the dtypes (their c_type in autotune.problem.ELEMENTS): what the harness reads and the
# emulated mma.sync decodes.
STORAGE = {"float": numpy.float32, "half": numpy.float16, "__nv_bfloat16": numpy.uint16}


def host_source(kernels: list[tuple[str, str, str]]) -> str:
    """One host C++ program of rendered kernels, each ``(code, entry, element)`` (``element``: its C element
    type) in a namespace of its own: shared arrays from the block's arena, the kernel an ordinary function,
    launched by its index in the list (the program's first argument)."""
    parts, cases = [EMULATION], []
    for index, (code, entry, element) in enumerate(kernels):
        code = SHARED.sub(
            lambda m: f"auto& {m[1]} = *reinterpret_cast<float(*){m[2]}>(emu_shared(sizeof(float{m[2]})));", code)
        assert "__shared__" not in code
        code = CUDA_INCLUDE.sub("", code).replace('extern "C" ', "")
        assert "#include" not in code
        parts.append(f"namespace kernel{index} {{\n"
                     "inline void mma_16816(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,"
                     f" unsigned b0, unsigned b1) {{ emu_mma<{element}>(d, a0, a1, a2, a3, b0, b1); }}\n"
                     f"{code}\n}}  // namespace kernel{index}\n")
        cases.append(f"    case {index}: return launch<{element}>(kernel{index}::{entry}, argv);\n")
    return "".join(parts) + HARNESS + ("int main(int argc, char** argv) {\n    switch (std::atoi(argv[1])) {\n"
                                       + "".join(cases) + "    }\n    return 10;\n}\n")


needs_compiler = pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler (g++)")


def build(kernels: list[tuple[str, str, str]], folder: Path) -> Path:
    """The host program of ``kernels`` (:func:`host_source`), compiled into ``folder``."""
    (folder / "kernel.cpp").write_text(host_source(kernels))
    subprocess.run(["g++", "-std=c++20", "-O1", "-fno-strict-aliasing", "-pthread", "-w", "-o",
                    str(folder / "kernel"), str(folder / "kernel.cpp")], check=True, capture_output=True, timeout=600)
    return folder / "kernel"


def run(binary: Path, index: int, element: str, a, b, c, alpha: float, beta: float, grid: tuple[int, int],
        threads: int, cluster: int, eager: bool, a_offset: int = 0, b_offset: int = 0, what: str = ""):
    """C after kernel ``index`` of ``binary`` ran on the CPU on ``a`` (M x K), ``b`` (K x N, or N x K as the kernel
    reads it: only its size matters here) and ``c`` (M x N), stored as ``element`` stores them (``STORAGE``)."""
    (m, k), n = a.shape, c.shape[1]
    folder = binary.parent / f"run{index}"
    folder.mkdir(exist_ok=True)
    storage = STORAGE[element]
    for name, array in (("a", a), ("b", b), ("c", c)):
        numpy.ascontiguousarray(array, storage).tofile(folder / f"{name}.bin")
    argv = [str(binary), *map(str, (index, m, n, k, alpha, beta, grid[0], grid[1], threads, cluster, int(eager),
                                    a_offset, b_offset))]
    result = subprocess.run(argv, check=False, cwd=folder, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{what} {(m, n, k)}: exit {result.returncode}: {result.stderr.strip()}"
    return numpy.fromfile(folder / "out.bin", storage).reshape(m, n)


def compile_and_check(space, configs, pool, gpu: GpuSpec = gpu_spec("h200")) -> dict:
    """Compile ``configs`` for ``gpu``: each without spills or stack, within the registers its block leaves, its
    shared memory the space file's SMEM_BYTES. Their registers by config, printed (pytest -s)."""
    compiled = pool.map([render(space, config, gpu) for config in configs], gpu.sm)
    registers = {}
    for config, kernel in zip(configs, compiled):
        assert not isinstance(kernel, CompileFailure), f"{config.name}: {kernel.message}"
        res, values = kernel.resources, space.values(config, gpu)
        assert res.spill_stores == res.spill_loads == res.stack_frame == 0, (config.name, res)
        assert res.smem_static == values["SMEM_BYTES"], config.name
        assert resource_violation(Resources(**{**res.__dict__, "smem_dynamic": 0}), values["THREADS"], gpu,
                                  opt_in=False) is None, (config.name, res.registers)
        print(f"{gpu.sm} {config.name}: {res.registers} registers (~{values['REG_EST']} estimated) x "
              f"{values['THREADS']} threads, {res.smem_static} B smem")
        registers[config] = res.registers
    return registers
