"""Time of the best recorded config against cuBLAS, alternated several times: how steady is the ratio?

    python3 bench/ratio_repeat.py --shape 1024 --dtype f16 --rounds 10 [--db URL]

The config is chosen as by bench/energy_repeat.py. Each round times cuBLAS and the config
through the GPU worker like a search's closing measurement (L2 flushed before every
launch), cuBLAS first in odd rounds and the config first in even ones, so that neither
always runs second. Prints each round's medians and ratio, then the ratio of the pooled
medians, the range of the per-round ratios and the pooled ratio of each order.
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
        ratios, runs = [], {True: ([], []), False: ([], [])}  # cuBLAS first? -> (cuBLAS runs, config runs)
        cublas_task = CublasTask(problem, 0, 10, args.repeats)
        for round_ in range(1, args.rounds + 1):
            cublas_first = round_ % 2 == 1
            order = [("cuBLAS", cublas_task), (config.name, task)]
            results = {label: worker.run(t, timeout_s=120.0) for label, t in (order if cublas_first else order[::-1])}
            for label, result in results.items():
                if isinstance(result, Failure):
                    raise SystemExit(f"{label}: {result.failure_class}: {result.message}")
            cublas, kernel = results["cuBLAS"], results[config.name]
            runs[cublas_first][0].append(cublas)
            runs[cublas_first][1].append(kernel)
            ratios.append(cublas.timing.median_ms / kernel.timing.median_ms)
            print(f"  round {round_:2d}: cuBLAS {cublas.timing.median_ms:.5f} ms, config {kernel.timing.median_ms:.5f} ms,"
                  f" ratio {ratios[-1]:.3f}x  ({kernel.sm_clock_mhz} MHz; {'cuBLAS' if cublas_first else 'config'} first)")
        cublas_ms, kernel_ms = (pooled(problem, runs[True][i] + runs[False][i]).timing.median_ms for i in (0, 1))
        print(f"  pooled: cuBLAS {cublas_ms:.5f} ms, config {kernel_ms:.5f} ms, ratio {cublas_ms / kernel_ms:.3f}x; "
              f"per-round ratios {min(ratios):.3f}-{max(ratios):.3f}x (median {statistics.median(ratios):.3f}x)")
        for cublas_first, (cublas_runs, kernel_runs) in runs.items():
            if cublas_runs:
                ratio = pooled(problem, cublas_runs).timing.median_ms / pooled(problem, kernel_runs).timing.median_ms
                print(f"  {'cuBLAS' if cublas_first else 'config'} first: pooled ratio {ratio:.3f}x over {len(cublas_runs)} rounds")


if __name__ == "__main__":
    main()
