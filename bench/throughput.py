"""Search throughput: GPU evaluations per wall-clock second of a whole `autotune search` command.

Each case runs `python -m autotune search` from a cold start: fresh compile caches
(a new, empty AUTOTUNE_CACHE, and a new CUDA_CACHE_PATH: NVRTC from CUDA 12.9 on keeps
its own cache of compiled programs there, in the driver's compute cache, where a
driver is installed) and a fresh results database, all in a new temporary
directory (local disk, as ~/.cache and ~/.local/share would be; the database is copied
to the output folder afterwards), verification and timing as in any search. The figure
is the GPU evaluations in the study over the wall time of the command, start to exit
(Python start-up, GPU worker start, compiles, the closing measurement against cuBLAS
and the exit included).

    python3 bench/throughput.py --out DIR [CASE...]     CASE: DTYPE:SIZE:TRIALS:TARGET, e.g. f32:4096:100:8

Writes DIR/throughput.json, DIR/throughput.csv, DIR/throughput_DTYPE_SIZE.log (the
command's output), DIR/throughput_DTYPE_SIZE.db (its results database) and
DIR/throughput_DTYPE_SIZE.trace.json (its timeline, `search --trace`: open it in
ui.perfetto.dev); the log ends with a profile of that timeline, second by second: how many
compile processes were busy and how busy the GPU was. Exits 1 when a case misses its
target rate or fails.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

DEFAULT_CASES = ("f32:4096:100:8", "f32:1024:100:10", "f16:4096:100:4")
SEARCH_TIMEOUT_S = 130  # the search stops itself here (--timeout): a case this slow has missed by far
CASE_TIMEOUT_S = 150  # and is killed here; three cases stay inside 8 minutes whatever happens


@dataclasses.dataclass
class Outcome:
    case: str
    dtype: str
    size: int
    trials: int
    target_per_s: float
    exit_code: int
    wall_s: float
    ready_s: float | None  # from the start to "searching ..." (the GPU worker's hello: imports, CUDA, database)
    exit_s: float | None  # from "results: ..." (the last line) to the process's exit
    evaluated: int
    per_s: float
    best_ratio: float | None  # cuBLAS time over the best config's, measured side by side in the run
    best_config: str | None
    raced: int | None
    screened: int | None
    failures: str
    time_spent: str  # the search's own line: where the wall time went

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and self.evaluated >= self.trials and self.per_s >= self.target_per_s


def run_case(case: str, out: Path, gpu: str, backend: str, jobs: int | None) -> Outcome:
    dtype, size, trials, target = case.split(":")
    name = f"throughput_{dtype}_{size}"
    scratch = Path(tempfile.mkdtemp(prefix="autotune-throughput-"))
    cache, database = scratch / "cache", scratch / f"{name}.db"  # nothing compiled, nothing recorded yet
    trace = out / f"{name}.trace.json"
    command = [sys.executable, "-m", "autotune", "search", "--gpu", gpu, "--shape", size, "--dtype", dtype,
               "--trials", trials, "--db", f"sqlite:///{database.resolve()}", "--backend", backend,
               "--timeout", str(SEARCH_TIMEOUT_S), "--trace", str(trace.resolve())]
    if jobs:
        command += ["--jobs", str(jobs)]
    env = {**os.environ, "AUTOTUNE_CACHE": str(cache), "CUDA_CACHE_PATH": str(scratch / "nv"), "PYTHONUNBUFFERED": "1"}
    started, started_unix = time.monotonic(), time.time()
    exit_code, stdout, stderr, seen = _run_timed(command, env)
    wall_s = time.monotonic() - started
    profile = timeline_profile(trace, started_unix, wall_s) if trace.exists() else "no timeline written\n"
    (out / f"{name}.log").write_text(f"$ {' '.join(command)}\n{stderr}{stdout}\n{profile}")
    evaluated = _evaluated(database)
    if database.exists():
        shutil.copy(database, out / database.name)
    shutil.rmtree(scratch, ignore_errors=True)
    ratio = re.search(r"(\d+\.\d+)x cuBLAS \(", stdout)
    best = re.search(r"^best: (\S+)", stdout, re.M)
    counts = re.search(r"screened out by the static rules: (\d+) .*timing stopped early: (\d+)", stdout)
    failures = re.search(r"^failures: (.*)$", stdout, re.M)
    spent = re.search(r"^time: (.*)$", stdout, re.M)
    ready_s = seen.get("searching") and round(seen["searching"] - started, 2)
    exit_s = round(seen["exit"] - seen["results"], 2) if {"results", "exit"} <= seen.keys() else None
    return Outcome(case, dtype, int(size), int(trials), float(target), exit_code, round(wall_s, 2), ready_s, exit_s,
                   evaluated,
                   round(evaluated / wall_s, 2), float(ratio.group(1)) if ratio else None,
                   best.group(1) if best else None, int(counts.group(2)) if counts else None,
                   int(counts.group(1)) if counts else None, failures.group(1) if failures else "",
                   spent.group(1) if spent else "")


def timeline_profile(trace: Path, started_unix: float, wall_s: float) -> str:
    """Second by second from the command's start: compile processes busy (mean over the second) and
    the GPU's busy share, from the search's timeline; then the totals."""
    data = json.loads(trace.read_text())
    rows = {e["tid"]: e["args"]["name"] for e in data["traceEvents"] if e["name"] == "thread_name"}
    shift = data["origin_unix_s"] - started_unix  # the trace's zero, seconds after the command started
    spans = [(rows[e["tid"]], shift + e["ts"] / 1e6, shift + (e["ts"] + e["dur"]) / 1e6)
             for e in data["traceEvents"] if e["ph"] == "X"]
    seconds = int(wall_s) + 1

    def busy(prefix: str) -> list[float]:
        per_second = [0.0] * seconds
        for track, start, end in spans:
            if track.startswith(prefix):
                for s in range(max(0, int(start)), min(seconds, int(end) + 1)):
                    per_second[s] += max(0.0, min(end, s + 1) - max(start, s))
        return per_second

    compiles, gpu = busy("compile "), busy("GPU ")
    compile_rows = sum(track.startswith("compile ") for track in set(rows.values()))
    lines = ["timeline, second by second from the start: compile processes busy / GPU busy %"]
    lines += [f"  {s:3d}-{s + 1:<3d} {c:5.1f} {100 * g:4.0f}%" for s, (c, g) in enumerate(zip(compiles, gpu))]
    starts = [start for track, start, _ in spans if track.startswith("compile ")]
    first_gpu = min((start for track, start, _ in spans if track.startswith("GPU ")), default=None)
    lines.append(f"  compile processes used: {compile_rows}; compiling {sum(compiles):.1f} process-s over "
                 f"{wall_s:.1f} s; first compile at {min(starts, default=0):.2f} s, first GPU job at "
                 f"{first_gpu if first_gpu is None else round(first_gpu, 2)} s; GPU busy {sum(gpu):.1f} s")
    return "\n".join(lines) + "\n"


def _run_timed(command: list[str], env: dict) -> tuple[int, str, str, dict[str, float]]:
    """Run the search; its exit code, stdout, stderr, and when its first "searching" and "results"
    lines appeared and when it exited (time.monotonic())."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    seen: dict[str, float] = {}
    texts = {"out": [], "err": []}

    def read(stream, name: str) -> None:
        for line in stream:
            for marker in ("searching", "results"):
                if line.startswith(marker) and marker not in seen:
                    seen[marker] = time.monotonic()
            texts[name].append(line)

    readers = [threading.Thread(target=read, args=(process.stdout, "out")),
               threading.Thread(target=read, args=(process.stderr, "err"))]
    for reader in readers:
        reader.start()
    try:
        exit_code = process.wait(timeout=CASE_TIMEOUT_S)
        seen["exit"] = time.monotonic()
    except subprocess.TimeoutExpired:
        process.kill()
        exit_code = 124
        texts["err"].append("\ntimed out\n")
    for reader in readers:
        reader.join()
    return exit_code, "".join(texts["out"]), "".join(texts["err"]), seen


