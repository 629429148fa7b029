"""Dev probe: the working tree's hgemm_wgmma against HEAD's (.probe/old), same run, alternated; checks at odd shapes."""
import functools, sys
from pathlib import Path
import numpy
from autotune.space import load_space, SearchSpace
from autotune.render import render, KernelSource
from autotune.compile import CompilePool, CompileFailure
from autotune.gpus import GPUS
from autotune.problem import GemmProblem
from autotune.study import kernel_task
from autotune.worker import CupyBackend
from autotune.records import Failure
from limit_probe import BASE

CONFIGS = [
    ("64x128 s8 wd2", {}),
    ("64x128 s8 wd1", dict(WAIT_DEPTH=1)),
    ("128x64 s8 wd1", dict(WG_M=2, WN=64, WAIT_DEPTH=1)),
    ("128x256 s4 wd1", dict(WG_M=2, WN=256, STAGES=4, WAIT_DEPTH=1)),
    ("128x128 m2 s6 wd1", dict(M_TILES=2, WN=128, STAGES=6, WAIT_DEPTH=1)),
    ("64x128 cm2 s8 wd1", dict(CLUSTER_M=2, WAIT_DEPTH=1)),
]
CHECK_SHAPES = [(129, 136, 520), (200, 264, 72), (64, 64, 64), (513, 511, 1025), (300, 200, 104), (1000, 1000, 1000),
                (1, 1, 1), (17, 33, 65), (4097, 4095, 31)]
SIZES = [(1024, 1024, 1024), (1024, 1024, 64), (2048, 2048, 2048), (4096, 4096, 4096)]
ROUNDS = 5


def main():
    gpu = GPUS["h200"]
    spaces = {"new": load_space("hgemm_wgmma"), "old": SearchSpace(Path(".probe/old/hgemm_wgmma.toml"))}
    jobs = []
    for label, change in CONFIGS:
        for which, space in spaces.items():
            config = space.config({**BASE, **change})
            if not space.check(config, gpu).feasible:
                print(label, which, "rejected", space.check(config, gpu).reason); continue
            source = render(space, config, gpu)
            jobs.append((f"{label} {which}", space, config, source))
    with CompilePool() as pool:
        kernels = list(pool.map(src for *_, src in jobs))
    for (label, *_), k in zip(jobs, kernels):
        print(label, k.resources if not isinstance(k, CompileFailure) else k.message[:500])
    backend = CupyBackend()
    from autotune import measure
    for (label, space, config, _), kernel in zip(jobs, kernels):
        if label.endswith("old") or isinstance(kernel, CompileFailure):
            continue
        bad = []
        for shape in CHECK_SHAPES:
            for alpha, beta in ((1.0, 0.0), (-1.5, 0.75)):
                q = GemmProblem(*shape, "f16", alpha=alpha, beta=beta)
                r = backend._run_kernel(kernel_task(space, config, kernel, gpu, q, 1, 1, 3))
                if isinstance(r, Failure): bad.append(f"{shape} {alpha},{beta}: {r.message[:160]}")
        print(f"{label}: checks {'all ok' if not bad else bad}", flush=True)
    for size in SIZES:
        p = GemmProblem(*size, "f16")
        samples = {}
        for round_ in range(ROUNDS):
            cub = backend._cublas_gemm(p, 0)
            samples.setdefault("cuBLAS", []).append(measure.time_launches(cub, warmup=10, repeats=100).median_ms)
            for (label, space, config, _), kernel in zip(jobs, kernels):
                if isinstance(kernel, CompileFailure): continue
                task = kernel_task(space, config, kernel, gpu, p, 0, 10, 100)
                if isinstance(task, Failure): continue
                launch, operands = backend._kernel_launch(task, p, 0)
                samples.setdefault(label, []).append(
                    measure.time_launches(functools.partial(launch, p, operands.out), warmup=10, repeats=100).median_ms)
        cub = numpy.median(samples["cuBLAS"])
        print(f"== {size}: cuBLAS {cub * 1e3:.2f} us (rounds {min(samples['cuBLAS'])*1e3:.2f}-{max(samples['cuBLAS'])*1e3:.2f})")
        for label, values in samples.items():
            if label == "cuBLAS": continue
            med = numpy.median(values)
            print(f"   {label:28s} {med * 1e3:8.2f} us  ratio {cub / med:.3f}  (rounds {min(values)*1e3:.2f}-{max(values)*1e3:.2f})", flush=True)


if __name__ == "__main__":
    main()
