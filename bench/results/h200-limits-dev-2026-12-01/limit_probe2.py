"""Dev probe: what limits hgemm_wgmma at 1024? Variants with loads or wgmma removed, timed against K."""
import functools, sys, time
import numpy
from autotune.space import load_space
from autotune.render import render, KernelSource
from autotune.compile import CompilePool, CompileFailure
from autotune.gpus import GPUS
from autotune.problem import GemmProblem
from autotune.study import kernel_task
from autotune.worker import CupyBackend
from autotune.records import Failure

BASE = dict(WG_M=1, WG_N=1, M_TILES=1, WN=128, BK=64, STAGES=8, WAIT_DEPTH=2, SMEM_OPT_IN=1, GROUP_M=1,
            SMEM_EPILOGUE=1, SPLIT_K=1, PRODUCER=1, TMA=1, CLUSTER_M=1, CLUSTER_N=1)
M128 = dict(WG_M=2, WN=64)
NO_LOAD = [("mbarrier_arrive_expect_tx(bar, STAGE_BYTES);",
            "if (t >= STAGES) { mbarrier_arrive(bar); if (++stage == STAGES) stage = 0, ++use; continue; }\n"
            "                mbarrier_arrive_expect_tx(bar, STAGE_BYTES);")]
NO_MMA = [("        multiply_tile(stage);\n", "\n")]
NO_STORE = [("for (int j = 0; j < BN / 64; ++j) tma_store(", "for (int j = 0; j < 0; ++j) tma_store(")]
CM2 = dict(CLUSTER_M=2)
VARIANTS = [
    ("64x128 s8 wd2", {}, []),
    ("64x128 s9 wd2", dict(STAGES=9), []),
    ("64x128 s9 wd1", dict(STAGES=9, WAIT_DEPTH=1), []),
    ("64x128 s8 wd1", dict(WAIT_DEPTH=1), []),
    ("64x128 s8 wd0", dict(WAIT_DEPTH=0), []),
    ("64x128 s6 wd2", dict(STAGES=6), []),
    ("64x128 s4 no-mma", dict(STAGES=4), NO_MMA),
    ("64x128 s6 no-mma", dict(STAGES=6), NO_MMA),
    ("64x128 s8 no-mma", {}, NO_MMA),
    ("64x128 s9 no-mma", dict(STAGES=9), NO_MMA),
    ("64x128 cm2", CM2, []),
    ("64x128 cm2 no-mma", CM2, NO_MMA),
    ("64x128 cm2 no-load", CM2, NO_LOAD),
]
KS = [64, 1024, 4096]


def main():
    space = load_space("hgemm_wgmma"); gpu = GPUS["h200"]
    space.knobs["STAGES"] = list(range(2, 10))
    jobs = []
    for label, change, edits in VARIANTS:
        config = space.config({**BASE, **change})
        assert space.check(config, gpu).feasible, label
        source = render(space, config, gpu)
        code = source.code
        for old, new in edits:
            assert old in code, (label, old)
            code = code.replace(old, new)
        jobs.append((label, config, KernelSource(source.entry, code, label, source.target)))
    t0 = time.time()
    with CompilePool() as pool:
        kernels = list(pool.map(src for *_, src in jobs))
    print(f"compiled {len(jobs)} in {time.time() - t0:.1f} s", flush=True)
    backend = CupyBackend()
    from autotune import measure
    rows = {}
    for k in KS:
        p = GemmProblem(1024, 1024, k, "f16")
        cub = backend._cublas_gemm(p, 0)
        rows.setdefault("cuBLAS", {})[k] = measure.time_launches(cub, warmup=10, repeats=200).median_ms
        for (label, config, _), kernel in zip(jobs, kernels):
            if isinstance(kernel, CompileFailure):
                print(label, "compile failure", kernel.message[:400]); rows[label] = None; continue
            task = kernel_task(space, config, kernel, gpu, p, 0, 10, 200)
            if isinstance(task, Failure):
                print(label, task.message); continue
            launch, operands = backend._kernel_launch(task, p, 0)
            if label in ("64x128 s8 wd2", "64x128 s9 wd2", "64x128 s9 wd1", "64x128 cm2"):
                r = backend._run_kernel(task)
                ok = "ok" if not isinstance(r, Failure) else r.message[:200]
                if ok != "ok": print(label, k, ok)
            rows.setdefault(label, {})[k] = measure.time_launches(functools.partial(launch, p, operands.out), warmup=10, repeats=200).median_ms
        rows["cuBLAS again"] = rows.get("cuBLAS again", {})
        rows["cuBLAS again"][k] = measure.time_launches(cub, warmup=10, repeats=200).median_ms
    print(f"{'variant':24s}" + "".join(f"  K={k:<6d}" for k in KS) + "  slope us/1024K")
    for label, times in rows.items():
        if not times: continue
        slope = (times[4096] - times[64]) / (4096 - 64) * 1024 * 1e3
        print(f"{label:24s}" + "".join(f"  {times[k]*1e3:7.2f}" for k in KS) + f"  {slope:6.2f}", flush=True)
    placement(backend, space, gpu, jobs[0][1], kernels[0])


def placement(backend, space, gpu, config, kernel, rounds=12):
    """The 1024 ratio with operands allocated afresh (at shifted addresses) each round, order alternated."""
    import cupy
    from autotune import measure
    p = GemmProblem(1024, 1024, 1024, "f16")
    task = kernel_task(space, config, kernel, gpu, p, 0, 10, 200)
    rng = numpy.random.default_rng(1)
    ratios = []
    for r in range(rounds):
        spacer = cupy.empty(int(rng.integers(1, 64)) * (1 << 20) + int(rng.integers(0, 4096)) * 512, dtype=cupy.uint8)
        seed = r + 1
        launch, operands = backend._kernel_launch(task, p, seed)
        cub = backend._cublas_gemm(p, seed)
        pair = [("cub", cub), ("ours", functools.partial(launch, p, operands.out))]
        if r % 2: pair.reverse()
        got = {name: measure.time_launches(f, warmup=10, repeats=200).median_ms for name, f in pair}
        ratios.append(got["cub"] / got["ours"])
        print(f"placement round {r:2d} a=0x{operands.a.data.ptr:x} cuBLAS {got['cub']*1e3:.2f} us ours {got['ours']*1e3:.2f} us"
              f" ratio {ratios[-1]:.3f} ({'ours first' if r % 2 else 'cuBLAS first'})", flush=True)
        del spacer
    print(f"placement: median ratio {numpy.median(ratios):.3f}, range {min(ratios):.3f}-{max(ratios):.3f}")


if __name__ == "__main__":
    main()
