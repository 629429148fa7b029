"""Several `autotune search` processes on one study in one PostgreSQL database: the budget stays exact.

    python3 bench/shared_study.py --out DIR [--devices 0,0] [--shape 4096] [--dtype f32] [--trials 60]

Starts a throwaway PostgreSQL server (``tests/postgres_server.py``: ``initdb`` and ``pg_ctl`` on PATH,
psycopg installed), then one `autotune search` per entry of ``--devices`` (``--device`` of each), all at
once, with the same arguments and ``--db`` on that server, each from a fresh compile cache. Then it reads
the database: every process exited 0, the study holds exactly ``--trials`` GPU evaluations, no config was
evaluated twice (seeds included), and the results tables hold one row per GPU evaluation plus each
process's closing measurement. With two processes on one GPU their kernels share it, so their timings
are noisier than a lone search's; the point is the shared budget, not speed.

Writes DIR/shared_study.json and DIR/shared_study_N.log (each process's output). Exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from postgres_server import PostgresServer, missing  # noqa: E402

SEARCH_TIMEOUT_S = 240


def run(args: argparse.Namespace) -> dict:
    server = PostgresServer().start()
    try:
        url = server.create_database()
        return _searches(args, url, server)
    finally:
        server.stop()


def _searches(args: argparse.Namespace, url: str, server: PostgresServer) -> dict:
    devices = [int(d) for d in args.devices.split(",")]
    processes, logs = [], []
    started = time.monotonic()
    for index, device in enumerate(devices):
        cache = tempfile.mkdtemp(prefix=f"autotune-shared-{index}-")
        command = [sys.executable, "-m", "autotune", "search", "--gpu", args.gpu, "--shape", args.shape,
                   "--dtype", args.dtype, "--trials", str(args.trials), "--db", url, "--device", str(device),
                   "--timeout", str(SEARCH_TIMEOUT_S), "--backend", args.backend]
        log = open(args.out / f"shared_study_{index}.log", "w")
        log.write("$ " + " ".join(command).replace(server.password, "***") + "\n")
        log.flush()
        env = {**os.environ, "AUTOTUNE_CACHE": cache, "PYTHONUNBUFFERED": "1"}
        processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env))
        logs.append(log)
    exits = [p.wait(timeout=SEARCH_TIMEOUT_S + 60) for p in processes]
    wall_s = time.monotonic() - started
    for log in logs:
        log.close()
    return {"devices": devices, "trials": args.trials, "shape": args.shape, "dtype": args.dtype,
            "exit_codes": exits, "wall_s": round(wall_s, 2), **_counts(url, len(devices))}


def _counts(url: str, processes: int) -> dict:
    import optuna
    import sqlalchemy

    from autotune.search.study import evaluated_on_gpu

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    names = optuna.get_all_study_names(url)
    trials = [t for name in names for t in optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False)]
    on_gpu = [t for t in trials if evaluated_on_gpu(t)]
    per_config = collections.Counter(t.user_attrs.get("config") for t in on_gpu)
    by_process = collections.Counter(f"{t.user_attrs.get('process')} device {t.user_attrs.get('device')}"
                                     for t in on_gpu)
    with sqlalchemy.create_engine(url).connect() as connection:
        rows, kernels = connection.execute(sqlalchemy.text(
            "SELECT count(*), count(DISTINCT kernel_id) FROM measurements WHERE kernel_id IS NOT NULL")).one()
        failures, failed_kernels = connection.execute(sqlalchemy.text(
            "SELECT count(*), count(DISTINCT kernel_id) FROM failures")).one()
    return {"studies": names, "gpu_evaluations": len(on_gpu), "configs_evaluated_twice": sum(
        1 for n in per_config.values() if n > 1), "evaluations_by_process": dict(by_process),
            "kernel_rows": rows, "distinct_kernels_measured": kernels, "failure_rows": failures,
            "distinct_kernels_failed": failed_kernels, "closing_rows_expected": processes}


def checks(outcome: dict) -> list[str]:
    """What went wrong, one line each; empty when the budget held exactly."""
    problems = []
    if any(outcome["exit_codes"]):
        problems.append(f"exit codes {outcome['exit_codes']}")
    if len(outcome["studies"]) != 1:
        problems.append(f"{len(outcome['studies'])} studies, expected one shared study")
    if outcome["gpu_evaluations"] != outcome["trials"]:
        problems.append(f"{outcome['gpu_evaluations']} GPU evaluations for --trials {outcome['trials']}")
    if outcome["configs_evaluated_twice"]:
        problems.append(f"{outcome['configs_evaluated_twice']} configs evaluated twice")
    measured_rows = outcome["kernel_rows"] - outcome["closing_rows_expected"]
    if outcome["failure_rows"] != outcome["distinct_kernels_failed"]:
        problems.append("a failed config recorded twice")
    if measured_rows + outcome["failure_rows"] < outcome["gpu_evaluations"]:
        problems.append(f"{measured_rows} measurement rows and {outcome['failure_rows']} failure rows "
                        f"for {outcome['gpu_evaluations']} GPU evaluations")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench/out")))
    parser.add_argument("--devices", default="0,0", help="one search process per entry, on that device")
    parser.add_argument("--gpu", default="h200")
    parser.add_argument("--shape", default="4096")
    parser.add_argument("--dtype", default="f32")
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--backend", default="cupy", help="cupy, or fake for a dry run without a GPU")
    args = parser.parse_args()
    reason = missing()
    if reason:
        print(f"shared study: cannot start PostgreSQL: {reason}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    outcome = run(args)
    outcome["problems"] = checks(outcome)
    (args.out / "shared_study.json").write_text(json.dumps(outcome, indent=2) + "\n")
    print(json.dumps(outcome, indent=2))
    return 1 if outcome["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
