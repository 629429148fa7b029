"""Turn the results databases of bench/h200.sh runs into a Markdown report and a CSV.

    python3 bench/summarize.py OUTPUT_DIR TITLE RUN_DIR [RUN_DIR ...]

Each RUN_DIR holds a run's results.db and environment.txt. Per search study: GPU
evaluations, failures by class, and the final side-by-side measurement of the
best config and cuBLAS (the last rows the study wrote). Every verified
measurement of the run goes to OUTPUT_DIR/measurements.csv. Rows older than the
run (imported tuned results, dated by environment.txt) are left out.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from sqlalchemy import create_engine, text


def main(output_dir: str, title: str, *run_dirs: str) -> None:
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    report, rows = [], []
    report.append(f"# {title}\n")
    report.append("Written by `bench/summarize.py` from the databases of `bench/h200.sh` runs.\n")
    table = ["| run | problem | GPU evaluations | best config | best ms | TFLOP/s | cuBLAS ms | cuBLAS TFLOP/s | ratio |",
             "|---|---|---|---|---|---|---|---|---|"]
    failure_rows = {}
    for run in map(Path, run_dirs):
        engine = create_engine(f"sqlite:///{run / 'results.db'}")
        with engine.connect() as db:
            env = db.execute(text("select gpu_name, arch, driver, cuda_runtime, nvrtc, cupy from environments")).first()
            machine = (run / "environment.txt").read_text().strip() + "\n" if (run / "environment.txt").exists() else ""
            since = _run_start(machine)
            report.append(f"Run `{run.name}`:\n\n```\n{machine}"
                          f"autotune environment: {env.gpu_name} {env.arch}, driver {env.driver}, CUDA runtime "
                          f"{env.cuda_runtime}, NVRTC {env.nvrtc}, CuPy {env.cupy}\n```\n")
            studies = [r[0] for r in db.execute(text(
                "select distinct study from measurements where study is not null and study != 'ladder' "
                "and created_at >= :since order by study"), {"since": since})]
            for study in studies:
                table.append(_study_row(db, study, run.name, failure_rows))
            rows += db.execute(text(
                "select m.study, p.m, p.n, p.k, p.dtype, m.implementation, k.name, m.median_ms, m.q25_ms, m.q75_ms, "
                "m.tflops, m.max_error, m.registers, m.smem_static + m.smem_dynamic, m.sm_clock_mhz, "
                "m.throttle_reasons, m.created_at from measurements m join problems p on p.id = m.problem_id "
                "left join kernels k on k.id = m.kernel_id where m.created_at >= :since order by m.id"),
                {"since": since}).all()
    report += table
    report.append("\nBest and cuBLAS are each search's closing side-by-side measurement (median of the timed")
    report.append("launches, L2 flushed before each, launch latency hidden behind the flush).\n")
    report.append("Failures by class (rejected, resource and compile_error never reached the GPU):\n")
    classes = sorted({c for f in failure_rows.values() for c in f})
    report.append("| run | problem | " + " | ".join(classes) + " |")
    report.append("|---|---|" + "---|" * len(classes))
    for shape, failures in failure_rows.items():
        report.append(f"| {shape} | " + " | ".join(str(failures.get(c, 0)) for c in classes) + " |")
    (out / "README.md").write_text("\n".join(report) + "\n")
    with open(out / "measurements.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["study", "m", "n", "k", "dtype", "implementation", "config", "median_ms", "q25_ms",
                         "q75_ms", "tflops", "max_error", "registers", "smem_bytes", "sm_clock_mhz",
                         "throttle_reasons", "measured_at"])
        writer.writerows(rows)


def _run_start(environment: str) -> str:
    """The run's start as the database writes times ("YYYY-MM-DD HH:MM:SS"), from environment.txt's date line."""
    for line in environment.splitlines():
        if line.startswith("date: "):
            return line[len("date: "):].replace("T", " ").rstrip("Z")
    return ""


def _study_row(db, study: str, run: str, failure_rows: dict) -> str:
    rows = db.execute(text(
        "select m.implementation, m.median_ms, m.tflops, k.name, p.m, p.n, p.k, p.dtype "
        "from measurements m join problems p on p.id = m.problem_id "
        "left join kernels k on k.id = m.kernel_id where m.study = :s order by m.id"), {"s": study}).all()
    kernel = next(r for r in reversed(rows) if r.implementation == "candidate")
    cublas = next(r for r in reversed(rows) if r.implementation == "cublas")
    failures = dict(db.execute(text(
        "select failure_class, count(*) from failures where study = :s group by failure_class"), {"s": study}).all())
    gpu_failures = sum(n for c, n in failures.items() if c not in ("rejected", "resource", "compile_error"))
    evaluated = len({r.name for r in rows if r.implementation == "candidate"}) + gpu_failures
    shape = f"{kernel.m}x{kernel.n}x{kernel.k} {kernel.dtype}" + (" pareto" if study.endswith("/pareto") else "")
    failure_rows[f"{run} | {shape}"] = failures
    return (f"| {run} | {shape} | {evaluated} | `{kernel.name}` | {kernel.median_ms:.4f} | {kernel.tflops:.1f} | "
            f"{cublas.median_ms:.4f} | {cublas.tflops:.1f} | {cublas.median_ms / kernel.median_ms:.3f}x |")


if __name__ == "__main__":
    main(*sys.argv[1:])
