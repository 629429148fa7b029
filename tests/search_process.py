"""A search of the tiny test family (tests/data/tiny.toml) in a process of its own, with the fake GPU.

Tests start several at once on one database, or kill one, and look at the study afterwards
(forked, see forked_processes.py, or as a script):

    python tests/search_process.py URL TRIALS [--kernel-s S] [--heartbeat S] [--grace S] [--seed N] [--sampler NAME]

``--kernel-s`` makes every kernel take S seconds on the fake GPU, so that a search is caught
with candidates running. Prints ``evaluated N`` at the end.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from autotune.gpu.fake_backend import FakeBackend
from autotune.gpu.tasks import KernelTask

TINY = Path(__file__).with_name("data") / "tiny.toml"


class SlowFakeBackend(FakeBackend):
    """The fake GPU, taking ``$AUTOTUNE_TEST_KERNEL_S`` seconds per kernel."""

    def run(self, task):
        if isinstance(task, KernelTask):
            time.sleep(float(os.environ.get("AUTOTUNE_TEST_KERNEL_S", "0")))
        return super().run(task)


def main(argv: list[str]) -> int:
    print(f"evaluated {search(argv)}")
    return 0


def search(argv: list[str]) -> int:
    """The search that ``argv`` asks for; how many configs it evaluated."""
    from autotune.gpu.worker import GpuWorker
    from autotune.gpu_specs import gpu_spec
    from autotune.problem import GemmProblem
    from autotune.results import ResultStore
    from autotune.search.search import Search, SearchSettings
    from autotune.space.family import SearchSpace

    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("trials", type=int)
    parser.add_argument("--kernel-s", type=float, default=0.0)
    parser.add_argument("--heartbeat", type=int, default=5)
    parser.add_argument("--grace", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sampler", default="tpe")
    args = parser.parse_args(argv)
    os.environ["AUTOTUNE_TEST_KERNEL_S"] = str(args.kernel_s)
    settings = SearchSettings(trials=args.trials, jobs=1, seed=args.seed, heartbeat_s=args.heartbeat,
                              grace_s=args.grace, sampler=args.sampler)
    with GpuWorker(backend=SlowFakeBackend) as worker:
        result = Search(SearchSpace(TINY), gpu_spec("h200"), GemmProblem(64, 64, 64), ResultStore(args.url),
                        worker, settings).run()
    return result.evaluated


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
