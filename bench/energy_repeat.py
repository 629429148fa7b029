"""Energy per GEMM of one config and of cuBLAS, measured several times: is it repeatable?

    python3 bench/energy_repeat.py --shape 4096 --dtype f16 --times 5 [--db URL]

The config is the best one recorded in the database for the attached GPU and
shape (any searchable family), else the first seed of the dtype's default family.
Prints each window and the spread (max - min) / median of energy per GEMM, from
mean power x time and from the energy counter.
"""

from __future__ import annotations

import argparse
import statistics

from recorded import add_problem_arguments, best_recorded

from autotune.records import Failure
from autotune.search.evaluate import Measuring, energy_window


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_problem_arguments(parser, shape="4096", dtype="f32")
    parser.add_argument("--times", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    with best_recorded(args) as (worker, problem, config, task):
        measuring = Measuring(problem, energy_seconds=args.seconds)
        for label, kernel in ((config.name, task), ("cuBLAS", None)):
            windows = []
            for _ in range(args.times):
                window = energy_window(worker, measuring, kernel)
                if isinstance(window, Failure):
                    raise SystemExit(f"{label}: {window.failure_class}: {window.message}")
                windows.append(window)
                counter_mj = (window.energy_per_gemm_counter_j or 0.0) * 1e3
                print(f"  {label[:40]:40s} {window.energy_per_gemm_j * 1e3:9.3f} mJ  {window.mean_power_w:6.1f} W  "
                      f"counter {counter_mj:9.3f} mJ  {window.sm_clock_mhz_mean or 0:6.0f} MHz  "
                      f"{window.temperature_c_max} C  throttled={window.throttled}")
            instant = [w.energy_per_gemm_j for w in windows]
            counter = [w.energy_per_gemm_counter_j for w in windows if w.energy_per_gemm_counter_j]
            text = f"  spread {label[:40]}: {spread(instant) * 100:.2f}% (power x time)"
            if len(counter) == len(windows):
                text += f", {spread(counter) * 100:.2f}% (energy counter)"
            print(text)


if __name__ == "__main__":
    main()
