"""Replay: whole searches over a measured table (`bench/brute_force.py`), on a CPU, to judge how fast a
search finds the sub-space's best against random search on the same table.

    python3 bench/replay.py --table DIR/replay_wgmma4096.jsonl --out DIR [--seeds 20] [--evaluations 150]
                            [--compiles warm,cheap,dear] [--samplers tpe,random,genetic] [--jobs 16] [--no-gpu-time]
                            [--without-seeds]

Each search is the project's own (:class:`autotune.search.search.Search`: its opening, its proposer, the
compile pipeline ahead of the GPU, racing, a study in a fresh SQLite database), over the sub-space the
table's problem line names (its family, a shipped name or a space file, restricted to its knobs), with
two stand-ins: its GPU worker runs
:class:`autotune.gpu.replay_backend.ReplayBackend` (each config's time from the table; with GPU time,
the task takes as long as its launches would have), and its compile pool is
:class:`autotune.search.replay_pool.ReplayPool` (each build from the table after a compile cost). The
compile settings (COMPILES): ``warm`` every compile from a warm cache (none takes any time), ``cheap``
CHEAP_S and ``dear`` DEAR_S per compile, JOBS at a time. The samplers (``--samplers``, default tpe and
random): ``tpe`` (the search's), ``random`` (``--sampler random``: the same opening, then uniformly random
feasible configs) and ``genetic`` (``--sampler genetic``: the same opening, then configs bred from the
measured ones).

Per search, from its study's GPU evaluations in the order they took their slots: how many it took to
reach a config within 3% of the table's best (WITHIN), and whether it found the best itself. Per
setting: the median and p90 of the former (a search that never gets there counts as never) and the
share of searches that found the best. Writes DIR/replay_runs.csv (one row per search),
DIR/replay_orders.jsonl (each search's configs in the order of its evaluations),
DIR/replay_summary.json and DIR/replay_summary.txt (the summary with the issue's targets: median <= 20
and p90 <= 50 evaluations to 3%, the best found in >= 60% of searches).

Searches run against the clock (compiles and GPU tasks wait in real time, the search's own work
takes what it takes), so a replay is not reproducible to the trial; at the defaults (20 seeds, three
compile settings, two samplers, 150 evaluations) it takes roughly half an hour on a few CPU cores.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import functools
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

COMPILES = {"warm": 0.0, "cheap": 0.5, "dear": 2.0}  # seconds per compile
CHEAP_S, DEAR_S = COMPILES["cheap"], COMPILES["dear"]
JOBS = 16  # compile processes of the H200 host
WITHIN = 0.03
TARGETS = {"median": 20, "p90": 50, "found_best": 0.6}


@dataclasses.dataclass(frozen=True)
class Run:
    """One replayed search: its setting and what its order of evaluations implies."""

    compiles: str
    sampler: str
    seed: int
    evaluations: int  # GPU evaluations in its study
    to_within: int | None  # evaluations until one within WITHIN of the table's best (None: never)
    found_best: bool
    best_found: str | None
    wall_s: float
    order: tuple[str, ...] = ()  # the configs of its GPU evaluations, first first


def evaluations_to(order: Sequence[str], times: dict[str, float], target_ms: float) -> int | None:
    """How many of the configs in ``order`` (GPU evaluations, first first) it takes to meet one whose
    table time is at most ``target_ms``; None where none is. A config without a time (a failure) counts
    as an evaluation that found nothing."""
    for count, name in enumerate(order, 1):
        if name in times and times[name] <= target_ms:
            return count
    return None


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile: the smallest value at least ``fraction`` of ``values`` do not exceed."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def summarize(runs: Sequence[Run]) -> list[dict]:
    """Per compile setting and sampler: searches, the median and p90 of evaluations to WITHIN (None:
    never), the share of searches that reached it and that found the best."""
    rows = []
    for key in dict.fromkeys((run.compiles, run.sampler) for run in runs):
        group = [run for run in runs if (run.compiles, run.sampler) == key]
        reached = [math.inf if run.to_within is None else run.to_within for run in group]
        median, p90 = statistics.median_low(reached), percentile(reached, 0.9)
        rows.append({"compiles": key[0], "sampler": key[1], "searches": len(group),
                     "median_to_within": None if median == math.inf else median,
                     "p90_to_within": None if p90 == math.inf else p90,
                     "reached": sum(run.to_within is not None for run in group) / len(group),
                     "found_best": sum(run.found_best for run in group) / len(group),
                     "mean_evaluations": statistics.mean(run.evaluations for run in group)})
    return rows


def meets_targets(row: dict) -> bool:
    """Whether a setting meets the issue's targets."""
    return (row["median_to_within"] is not None and row["median_to_within"] <= TARGETS["median"]
            and row["p90_to_within"] is not None and row["p90_to_within"] <= TARGETS["p90"]
            and row["found_best"] >= TARGETS["found_best"])


