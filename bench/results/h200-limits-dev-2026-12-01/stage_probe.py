"""Dev probe: finer stages (BK 32, up to 18 stages) and the L2 promotion of the tensor maps, against the 1024 winner."""
import functools
import numpy
import autotune.tensor_map as tensor_map
from autotune.space import load_space
from autotune.render import render, KernelSource
from autotune.compile import CompilePool, CompileFailure
from autotune.gpus import GPUS
from autotune.problem import GemmProblem
from autotune.study import kernel_task
from autotune.worker import CupyBackend
from autotune.records import Failure
from limit_probe import BASE

PROMOTION = {"none": 0, "64B": 1, "128B": 2, "256B": 3}  # CU_TENSOR_MAP_L2_PROMOTION_*
PROLOGUE = [  # the producer's first thread sets up the barriers and starts loading without a block-wide barrier
    ("    if (tid == 0) {\n        for (int s = 0; s < STAGES; ++s) {", "    if (tid == CONSUMERS * 128) {\n        for (int s = 0; s < STAGES; ++s) {"),
    ("    __syncthreads();\n    if (warpgroup == CONSUMERS) {\n",
     "    if (warpgroup == CONSUMERS) {\n        if (warp_in_group == 0) asm volatile(\"bar.arrive 2, %0;\\n\" ::\"n\"(CONSUMERS * 128 + 32) : \"memory\");\n"),
    ("        } else if (!aligned) {\n", "        } else if (!aligned) {\n            asm volatile(\"bar.sync 3, 128;\\n\" ::: \"memory\");\n"),
    ("    // A warp is done with a stage: one arrival on its empty barrier.\n",
     "    asm volatile(\"bar.sync 2, %0;\\n\" ::\"n\"(CONSUMERS * 128 + 32) : \"memory\");\n    // A warp is done with a stage: one arrival on its empty barrier.\n"),
]
VARIANTS = [  # label, knobs, L2 promotion[, source edits]
    ("64x128x64 s8 wd2", {}, "256B"),
    ("64x128x64 s9 wd1", dict(STAGES=9, WAIT_DEPTH=1), "256B"),
    ("64x128x64 s8 wd2 L2 none", {}, "none"),
    ("64x128x64 s8 wd2 L2 128B", {}, "128B"),
    ("64x128x32 s16 wd1", dict(BK=32, STAGES=16, WAIT_DEPTH=1), "256B"),
    ("64x128x32 s18 wd1", dict(BK=32, STAGES=18, WAIT_DEPTH=1), "256B"),
    ("64x128x32 s18 wd2", dict(BK=32, STAGES=18, WAIT_DEPTH=2), "256B"),
    ("64x128x32 s12 wd2", dict(BK=32, STAGES=12, WAIT_DEPTH=2), "256B"),
    ("64x128x64 s8 wd2 prologue", {}, "256B", PROLOGUE),
    ("64x128x64 s9 wd1 prologue", dict(STAGES=9, WAIT_DEPTH=1), "256B", PROLOGUE),
]
CHECK_SHAPES = [(129, 136, 520), (200, 264, 72), (513, 511, 1025), (300, 200, 104), (17, 33, 65), (4097, 4095, 31)]
SIZES = [(1024, 1024, 1024), (1024, 1024, 64), (1024, 1024, 4096)]
ROUNDS = 6


def main():
    gpu = GPUS["h200"]
    space = load_space("hgemm_wgmma")
    space.knobs["STAGES"] = list(range(2, 19))
    jobs = []
    for label, change, promotion, *edits in VARIANTS:
        config = space.config({**BASE, **change})
        verdict = space.check(config, gpu)
        if not verdict.feasible:
            print(label, "rejected", verdict.reason); continue
        source = render(space, config, gpu)
        code = source.code
        for old, new in (edits[0] if edits else []):
            assert code.count(old) == 1, (label, old)
            code = code.replace(old, new)
        jobs.append((label, config, promotion, KernelSource(source.entry, code, label, source.target)))
    with CompilePool() as pool:
        kernels = list(pool.map(src for *_, src in jobs))
    for (label, *_), k in zip(jobs, kernels):
        print(label, k.resources if not isinstance(k, CompileFailure) else k.message[:500])
    backend = CupyBackend()
    from autotune import measure
    for (label, config, promotion, _), kernel in zip(jobs, kernels):
        if isinstance(kernel, CompileFailure) or promotion != "256B":
            continue
        bad = []
        for shape in CHECK_SHAPES:
            for alpha, beta in ((1.0, 0.0), (-1.5, 0.75)):
                q = GemmProblem(*shape, "f16", alpha=alpha, beta=beta)
                r = backend._run_kernel(kernel_task(space, config, kernel, gpu, q, 1, 1, 3))
                if isinstance(r, Failure): bad.append(f"{shape} {alpha},{beta}: {r.message[:160]}")
        print(f"{label}: checks {'all ok' if not bad else bad}", flush=True)
    medians = {}
    for size in SIZES:
        p = GemmProblem(*size, "f16")
        samples = {}
        for round_ in range(ROUNDS):
            cub = backend._cublas_gemm(p, 0)
            samples.setdefault("cuBLAS", []).append(measure.time_launches(cub, warmup=10, repeats=100).median_ms)
            for (label, config, promotion, _), kernel in zip(jobs, kernels):
                if isinstance(kernel, CompileFailure): continue
                tensor_map._L2_PROMOTION_256B = PROMOTION[promotion]
                task = kernel_task(space, config, kernel, gpu, p, 0, 10, 100)
                launch, operands = backend._kernel_launch(task, p, 0)
                samples.setdefault(label, []).append(
                    measure.time_launches(functools.partial(launch, p, operands.out), warmup=10, repeats=100).median_ms)
                tensor_map._L2_PROMOTION_256B = PROMOTION["256B"]
        cub = numpy.median(samples["cuBLAS"])
        print(f"== {size}: cuBLAS {cub * 1e3:.2f} us (rounds {min(samples['cuBLAS'])*1e3:.2f}-{max(samples['cuBLAS'])*1e3:.2f})")
        for label, values in samples.items():
            med = numpy.median(values)
            medians.setdefault(label, {})[size[2]] = med
            if label == "cuBLAS": continue
            print(f"   {label:28s} {med * 1e3:8.2f} us  ratio {cub / med:.3f}  (rounds {min(values)*1e3:.2f}-{max(values)*1e3:.2f})", flush=True)
    print("slope us per 1024 of K (K 64 -> 4096):")
    for label, m in medians.items():
        print(f"   {label:28s} {(m[4096] - m[64]) / 4032 * 1024 * 1e3:6.2f}")


if __name__ == "__main__":
    main()
