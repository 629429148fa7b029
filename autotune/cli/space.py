"""``autotune space``: enumerate a search space, compile a sample offline, report resources."""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import os

from autotune.cli.arguments import add_problem_arguments, add_wide_argument, offline_gpu
from autotune.cli.progress import TerminalProgress
from autotune.cli.text import paragraph, table, terminal_width
from autotune.errors import InputError
from autotune.gpu_specs import GpuSpec
from autotune.problem import GemmProblem, make_problem
from autotune.progress import ProgressCallback, no_progress
from autotune.search.start import choose_family
from autotune.space.family import Config, SearchSpace
from autotune.space.survey import survey

MAX_COMPILE_ALL = 100_000  # the most feasible configs --compile all lists and compiles
PICKING, COMPILING = "picking configs to compile", "compiling kernels"  # what the progress line says after checking


def register(sub) -> None:
    space = sub.add_parser(
        "space", help="enumerate and compile a search space offline (no GPU needed)",
        epilog="example: autotune space --gpu t4 --shape 4096 --compile 16",
    )
    add_problem_arguments(space)
    space.add_argument("--compile", default="24", metavar="N|all",
                       help="how many feasible configs to compile and report (default 24; seeds first)")
    space.add_argument("--json", action="store_true", help="machine-readable output")
    add_wide_argument(space)
    space.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    gpu = offline_gpu(args.gpu)
    problem = make_problem(args.shape, args.dtype, layout=args.layout)
    space = choose_family(args.family, args.dtype, gpu, problem.layout)
    limit = _compile_limit(args.compile)

    from autotune.kernel.compile import CompilePool  # processes start at the first compile
    from autotune.kernel.render import render

    seeds = _seed_builds(space, gpu, problem, limit)
    with TerminalProgress() as progress, CompilePool(compile_jobs()) as pool:
        for config in seeds:  # compiled while the configs are checked
            pool.prefetch(render(space, config, gpu))
        # counted, and a sample listed (twice as many as wanted: two configs may have one build, and seeds are
        # left out); not all listed: 10**10 configs
        listing = {"spread": 2 * limit} if limit else {"keep": ()}
        checked = survey(space, gpu, problem, progress=progress, **listing)
        feasible = checked.feasible_count
        rejected = [(r.example, r.count) for r in checked.rejections]
        listed = _every_feasible(space, gpu, problem, feasible, _as(PICKING, progress)) if limit is None \
            else [verdict.config for verdict in checked.feasible]
        chosen = _sample(space, gpu, problem, listed, limit, seeds)
        compiled = _compile_report(space, gpu, problem, chosen, pool, progress)

    if args.json:
        print(json.dumps({
            "family": space.family, "gpu": gpu.key, "arch": space.target(gpu), "problem": problem.shape,
            "dtype": problem.dtype, "configs": space.size, "feasible": feasible,
            "rejected": [{"count": n, "example": example} for example, n in rejected],
            "compiled": compiled,
        }, indent=2))
        return 0

    width = terminal_width(args.wide)
    print(paragraph(f"{space.family} on {gpu.key} ({space.target(gpu)}), problem {problem.shape} {problem.dtype}: "
                    f"{space.size} configs, {feasible} pass the static rules, {space.size - feasible} rejected",
                    width))
    print("\nrejected (count, example reason):")
    print(table(["count", "example reason"], [[n, example] for example, n in rejected], width,
                wrap=["example reason"]))
    ok = sum(1 for row in compiled if row["status"] == "ok")
    print()
    print(paragraph(f"compiled {len(compiled)} of {feasible} feasible configs for {space.target(gpu)} "
                    f"({ok} fit; --compile N or all for more):", width))
    rows = [[row["config"], row["threads"], row["registers"], _kb(row["smem_bytes"]), row["spill_bytes"],
             row["status"]] for row in compiled]
    print(table(["config", "threads", "regs", "smem KB", "spills B", "status"], rows, width,
                wrap=["config", "status"]))
    return 0


def _compile_limit(text: str) -> int | None:
    if text == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        raise InputError("--compile", text, "a number >= 0 or all") from None
    if value < 0:
        raise InputError("--compile", text, "a number >= 0 or all")
    return value


def _as(what: str, progress: ProgressCallback) -> ProgressCallback:
    """``progress``, with what is done called ``what``."""
    return lambda _, done, total: progress(what, done, total)


