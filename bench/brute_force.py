"""Brute force: every feasible config of a sub-space of a shipped family verified and timed on the GPU at
one shape, and cuBLAS, into a table that `bench/replay.py` replays whole searches over.

    python3 bench/brute_force.py --out DIR [--sub-space NAME] [--timeout S] [--jobs N] [--backend cupy|fake]
    python3 bench/brute_force.py --count [--sub-space NAME]     the sub-space's feasible configs (no GPU)
    python3 bench/brute_force.py --out DIR --backend fake --limit 4   a dry run without a GPU

Each config goes the way a search's candidates go: rendered, compiled by the compile pool (NVRTC, the
disk cache), checked by the build checks (ptxas's resources, its launch), then verified against cuBLAS
(NaN-poisoned output, beta 0 and 0.5) and timed on the GPU worker (L2 flushed before each launch,
WARMUP launches, then REPEATS timed, no racing), each failure kept with its class. The table,
DIR/replay_NAME.jsonl, is the format :mod:`autotune.gpu.replay_backend` reads: a problem line, a cuBLAS
line per run, a line per config (its median time, or its failure and the stage it stopped at, ptxas's
resources, NVRTC's seconds). A run appends to it and skips the configs it holds: a run stopped by
``--timeout`` (or killed) is resumed by running it again with the same ``--out``.

Sub-spaces (SUB_SPACES):

* ``wgmma4096``: hgemm_wgmma at 4096^3 f16 on the H200, the producer warpgroup loading with TMA, BK 64,
  no split-K, clusters along M only, GROUP_M 8, opt-in shared memory: 2740 feasible configs, 6 of the
  family's seeds among them (the shipped 4096 best, persistent with setmaxnreg, is one).

How long (estimated from bench/NOTES.md, not yet measured): hgemm_wgmma compiles take 0.4-1.6 CPU s
each and 16 processes at once run at 85-90% of one's speed, so 2740 compiles are ~3-4 minutes of a
16-core host; a config's GPU task (two verification launches, 3 warm-up and 10 timed ones of 0.19-2 ms,
the cubin's load) ~20-50 ms, 1-2.5 minutes in all, while the next configs compile. About 4 minutes
cold, a few seconds more per config that faults (its worker is replaced); a second run over the same
AUTOTUNE_CACHE takes the GPU time alone.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

from autotune.gpu.worker import GpuWorker
from autotune.gpu_specs import gpu_spec
from autotune.kernel.build import compile_result, finish_build
from autotune.kernel.compile import CompilePool
from autotune.kernel.render import render
from autotune.problem import GemmProblem
from autotune.records import Failure, Measurement
from autotune.search.evaluate import Measuring, run_candidate, run_cublas
from autotune.space.family import Config, SearchSpace, load_space
from autotune.space.subspace import restrict
from autotune.space.survey import feasible_configs

WARMUP, REPEATS = 3, 10
IN_FLIGHT_PER_JOB = 3  # compiles submitted ahead per compile process


@dataclasses.dataclass(frozen=True)
class SubSpace:
    """A shipped family restricted to some knob values, at one shape, on one GPU."""

    family: str
    gpu: str
    problem: GemmProblem
    knobs: dict[str, tuple[int, ...]]

    def space(self) -> SearchSpace:
        return restrict(load_space(self.family), self.knobs)


SUB_SPACES = {
    "wgmma4096": SubSpace("hgemm_wgmma", "h200", GemmProblem(4096, 4096, 4096, "f16"), {
        "TMA": (1,), "PRODUCER": (1,), "SPLIT_K": (1,), "SMEM_OPT_IN": (1,), "GROUP_M": (8,),
        "CLUSTER_N": (1,), "BK": (64,)}),
}


def feasible(space: SearchSpace, sub: SubSpace) -> list[Config]:
    """The sub-space's feasible configs, each in the build a search on its problem tries, in enumeration order."""
    gpu = gpu_spec(sub.gpu)
    configs = feasible_configs(space, gpu, sub.problem)
    return list(dict.fromkeys(space.for_problem(config, gpu, sub.problem) for config in configs))


def problem_row(name: str, sub: SubSpace, environment: dict) -> dict:
    """The table's first line: what was measured, where and how."""
    p = sub.problem
    return {"kind": "problem", "sub_space": name, "family": sub.family, "gpu": sub.gpu, "m": p.m, "n": p.n,
            "k": p.k, "dtype": p.dtype, "alpha": p.alpha, "beta": p.beta,
            "knobs": {knob: list(values) for knob, values in sub.knobs.items()}, "warmup": WARMUP,
            "repeats": REPEATS, "environment": environment}


def config_row(config: Config, outcome: Measurement | Failure, stage: str, resources=None,
               compile_s: float = 0.0, gpu_s: float = 0.0) -> dict:
    """A config's line: its median time, or its failure and the stage (build or gpu) it stopped at."""
    row = {"kind": "config", "config": config.name, "knobs": config.as_dict(),
           "resources": dataclasses.asdict(resources) if resources is not None else None,
           "compile_s": round(compile_s, 3), "gpu_s": round(gpu_s, 4)}
    if isinstance(outcome, Failure):
        return {**row, "ms": None, "failure": outcome.failure_class, "message": outcome.message, "stage": stage}
    return {**row, "ms": outcome.timing.median_ms, "min_ms": outcome.timing.min_ms,
            "max_error": outcome.max_error, "resources": dataclasses.asdict(outcome.resources or resources)}


