"""Dev probe: TMA / cluster variants of hgemm_wgmma, verified at odd shapes and timed against cuBLAS."""
import sys, time
from autotune.space import load_space
from autotune.render import render, KernelSource
from autotune.compile import CompilePool, CompileFailure
from autotune.gpus import GPUS
from autotune.problem import GemmProblem
from autotune.study import kernel_task
from autotune.worker import GpuWorker, CublasTask
from autotune.records import Measurement

BASE = dict(WG_M=1, WG_N=1, M_TILES=1, WN=128, BK=64, STAGES=6, WAIT_DEPTH=1, SMEM_OPT_IN=1, GROUP_M=1,
            SMEM_EPILOGUE=1, SPLIT_K=1, PRODUCER=1, TMA=0, CLUSTER_M=1, CLUSTER_N=1)
M128x64 = dict(WG_M=2, WN=64)
CONST = [('extern "C" __device__ TensorMap', 'extern "C" __constant__ TensorMap')]
NOPREFETCH = [('asm volatile("prefetch.tensormap', '// asm volatile("prefetch.tensormap')]
W64x128 = dict(WG_N=2, WN=64)
# Clusters of 2 along N, but every block loads its whole A tile itself and frees its stages alone.
NO_MULTICAST = [
    ("constexpr int SHARERS = 2;", "constexpr int SHARERS = 1;"),
    ("tma_load_multicast(base + in_x * A_PART * A_ROW_BYTES, &tensor_map_a, k0, block_m + in_x * A_PART, bar, a_mask);",
     "tma_load(base, &tensor_map_a, k0, block_m, bar); tma_load(base + 64 * A_ROW_BYTES, &tensor_map_a, k0, block_m + 64, bar);"),
    ("auto release_stage = [&](int stage) { if (lane < SHARERS) mbarrier_arrive_cluster(empty + 8 * stage, sharer_rank); };",
     "auto release_stage = [&](int stage) { if (lane == 0) mbarrier_arrive(empty + 8 * stage); };"),
]
VARIANTS = {
    1024: [
        ("tma 128x64 s8", dict(M128x64, TMA=1, STAGES=8)),
        ("tma 128x64 cn2 s8 fwd", dict(M128x64, TMA=1, CLUSTER_N=2, STAGES=8)),
        ("tma 64x128 cm2 s8 fwd", dict(TMA=1, CLUSTER_M=2, STAGES=8)),
        ("tma 64x128 s8", dict(TMA=1, STAGES=8)),
        ("tma 128x64 c2x2 s8 fwd", dict(M128x64, TMA=1, CLUSTER_N=2, CLUSTER_M=2, STAGES=8)),
    ],
}
SLOPE = [(label, change, *edits) for label, change, *edits in VARIANTS[1024][:3]]
SLOPE_SHAPES = [(1024, 1024, 4096)]
CHECK_SHAPES = [(129, 136, 520), (200, 264, 72), (64, 64, 64), (513, 511, 1025), (300, 200, 104)]


def main():
    space = load_space("hgemm_wgmma"); gpu = GPUS["h200"]
    jobs = []
    for size, variants in VARIANTS.items():
        for label, change, *edits in variants:
            config = space.config({**BASE, **change})
            verdict = space.check(config, gpu)
            if not verdict.feasible:
                print(f"{size} {label}: rejected: {verdict.reason}"); continue
            source = render(space, config, gpu)
            code = source.code
            for old, new in (edits[0] if edits else []):
                assert old in code, (label, old)
                code = code.replace(old, new)
            jobs.append((size, label, config, KernelSource(source.entry, code, label, source.target)))
    t0 = time.time()
    with CompilePool() as pool:
        kernels = list(pool.map(src for *_, src in jobs))
    print(f"compiled {len(jobs)} in {time.time() - t0:.1f} s", flush=True)
    with GpuWorker() as w:
        for size in VARIANTS:
            p = GemmProblem(size, size, size, "f16")
            cub = w.run(CublasTask(p, 0, 10, 100), timeout_s=120)
            print(f"{size} cuBLAS {cub.timing.median_ms:.4f} ms", flush=True)
            for (s, label, config, _), kernel in zip(jobs, kernels):
                if s != size:
                    continue
                if isinstance(kernel, CompileFailure):
                    print(f"{size} {label}: compile failure {kernel.message[:300]}"); continue
                checks = []
                for shape in CHECK_SHAPES:
                    q = GemmProblem(*shape, "f16", alpha=1.0 if shape[0] != 300 else -1.5, beta=0.0 if shape[0] != 300 else 0.75)
                    r = w.run(kernel_task(space, config, kernel, gpu, q, 1, 1, 3), timeout_s=30)
                    checks.append("ok" if isinstance(r, Measurement) else f"{shape}:{r.failure_class}:{r.message[:160]}")
                    if not isinstance(r, Measurement) and r.failure_class == "timeout":
                        break
                times = []
                for rep in range(2):
                    r = w.run(kernel_task(space, config, kernel, gpu, p, 0, 10, 100), timeout_s=60)
                    times.append(r.timing.median_ms if isinstance(r, Measurement) else f"{r.failure_class}:{r.message[:200]}")
                bad = [c for c in checks if c != "ok"]
                ratio = cub.timing.median_ms / times[0] if isinstance(times[0], float) else None
                print(f"{size} {label}: {times} ratio {ratio and round(ratio, 3)} regs {kernel.resources.registers} "
                      f"checks {'all ok' if not bad else bad}", flush=True)
            cub = w.run(CublasTask(p, 0, 10, 100), timeout_s=120)
            print(f"{size} cuBLAS again {cub.timing.median_ms:.4f} ms", flush=True)
        slope, slope_sources = [], []
        for label, change, *edits in SLOPE:
            config = space.config({**BASE, **change})
            source = render(space, config, gpu)
            code = source.code
            for old, new in (edits[0] if edits else []):
                assert old in code, (label, old)
                code = code.replace(old, new)
            slope.append((label, config))
            slope_sources.append(KernelSource(source.entry, code, label, source.target))
        with CompilePool() as pool:
            slope_kernels = list(pool.map(slope_sources))
        for shape in SLOPE_SHAPES:
            q = GemmProblem(*shape, "f16")
            cub = w.run(CublasTask(q, 0, 10, 100), timeout_s=120)
            line = [f"{shape} cuBLAS {cub.timing.median_ms:.4f}"]
            for (label, config), kernel in zip(slope, slope_kernels):
                r = w.run(kernel_task(space, config, kernel, gpu, q, 0, 10, 100), timeout_s=60)
                line.append(f"{label} {r.timing.median_ms:.4f}" if isinstance(r, Measurement) else f"{label} {r.failure_class}")
            print("slope", " | ".join(line), flush=True)


if __name__ == "__main__":
    main()