def _seed_builds(space: SearchSpace, gpu: GpuSpec, problem: GemmProblem, limit: int | None) -> list[Config]:
    """The builds a search on ``problem`` runs of the seeds (:func:`_builds`), at most ``limit``."""
    return list(_builds(space, gpu, problem, space.seeds))[:limit]


def _every_feasible(space: SearchSpace, gpu: GpuSpec, problem: GemmProblem, feasible: int,
                    progress: ProgressCallback = no_progress) -> list[Config]:
    """Every one of the ``feasible`` configs of ``space`` (``--compile all``), listed by a second walk; at most
    MAX_COMPILE_ALL. ``progress`` hears of that walk."""
    if feasible > MAX_COMPILE_ALL:
        raise InputError("--compile", "all", f"a number: {space.family} has {feasible} feasible configs on "
                         f"{problem.shape}, more than {MAX_COMPILE_ALL} to compile")
    return [verdict.config for verdict in survey(space, gpu, problem, progress=progress).feasible]


def _sample(space: SearchSpace, gpu: GpuSpec, problem: GemmProblem, listed: list[Config], limit: int | None,
            seeds: list[Config]) -> list[Config]:
    """At most ``limit`` configs to compile (every one for None): ``seeds`` (:func:`_seed_builds`), then
    configs spread evenly over ``listed`` (an evenly spaced sample of the feasible ones, or all of them);
    each as a search on ``problem`` builds it (:meth:`SearchSpace.for_problem`: its ``[specialize]`` knobs
    set by the problem), where the rules admit that build, once."""
    rest = [config for config in _builds(space, gpu, problem, listed) if config not in seeds]
    wanted = len(rest) if limit is None else min(limit - len(seeds), len(rest))
    return seeds + [rest[i * len(rest) // wanted] for i in range(wanted)] if wanted else seeds


def _builds(space: SearchSpace, gpu: GpuSpec, problem: GemmProblem, configs) -> dict[Config, None]:
    """The builds a search on ``problem`` runs of ``configs``, in order, each once, where the rules admit them."""
    builds = dict.fromkeys(space.for_problem(config, gpu, problem) for config in configs)
    return {build: None for build in builds if space.check(build, gpu, problem).feasible}


def _compile_report(space: SearchSpace, gpu: GpuSpec, problem: GemmProblem, configs: list, pool,
                    progress: ProgressCallback = no_progress) -> list[dict]:
    """Compile ``configs`` in ``pool`` (those prefetched are under way; the disk cache answers those it holds)
    and report each one's resources; ``progress`` hears of the compiles as they finish."""
    from autotune.kernel.render import render

    if not configs:
        return []
    futures = {pool.submit(render(space, config, gpu)): index for index, config in enumerate(configs)}
    results: list = [None] * len(configs)
    progress(COMPILING, 0, len(configs))
    for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
        results[futures[future]] = future.result()
        progress(COMPILING, done, len(configs))
    return [_resource_row(space, gpu, problem, config, result) for config, result in zip(configs, results)]


def compile_jobs() -> int:
    """Compile processes: one per core, at most 16 (more than the cores only wait on each other)."""
    return max(1, min(16, os.cpu_count() or 1))


def _resource_row(space: SearchSpace, gpu: GpuSpec, problem: GemmProblem, config: Config, result) -> dict:
    """What the compile of ``config`` reported: its resources and whether they fit ``gpu``."""
    from autotune.kernel.compile import CompileFailure
    from autotune.kernel.resources import resource_violation

    launch = space.launch(config, gpu, problem)
    row = {"config": config.name, "params": config.as_dict(), "threads": launch.block[0],
           "grid": list(launch.grid), "registers": None, "smem_bytes": None, "spill_bytes": None}
    if isinstance(result, CompileFailure):
        row["status"] = f"compile_error: {result.message}"
        return row
    res = dataclasses.replace(result.resources, smem_dynamic=launch.dynamic_smem)
    row.update(registers=res.registers, smem_bytes=res.smem_total, spill_bytes=res.spill_stores + res.spill_loads)
    violation = resource_violation(res, launch.block[0], gpu, launch.opt_in)
    row["status"] = f"resource: {violation}" if violation else "ok"
    return row


def _kb(value: int | None) -> float | None:
    return None if value is None else round(value / 1024, 1)
