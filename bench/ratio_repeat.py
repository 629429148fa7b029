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

from recorded import add_problem_arguments, best_recorded

from autotune.records import Failure
from autotune.study import pooled
from autotune.worker import CublasTask


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_problem_arguments(parser, shape="1024", dtype="f16")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=100, help="timed launches per measurement")
    args = parser.parse_args()
    with best_recorded(args, warmup=10, repeats=args.repeats) as (worker, problem, config, task):
        ratios, kernel_runs, cublas_runs = [], [], []
        for round_ in range(1, args.rounds + 1):
            cublas = worker.run(CublasTask(problem, 0, 10, args.repeats), timeout_s=120.0)
            kernel = worker.run(task, timeout_s=120.0)
            for label, result in (("cuBLAS", cublas), (config.name, kernel)):
                if isinstance(result, Failure):
                    raise SystemExit(f"{label}: {result.failure_class}: {result.message}")
            kernel_runs.append(kernel)
            cublas_runs.append(cublas)
            ratios.append(cublas.timing.median_ms / kernel.timing.median_ms)
            print(f"  round {round_:2d}: cuBLAS {cublas.timing.median_ms:.5f} ms, config {kernel.timing.median_ms:.5f} ms,"
                  f" ratio {ratios[-1]:.3f}x  ({kernel.sm_clock_mhz} MHz)")
        kernel_ms = pooled(problem, kernel_runs).timing.median_ms
        cublas_ms = pooled(problem, cublas_runs).timing.median_ms
        print(f"  pooled: cuBLAS {cublas_ms:.5f} ms, config {kernel_ms:.5f} ms, ratio {cublas_ms / kernel_ms:.3f}x; "
              f"per-round ratios {min(ratios):.3f}-{max(ratios):.3f}x (median {statistics.median(ratios):.3f}x)")


if __name__ == "__main__":
    main()
