"""Turn a results database from bench/h200.sh into a Markdown report.

    python3 bench/summarize.py bench/out/results.db bench/out/environment.txt > bench/results/h200-sgemm.md

Per study: GPU evaluations, failures by class, and the final side-by-side
measurement of the best config and cuBLAS (the last two rows the study wrote).
"""

from __future__ import annotations

import collections
import sys

from sqlalchemy import create_engine, text


def main(db_path: str, environment_path: str) -> None:
    engine = create_engine(f"sqlite:///{db_path}")
    with engine.connect() as db:
        studies = [row[0] for row in db.execute(text(
            "select distinct study from measurements where study is not null order by study"))]
        env = db.execute(text("select gpu_name, arch, driver, cuda_runtime, nvrtc, cupy from environments")).first()
        print("# SGEMM search results on the H200\n")
        print("Written by `bench/summarize.py` from the database of `bench/h200.sh`.\n")
        print("```")
        print(open(environment_path).read().strip())
        print(f"autotune environment: {env.gpu_name} {env.arch}, driver {env.driver}, CUDA runtime "
              f"{env.cuda_runtime}, NVRTC {env.nvrtc}, CuPy {env.cupy}")
        print("```\n")
        print("| problem | GPU evaluations | best config | best ms | TFLOP/s | cuBLAS ms | cuBLAS TFLOP/s | ratio |")
        print("|---|---|---|---|---|---|---|---|")
        failures_by_study = {}
        for study in studies:
            rows = db.execute(text(
                "select m.id, m.implementation, m.median_ms, m.tflops, k.name, p.m, p.n, p.k, p.dtype "
                "from measurements m join problems p on p.id = m.problem_id "
                "left join kernels k on k.id = m.kernel_id where m.study = :s order by m.id"), {"s": study}).all()
            final_kernel = next(r for r in reversed(rows) if r.implementation == "candidate")
            final_cublas = next(r for r in reversed(rows) if r.implementation == "cublas")
            failures = dict(db.execute(text(
                "select failure_class, count(*) from failures where study = :s group by failure_class"),
                {"s": study}).all())
            gpu_failures = sum(n for c, n in failures.items() if c not in ("rejected", "resource", "compile_error"))
            candidates = {r.name for r in rows if r.implementation == "candidate"}
            shape = f"{final_kernel.m}x{final_kernel.n}x{final_kernel.k} {final_kernel.dtype}"
            print(f"| {shape} | {len(candidates) + gpu_failures} | `{final_kernel.name}` | {final_kernel.median_ms:.4f} | "
                  f"{final_kernel.tflops:.1f} | {final_cublas.median_ms:.4f} | {final_cublas.tflops:.1f} | "
                  f"{final_cublas.median_ms / final_kernel.median_ms:.2f}x |")
            failures_by_study[shape] = failures
        print("\nBest and cuBLAS are the final side-by-side measurement of each search (median of the timed")
        print("launches, L2 flushed before each, launch latency hidden behind the flush).\n")
        print("Failures by class (rejected, resource and compile_error never reached the GPU):\n")
        classes = sorted({c for f in failures_by_study.values() for c in f})
        print("| problem | " + " | ".join(classes) + " |")
        print("|---|" + "---|" * len(classes))
        for shape, failures in failures_by_study.items():
            print(f"| {shape} | " + " | ".join(str(failures.get(c, 0)) for c in classes) + " |")


if __name__ == "__main__":
    main(*sys.argv[1:3])