def summary_text(rows: Sequence[dict], table_path: Path, best: tuple[str, float], evaluations: int,
                 with_seeds: bool = True) -> str:
    opening = "the family's seeds in the opening" if with_seeds else "no seeds in the opening"
    lines = [f"replay of {table_path}: best {best[0]} at {best[1]:.4f} ms; {evaluations} evaluations a search, "
             f"{opening}; evaluations to within {WITHIN:.0%} of it",
             f"{'compiles':8s} {'sampler':7s} {'searches':>8s} {'median':>7s} {'p90':>7s} {'reached':>8s} "
             f"{'found best':>10s}  targets (median <= {TARGETS['median']}, p90 <= {TARGETS['p90']}, "
             f"best >= {TARGETS['found_best']:.0%})"]
    for row in rows:
        shown = {key: "never" if row[key] is None else str(row[key]) for key in ("median_to_within", "p90_to_within")}
        lines.append(f"{row['compiles']:8s} {row['sampler']:7s} {row['searches']:8d} {shown['median_to_within']:>7s} "
                     f"{shown['p90_to_within']:>7s} {row['reached']:8.0%} {row['found_best']:10.0%}  "
                     f"{'met' if meets_targets(row) else 'missed'}")
    return "\n".join(lines) + "\n"


def evaluated_order(url: str, study: str) -> list[str]:
    """The configs of a study's GPU evaluations, in the order they took their slots."""
    import optuna

    from autotune.search.study import evaluated_on_gpu

    trials = optuna.load_study(study_name=study, storage=url).get_trials(deepcopy=False)
    return [trial.user_attrs["config"] for trial in sorted(trials, key=lambda t: t.number) if evaluated_on_gpu(trial)]


def replay_search(table, space, gpu, worker, compiles: str, sampler: str, seed: int, evaluations: int,
                  jobs: int, folder: Path) -> Run:
    """One whole search over the table; what its order of evaluations implies."""
    from autotune.results.opening import open_store
    from autotune.search.replay_pool import ReplayPool
    from autotune.search.search import Search
    from autotune.search.settings import SearchSettings

    url = f"sqlite:///{folder / f'{compiles}_{sampler}_{seed}.db'}"
    settings = SearchSettings(trials=evaluations, seed=seed, jobs=jobs, sampler=sampler)
    started = time.monotonic()
    with open_store(url) as store:
        search = Search(space, gpu, table.problem, store, worker, settings,
                        pool=ReplayPool(table, jobs, COMPILES[compiles]))
        search.run()
    order = evaluated_order(url, search.name)
    best_name, best_ms = table.best
    times = table.measured
    found = [name for name in order if name in times]
    return Run(compiles, sampler, seed, len(order), evaluations_to(order, times, best_ms * (1 + WITHIN)),
               best_name in order, min(found, key=times.get) if found else None, round(time.monotonic() - started, 2),
               tuple(order))


def table_space(table, family):
    """The sub-space the table measured: ``family`` restricted to the knobs its problem line names, and
    each knob to the values its rows hold, so that a space file widened since the table was measured
    (hgemm_wgmma's WN 192, a773c09) proposes no config the table cannot answer."""
    from autotune.space.subspace import restrict

    space = restrict(family, table.header.get("knobs", {}))
    held = {knob: {row.knobs[knob] for row in table.rows.values() if knob in row.knobs} for knob in space.knobs}
    return restrict(space, {knob: values for knob, values in held.items() if values})


