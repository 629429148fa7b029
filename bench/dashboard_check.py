"""What optuna-dashboard shows of a study autotune wrote: its knobs as parameters, per trial and over the study.

    pip install optuna-dashboard      # not a dependency of autotune
    python3 bench/dashboard_check.py --out DIR [--trials 12]

Runs ``autotune search --backend fake`` (the whole pipeline but the GPU: rules, NVRTC, worker process, Optuna,
SQLite) for hgemm_wgmma at 256^3 f16 into DIR/dashboard.db, then asks optuna-dashboard's own web application
(its WSGI app, in this process, as its server would serve it) for the study: the search space it shows, each
trial's parameters and the parameter importances it computes. Writes DIR/dashboard_check.json; exits 1 where a
knob of the family is missing from what the dashboard shows.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from wsgiref.util import setup_testing_defaults


def dashboard_get(app, path: str) -> dict:
    """The JSON optuna-dashboard's app answers a GET of ``path`` with."""
    environ: dict = {}
    setup_testing_defaults(environ)
    environ["PATH_INFO"] = path
    status: list[str] = []
    body = b"".join(app(environ, lambda line, headers, exc_info=None: status.append(line)))
    if not status or not status[0].startswith("200"):
        raise RuntimeError(f"optuna-dashboard answered {status} to {path}: {body[:200]!r}")
    return json.loads(body)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--trials", type=int, default=12)
    args = parser.parse_args()
    try:
        import optuna_dashboard
    except ImportError:
        print("dashboard_check: optuna-dashboard is not installed (pip install optuna-dashboard)", file=sys.stderr)
        return 2
    import optuna

    from autotune.space.family import load_space

    args.out.mkdir(parents=True, exist_ok=True)
    database = args.out / "dashboard.db"
    database.unlink(missing_ok=True)
    url = f"sqlite:///{database.resolve()}"
    search = subprocess.run([sys.executable, "-m", "autotune", "search", "--gpu", "h200", "--shape", "256",
                             "--dtype", "f16", "--family", "hgemm_wgmma", "--backend", "fake", "--trials",
                             str(args.trials), "--db", url], capture_output=True, text=True)
    if search.returncode != 0:
        print(search.stdout + search.stderr, file=sys.stderr)
        return 1
    storage = optuna.storages.RDBStorage(url)
    app = optuna_dashboard.wsgi(storage)
    (summary,) = dashboard_get(app, "/api/studies")["study_summaries"]
    study = dashboard_get(app, f"/api/studies/{summary['study_id']}")
    importances = dashboard_get(app, f"/api/studies/{summary['study_id']}/param_importances")["param_importances"][0]
    knobs = sorted(knob for knob, values in load_space("hgemm_wgmma").knobs.items() if len(values) > 1)
    shown = sorted(space["name"] for space in study["union_search_space"])
    per_trial = [sorted(param["name"] for param in trial["params"]) for trial in study["trials"]]
    report = {"optuna_dashboard": optuna_dashboard.__version__, "optuna": optuna.__version__,
              "study": summary["study_name"], "trials": len(study["trials"]), "knobs": knobs,
              "search_space_shown": shown, "trials_showing_every_knob": sum(set(knobs) <= set(p) for p in per_trial),
              "first_trial_params": {p["name"]: p["param_external_value"] for p in study["trials"][0]["params"]},
              "importances": {entry["name"]: round(entry["importance"], 4) for entry in importances}}
    (args.out / "dashboard_check.json").write_text(json.dumps(report, indent=1))
    missing = sorted(set(knobs) - set(shown))
    print(f"optuna-dashboard {report['optuna_dashboard']} on study {report['study']}: {len(shown)} parameters in its "
          f"search space, {report['trials_showing_every_knob']} of {report['trials']} trials show every knob, "
          f"importances of {len(report['importances'])}; missing: {missing or 'none'}")
    storage.engine.dispose()
    for path in (database, database.with_name(database.name + "-wal"), database.with_name(database.name + "-shm")):
        path.unlink(missing_ok=True)
    return 1 if missing or report["trials_showing_every_knob"] != report["trials"] else 0


if __name__ == "__main__":
    sys.exit(main())
