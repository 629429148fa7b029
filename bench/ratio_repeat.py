"""Time of the best recorded config against cuBLAS, alternated several times: how steady is the ratio?

    python3 bench/ratio_repeat.py --shape 1024 --dtype f16 --rounds 10 [--db URL]
    python3 bench/ratio_repeat.py --shape 4096 --dtype f32 --config sgemm_bm128_bn256_bk8_...

The config is chosen as by bench/energy_repeat.py, or named by --config (a config name as a
search prints it, of a shipped family; knobs the name lacks take their defaults, so names
recorded before a knob existed still work). Each round times cuBLAS and the config
through the GPU worker like a search's closing measurement (L2 flushed before every
launch), cuBLAS first in odd rounds and the config first in even ones, so that neither
always runs second. Prints each round's medians and ratio, then the ratio of the pooled
medians, the range of the per-round ratios and the pooled ratio of each order.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import statistics
from collections.abc import Iterator

from recorded import add_problem_arguments, best_recorded

from autotune.errors import InputError, SearchError
from autotune.gpu.worker import GpuWorker
from autotune.gpu_specs import GPUS
from autotune.kernel.build import build_kernel
from autotune.problem import make_problem
from autotune.records import Failure
from autotune.search.evaluate import Measuring, pooled, run_candidate, run_cublas
from autotune.space.family import Config, SearchSpace, families_for_dtype, load_space


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_problem_arguments(parser, shape="1024", dtype="f16")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=100, help="timed launches per measurement")
    parser.add_argument("--config", default=None, help="time this config (its name) instead of the best recorded one")
    args = parser.parse_args()
    chosen = named_config(args, warmup=10, repeats=args.repeats) if args.config else \
        best_recorded(args, warmup=10, repeats=args.repeats)
    with chosen as (worker, problem, config, task):
        measuring = Measuring(problem, 0, 10, args.repeats)
        rounds = []  # (cuBLAS first?, cuBLAS measurement, config measurement)
        for round_ in range(1, args.rounds + 1):
            cublas_first = round_ % 2 == 1
            latest_cublas_ms = rounds[-1][1].timing.median_ms if rounds else None
            cublas, kernel = _measure_pair(worker, measuring, task, cublas_first, config.name, latest_cublas_ms)
            rounds.append((cublas_first, cublas, kernel))
            print(f"  round {round_:2d}: cuBLAS {cublas.timing.median_ms:.5f} ms, config {kernel.timing.median_ms:.5f} ms,"
                  f" ratio {cublas.timing.median_ms / kernel.timing.median_ms:.3f}x  ({kernel.sm_clock_mhz} MHz;"
                  f" {'cuBLAS' if cublas_first else 'config'} first)")
        ratios = [c.timing.median_ms / k.timing.median_ms for _, c, k in rounds]
        cublas_ms = pooled(problem, [c for _, c, _ in rounds]).timing.median_ms
        kernel_ms = pooled(problem, [k for _, _, k in rounds]).timing.median_ms
        print(f"  pooled: cuBLAS {cublas_ms:.5f} ms, config {kernel_ms:.5f} ms, ratio {cublas_ms / kernel_ms:.3f}x; "
              f"per-round ratios {min(ratios):.3f}-{max(ratios):.3f}x (median {statistics.median(ratios):.3f}x)")
        for first, label in ((True, "cuBLAS"), (False, "config")):
            same_order = [r for r in rounds if r[0] == first]
            if same_order:
                print(f"  {label} first: pooled ratio {_ratio(problem, same_order):.3f}x over {len(same_order)} rounds")


@contextlib.contextmanager
def named_config(args, warmup: int, repeats: int) -> Iterator[tuple]:
    """``(worker, problem, config, task)`` for the config named by ``args.config``, as
    :func:`recorded.best_recorded` gives them for the best recorded one."""
    problem = make_problem(args.shape, args.dtype)
    try:
        space, config = parse_config_name(args.config, families_for_dtype(problem.dtype))
    except InputError as error:
        raise SystemExit(str(error)) from None
    with GpuWorker() as worker:
        gpu = GPUS[worker.environment().gpu_key]
        built = build_kernel(space, config, gpu, problem)
        if isinstance(built, Failure):
            raise SystemExit(f"{config.name}: {built.failure_class}: {built.message}")
        print(f"{problem.shape} {problem.dtype} on {gpu.key}: {config.name}")
        yield worker, problem, config, Measuring(problem, 0, warmup, repeats).task(built)


def parse_config_name(name: str, families: list[str]) -> tuple[SearchSpace, Config]:
    """The space and config of a config name (``family`` then ``knob`` + value per knob, in the space's
    knob order); knobs with a default may be missing from the end of the name or between others."""
    family = next((f for f in sorted(families, key=len, reverse=True) if name.startswith(f + "_")), None)
    if family is None:
        raise InputError("--config", name, "a config name of one of the families " + ", ".join(families))
    space = load_space(family)
    rest, values = name[len(family):], {}
    for knob in space.knobs:
        found = re.match(rf"_{knob.lower()}(\d+)", rest)
        if found:
            values[knob] = int(found.group(1))
            rest = rest[found.end():]
    if rest:
        raise InputError("--config", name, f"{family}_ then knob and value for each of {', '.join(space.knobs)}")
    return space, space.config(values)


def _measure_pair(worker, measuring: Measuring, task, cublas_first: bool, label: str, latest_cublas_ms: float | None):
    """(cuBLAS, config) measurements, run in the order asked, each as a search runs it (the config's
    timeout from the latest cuBLAS time); exits on a failure."""
    try:
        cublas = run_cublas(worker, measuring) if cublas_first else None
        kernel = run_candidate(worker, task, measuring, cublas.timing.median_ms if cublas else latest_cublas_ms)
        if isinstance(kernel, Failure):
            raise SystemExit(f"{label}: {kernel.failure_class}: {kernel.message}")
        return cublas or run_cublas(worker, measuring), kernel
    except SearchError as error:
        raise SystemExit(str(error)) from None


def _ratio(problem, rounds) -> float:
    """cuBLAS's pooled median over the config's, over ``rounds``."""
    return (pooled(problem, [c for _, c, _ in rounds]).timing.median_ms
            / pooled(problem, [k for _, _, k in rounds]).timing.median_ms)

if __name__ == "__main__":
    main()