def replay(table_path: Path, out: Path, seeds: Sequence[int], evaluations: int, compiles: Sequence[str],
           samplers: Sequence[str], jobs: int = JOBS, gpu_time: bool = True, with_seeds: bool = True) -> list[Run]:
    """Every search of the replay; writes its runs and summary under ``out``. Without seeds, the family's
    seeds (known-good configs, often the sub-space's best among them) are left out of the opening, so a
    search starts knowing nothing of the table."""
    from autotune.gpu.replay_backend import ReplayBackend, ReplayTable
    from autotune.gpu.worker import GpuWorker
    from autotune.gpu_specs import gpu_spec
    from autotune.space.family import resolve_family

    table = ReplayTable.load(table_path)
    space = table_space(table, resolve_family(table.family))
    if not with_seeds:
        space.seeds = []
    gpu = gpu_spec(table.gpu)
    runs = []
    backend = functools.partial(ReplayBackend, table=str(table_path), gpu_time=gpu_time)
    with GpuWorker(backend=backend) as worker, tempfile.TemporaryDirectory(prefix="autotune-replay-") as folder:
        for setting in compiles:
            for sampler in samplers:
                for seed in seeds:
                    run = replay_search(table, space, gpu, worker, setting, sampler, seed, evaluations, jobs,
                                        Path(folder))
                    runs.append(run)
                    print(f"{setting} {sampler} seed {seed}: {run.evaluations} evaluations, within "
                          f"{WITHIN:.0%} after {run.to_within}, best found: {run.found_best} ({run.wall_s} s)",
                          flush=True)
    write(out, runs, table_path, table.best, evaluations, with_seeds)
    return runs


def write(out: Path, runs: Sequence[Run], table_path: Path, best: tuple[str, float], evaluations: int,
          with_seeds: bool = True) -> None:
    out.mkdir(parents=True, exist_ok=True)
    fields = [field.name for field in dataclasses.fields(Run) if field.name != "order"]
    with open(out / "replay_runs.csv", "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(dataclasses.asdict(run) for run in runs)
    with open(out / "replay_orders.jsonl", "w") as file:
        for run in runs:
            file.write(json.dumps({"compiles": run.compiles, "sampler": run.sampler, "seed": run.seed,
                                   "order": list(run.order)}) + "\n")
    rows = summarize(runs)
    (out / "replay_summary.json").write_text(json.dumps(
        {"table": str(table_path), "best": {"config": best[0], "ms": best[1]}, "evaluations": evaluations,
         "with_seeds": with_seeds,
         "within": WITHIN, "targets": TARGETS, "settings": [{**row, "meets_targets": meets_targets(row)} for row in rows]},
        indent=2) + "\n")
    text = summary_text(rows, table_path, best, evaluations, with_seeds)
    (out / "replay_summary.txt").write_text(text)
    print(text, end="")


def _names(text: str, valid: Sequence[str], what: str) -> list[str]:
    names = [name for name in text.split(",") if name]
    bad = [name for name in names if name not in valid]
    if bad or not names:
        raise SystemExit(f"invalid {what} {bad[0] if bad else text!r}: expected a comma-separated list of "
                         f"{', '.join(valid)}")
    return names


def main() -> int:
    from autotune.search.settings import SAMPLERS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", type=Path, required=True, help="a table of bench/brute_force.py")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", type=int, default=20, help="searches per setting, seeds 0..N-1 (default 20)")
    parser.add_argument("--evaluations", type=int, default=150, help="GPU evaluations a search (default 150)")
    parser.add_argument("--compiles", default="warm,cheap,dear", help=f"of {', '.join(COMPILES)}")
    parser.add_argument("--samplers", default="tpe,random", help=f"of {', '.join(SAMPLERS)} (default tpe,random)")
    parser.add_argument("--jobs", type=int, default=JOBS, help=f"compiles at a time (default {JOBS})")
    parser.add_argument("--no-gpu-time", action="store_true", help="answer GPU tasks at once")
    parser.add_argument("--without-seeds", action="store_true",
                        help="leave the family's seeds out of the opening (a search that knows nothing of the table)")
    args = parser.parse_args()
    from autotune.errors import AutotuneError

    compiles = _names(args.compiles, list(COMPILES), "--compiles")
    samplers = _names(args.samplers, SAMPLERS, "--samplers")
    for what, value in (("--seeds", args.seeds), ("--evaluations", args.evaluations), ("--jobs", args.jobs)):
        if value < 1:
            raise SystemExit(f"invalid {what} {value}: expected a whole number >= 1")
    try:
        replay(args.table, args.out, range(args.seeds), args.evaluations, compiles, samplers, args.jobs,
               not args.no_gpu_time, not args.without_seeds)
    except AutotuneError as error:
        raise SystemExit(str(error)) from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
