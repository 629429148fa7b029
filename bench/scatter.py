"""Time/energy scatter of a shape's energy windows, with the front and cuBLAS marked.

    python3 bench/scatter.py --db sqlite:///results.db --gpu h200 --shape 4096 --dtype f16 --out scatter.png

Needs matplotlib (a plotting-only dependency of this script, not of autotune).
"""

from __future__ import annotations

import argparse

from autotune.problem import make_problem
from autotune.results import ResultStore
from autotune.search.objective import Point, pareto_front


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--gpu", default="h200")
    parser.add_argument("--shape", default="4096")
    parser.add_argument("--dtype", default="f32")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    problem = make_problem(args.shape, args.dtype)
    rows = ResultStore(args.db).energy(args.gpu, problem)
    candidates = [r for r in rows if r.config_name != "cublas"]
    cublas = [r for r in rows if r.config_name == "cublas"]
    points = [Point(r.median_ms, r.energy_per_gemm_j * 1e3) for r in candidates]
    front = pareto_front(points)

    figure, axes = plt.subplots(figsize=(7, 4.5))
    axes.scatter([p.ms for p in points], [p.mj for p in points], s=14, alpha=0.6, label="evaluated configs")
    axes.plot([p.ms for p in front], [p.mj for p in front], "o-", color="C3", label="front")
    if cublas:
        ref = cublas[-1]
        axes.scatter([ref.median_ms], [ref.energy_per_gemm_j * 1e3], marker="*", s=200, color="k", label="cuBLAS")
    axes.set_xlabel("time per GEMM (ms)")
    axes.set_ylabel("energy per GEMM (mJ)")
    axes.set_title(f"{problem.shape} {problem.dtype} on {args.gpu}: time and energy per GEMM")
    axes.legend()
    figure.tight_layout()
    figure.savefig(args.out, dpi=120)
    print(f"{args.out}: {len(points)} configs, {len(front)} on the front, cuBLAS {'marked' if cublas else 'absent'}")


if __name__ == "__main__":
    main()
