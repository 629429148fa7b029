"""Dev probe: cuBLAS and configs timed launch by launch in turn (L2 flushed before each), so no order or
sequence effect can favour either; also in blocks of 100 launches, as the worker's tasks are."""
import functools
import numpy, cupy
from autotune.space import load_space
from autotune.render import render
from autotune.compile import compile_kernel
from autotune.gpus import GPUS
from autotune.problem import GemmProblem
from autotune.study import kernel_task
from autotune.worker import CupyBackend
from autotune.records import Failure
from limit_probe import BASE

CONFIGS = [("64x128 s8 wd1", dict(WAIT_DEPTH=1)), ("64x128 s8 wd2", {}), ("64x128 s9 wd1", dict(STAGES=9, WAIT_DEPTH=1))]
BIG = ("128x256 s4 wd1 g8", dict(WG_M=2, WN=256, STAGES=4, WAIT_DEPTH=1, GROUP_M=8))
SIZES = [((1024, 1024, 1024), CONFIGS), ((2048, 2048, 2048), [BIG]), ((4096, 4096, 4096), [BIG])]


def timed(functions, flush, stream, order):
    """Per-launch times (ms) of functions[i] for i in order, each after an L2 flush, one sync at the end."""
    events = []
    for i in order:
        cupy.cuda.runtime.memsetAsync(flush.data.ptr, 0, flush.nbytes, stream.ptr)
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream); functions[i](); end.record(stream)
        events.append((i, start, end))
    stream.synchronize()
    out = [[] for _ in functions]
    for i, start, end in events:
        out[i].append(cupy.cuda.get_elapsed_time(start, end))
    return out


def main():
    gpu = GPUS["h200"]
    space = load_space("hgemm_wgmma")
    backend = CupyBackend()
    from autotune import measure
    flush = cupy.empty(measure.default_flush_bytes(), dtype=cupy.uint8)
    stream = backend.stream
    for size, configs in SIZES:
        p = GemmProblem(*size, "f16")
        functions, labels = [backend._cublas_gemm(p, 0)], ["cuBLAS"]
        keep = []
        for label, change in configs:
            config = space.config({**BASE, **change})
            task = kernel_task(space, config, compile_kernel(render(space, config, gpu)), gpu, p, 0, 10, 100)
            r = backend._run_kernel(task)
            print(label, "verified" if not isinstance(r, Failure) else r.message)
            launch, operands = backend._kernel_launch(task, p, 0)
            keep.append(launch)
            functions.append(functools.partial(launch, p, operands.out))
            labels.append(label)
        n = len(functions)
        for f in functions:
            for _ in range(20): f()
        per_launch = timed(functions, flush, stream, [i % n for i in range(600 * n)])
        blocks = timed(functions, flush, stream, [i for r in range(6) for i in (range(n) if r % 2 == 0 else reversed(range(n))) for _ in range(100)])
        cub, cub_b = numpy.median(per_launch[0]), numpy.median(blocks[0])
        print(f"== {size}: launch by launch in turn (600 each) | in blocks of 100, order reversed every round (600 each)")
        for i, label in enumerate(labels):
            a, b = numpy.median(per_launch[i]), numpy.median(blocks[i])
            print(f"   {label:20s} {a * 1e3:8.2f} us  ratio {cub / a:.3f}  (q25-q75 {numpy.percentile(per_launch[i], 25)*1e3:.2f}-"
                  f"{numpy.percentile(per_launch[i], 75)*1e3:.2f}) | {b * 1e3:8.2f} us  ratio {cub_b / b:.3f}", flush=True)


if __name__ == "__main__":
    main()