def done_configs(path: Path) -> set[str]:
    """The configs a table file holds already (a line cut short by a killed run is ignored)."""
    if not path.exists():
        return set()
    names = set()
    for line in path.read_text().splitlines():
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        if data.get("kind") == "config":
            names.add(data["config"])
    return names


def run(name: str, out: Path, timeout_s: float | None, jobs: int | None, backend: str,
        limit: int | None = None) -> int:
    sub = SUB_SPACES[name]
    space, gpu = sub.space(), gpu_spec(sub.gpu)
    configs = feasible(space, sub)
    path = out / f"replay_{name}.jsonl"
    done = done_configs(path)
    left = [config for config in configs if config.name not in done]
    print(f"{name}: {len(configs)} feasible configs of {sub.family} at {sub.problem.shape} {sub.problem.dtype}; "
          f"{len(configs) - len(left)} in {path} already, {len(left)} to measure", flush=True)
    left = left[:limit]
    measuring = Measuring(sub.problem, seed=0, warmup=WARMUP, repeats=REPEATS)
    started = time.monotonic()
    counts: dict[str, int] = {}
    with GpuWorker(backend=backend) as worker, CompilePool(jobs) as pool, open(path, "a") as table:
        def write(row: dict) -> None:
            table.write(json.dumps(row) + "\n")
            table.flush()

        if not path.stat().st_size:
            write(problem_row(name, sub, dataclasses.asdict(worker.environment())))
        cublas = run_cublas(worker, measuring)
        write({"kind": "cublas", "ms": cublas.timing.median_ms, "min_ms": cublas.timing.min_ms})
        print(f"cuBLAS {cublas.timing.median_ms:.4f} ms", flush=True)
        pending: dict[concurrent.futures.Future, Config] = {}
        queue = iter(left)
        stopped = False
        while True:
            while not stopped and len(pending) < pool.jobs * IN_FLIGHT_PER_JOB:
                config = next(queue, None)
                if config is None:
                    break
                pending[pool.submit(render(space, config, gpu))] = config
            if not pending:
                break
            finished, _ = concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in finished:
                config = pending.pop(future)
                compiled = compile_result(future)
                built = finish_build(space, config, compiled, gpu, sub.problem)
                if isinstance(built, Failure):
                    row = config_row(config, built, "build", getattr(compiled, "resources", None), compiled.seconds)
                else:
                    began = time.monotonic()
                    outcome = run_candidate(worker, measuring.task(built), measuring, cublas.timing.median_ms)
                    row = config_row(config, outcome, "gpu", built.resources, compiled.seconds,
                                     time.monotonic() - began)
                write(row)
                kind = row.get("failure") or "measured"
                counts[kind] = counts.get(kind, 0) + 1
            if timeout_s is not None and time.monotonic() - started > timeout_s and not stopped:
                stopped = True  # finish what is compiling; run again to go on
                print(f"--timeout {timeout_s:g} s reached: finishing the {len(pending)} configs compiling", flush=True)
    total = sum(counts.values())
    print(f"{total} configs in {time.monotonic() - started:.1f} s: "
          + ", ".join(f"{kind} {count}" for kind, count in sorted(counts.items())), flush=True)
    left_now = len(configs) - len(done_configs(path))
    print(f"{path}: {len(configs) - left_now} of {len(configs)} configs" + (f"; {left_now} left: run again" if left_now else ""))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sub-space", default="wgmma4096", help=f"one of {', '.join(SUB_SPACES)}")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench/out")))
    parser.add_argument("--timeout", type=float, help="stop submitting compiles after S seconds")
    parser.add_argument("--jobs", type=int, help="compile processes (default: autotune's)")
    parser.add_argument("--backend", default="cupy", help="cupy, or fake for a dry run without a GPU")
    parser.add_argument("--limit", type=int, help="measure at most N configs this run (a dry run)")
    parser.add_argument("--count", action="store_true", help="print the number of feasible configs and exit")
    args = parser.parse_args()
    if args.sub_space not in SUB_SPACES:
        print(f"invalid --sub-space {args.sub_space!r}: expected one of {', '.join(SUB_SPACES)}", file=sys.stderr)
        return 2
    if args.count:
        sub = SUB_SPACES[args.sub_space]
        space = sub.space()
        print(f"{args.sub_space}: {len(feasible(space, sub))} feasible configs of {space.size} "
              f"({sub.family} at {sub.problem.shape} {sub.problem.dtype} on {sub.gpu}), "
              f"{len(space.seeds)} of the family's seeds")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    return run(args.sub_space, args.out, args.timeout, args.jobs, args.backend, args.limit)


if __name__ == "__main__":
    sys.exit(main())
