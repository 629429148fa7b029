"""Tuning on a miss on a GPU: calls at a shape the table was not tuned at go on while the shape is searched
in the background, and move to the tuned kernel once the table is built again.

    python bench/tune_on_miss.py --out DIR [--shape 3072x3072x3072] [--dtype f32] [--layout row] [--trials 30]
                                 [--timeout 90]

``--layout nt``: ``b`` is ``W.T`` of a row-major N x K weight (``x @ W.T``, nn.Linear's product).

Uses a fresh results database in DIR. Calls the runtime in a loop (each result checked against cuBLAS's
on the same inputs) until the background search's table is in or 3 x timeout seconds pass; records, per
call, what ran and how long the call took on the host; writes DIR/tune_on_miss.json and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shape", default="3072x3072x3072")
    parser.add_argument("--dtype", choices=("f32", "f16"), default="f32")
    parser.add_argument("--layout", choices=("row", "nt"), default="row")
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--timeout", type=float, default=90.0)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    database = args.out / "tune_on_miss.db"
    database.unlink(missing_ok=True)
    os.environ["AUTOTUNE_DB"] = f"sqlite:///{database.resolve()}"

    import cupy

    import autotune
    from autotune.runtime import runtime_for

    m, n, k = (int(x) for x in args.shape.split("x"))
    dtype = {"f32": cupy.float32, "f16": cupy.float16}[args.dtype]
    rng = cupy.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=cupy.float32).astype(dtype)
    b = rng.standard_normal((k, n), dtype=cupy.float32).astype(dtype)
    if args.layout == "nt":
        b = cupy.ascontiguousarray(b.T).T  # the transpose of an N x K weight
    reference = cupy.matmul(a.astype(cupy.float64), b.astype(cupy.float64))
    scale = float(cupy.abs(reference).max())

    autotune.tune_on_miss(trials=args.trials, timeout_s=args.timeout, max_searches=1)
    runtime = runtime_for(0)
    before = runtime.explain(a, b)
    calls, started = [], time.perf_counter()
    while time.perf_counter() - started < 3 * args.timeout + 60:
        decision = runtime.explain(a, b)
        begin = time.perf_counter()
        out = cupy.full((m, n), cupy.nan, dtype=dtype)
        autotune.gemm(a, b, out=out)
        host_ms = (time.perf_counter() - begin) * 1e3
        cupy.cuda.Device().synchronize()
        error = float(cupy.abs(out.astype(cupy.float64) - reference).max()) / scale
        calls.append({"t_s": round(time.perf_counter() - started, 3), "runs": "cuBLAS" if decision.uses_cublas
                      else decision.kernel.name, "tuned_here": not decision.missed, "host_ms": host_ms,
                      "max_relative_error": error})
        if runtime.tuner.finished and not decision.missed:
            break
        time.sleep(0.25)
    after = runtime.explain(a, b)
    worst_error = max(call["max_relative_error"] for call in calls)
    report = {"shape": [m, n, k], "dtype": args.dtype, "trials": args.trials, "timeout_s": args.timeout,
              "before": str(before), "after": str(after), "finished": runtime.tuner.finished,
              "calls": len(calls), "slowest_call_host_ms": max(c["host_ms"] for c in calls),
              "worst_relative_error": worst_error, "log": runtime.tuner.log.read_text(), "per_call": calls}
    (args.out / "tune_on_miss.json").write_text(json.dumps(report, indent=1))
    print(f"before: {before}")
    print(f"after:  {after}")
    print(f"{len(calls)} calls over {calls[-1]['t_s']:.0f} s while the search ran; slowest call "
          f"{report['slowest_call_host_ms']:.1f} ms on the host; worst relative error {worst_error:.2e}")
    print(f"search: {runtime.tuner.finished}")
    ok = worst_error < (1e-4 if args.dtype == "f32" else 2e-2) and runtime.tuner.finished and not after.missed
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