def _evaluated(database: Path) -> int:
    """GPU evaluations in the case's study, counted in the database."""
    if not database.exists():
        return 0
    import optuna

    from autotune.search.study import evaluated_on_gpu

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{database.resolve()}"
    names = optuna.get_all_study_names(url)
    if not names:
        return 0
    return sum(evaluated_on_gpu(t) for name in names
               for t in optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="*", default=list(DEFAULT_CASES), help="DTYPE:SIZE:TRIALS:TARGET ...")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench/out")))
    parser.add_argument("--gpu", default="h200")
    parser.add_argument("--backend", default="cupy", help="cupy, or fake for a dry run without a GPU")
    parser.add_argument("--jobs", type=int, help="compile processes (default: autotune's)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    outcomes = []
    for case in args.cases:
        outcome = run_case(case, args.out, args.gpu, args.backend, args.jobs)
        outcomes.append(outcome)
        verdict = "ok" if outcome.passed else "MISSED"
        ratio = f"{outcome.best_ratio:.3f}x cuBLAS" if outcome.best_ratio else "no verified config"
        print(f"{case}: {outcome.evaluated} GPU evaluations in {outcome.wall_s:.1f} s = {outcome.per_s:.2f}/s "
              f"(target {outcome.target_per_s:g}/s, {verdict}); best {ratio}; raced {outcome.raced}, "
              f"exit {outcome.exit_code}\n  start to GPU ready {outcome.ready_s} s; last line to exit "
              f"{outcome.exit_s} s; search {outcome.time_spent}", flush=True)
    rows = [{**dataclasses.asdict(o), "passed": o.passed} for o in outcomes]
    (args.out / "throughput.json").write_text(json.dumps(rows, indent=2) + "\n")
    with open(args.out / "throughput.csv", "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return 0 if all(o.passed for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
