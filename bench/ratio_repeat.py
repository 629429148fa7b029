"""Time of the best recorded config against cuBLAS, alternated several times: how steady is the ratio?

    python3 bench/ratio_repeat.py --shape 1024 --dtype f16 --rounds 10 [--db URL]

The config is chosen as by bench/energy_repeat.py. Each round times cuBLAS, then the
config, through the GPU worker like a search's closing measurement (L2 flushed before
every launch). Prints each round's medians and ratio, then the ratio of the pooled
medians and the range of the per-round ratios.
"""

from __future__ import annotations

import argparse
import statistics

from recorded import best_task

from autotune.db import ResultStore, default_url
from autotune.gpus import GPUS
from autotune.problem import make_problem
from autotune.records import Failure
from autotune.worker import CublasTask, GpuWorker


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="1024")
    parser.add_argument("--dtype", default="f16")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=100, help="timed launches per measurement")
    parser.add_argument("--db", default=None)
    args = parser.parse_args()
    problem = make_problem(args.shape, args.dtype)
    store = ResultStore(args.db or default_url())
    with GpuWorker() as worker:
        gpu = GPUS[worker.environment().gpu_key]
        config, task = best_task(store, gpu, problem, warmup=10, repeats=args.repeats)
        print(f"{problem.shape} {problem.dtype} on {gpu.key}: {config.name}")
        ratios, kernel_ms, cublas_ms = [], [], []
        for round_ in range(1, args.rounds + 1):
            cublas = worker.run(CublasTask(problem, 0, 10, args.repeats), timeout_s=120.0)
            kernel = worker.run(task, timeout_s=120.0)
            for label, result in (("cuBLAS", cublas), (config.name, kernel)):
                if isinstance(result, Failure):
                    raise SystemExit(f"{label}: {result.failure_class}: {result.message}")
            kernel_ms += kernel.timing.samples_ms
            cublas_ms += cublas.timing.samples_ms
            ratios.append(cublas.timing.median_ms / kernel.timing.median_ms)
            print(f"  round {round_:2d}: cuBLAS {cublas.timing.median_ms:.5f} ms, config {kernel.timing.median_ms:.5f} ms,"
                  f" ratio {ratios[-1]:.3f}x  ({kernel.sm_clock_mhz} MHz)")
        pooled = statistics.median(cublas_ms) / statistics.median(kernel_ms)
        print(f"  pooled: cuBLAS {statistics.median(cublas_ms):.5f} ms, config {statistics.median(kernel_ms):.5f} ms, "
              f"ratio {pooled:.3f}x; per-round ratios {min(ratios):.3f}-{max(ratios):.3f}x "
              f"(median {statistics.median(ratios):.3f}x)")


if __name__ == "__main__":
    main()
