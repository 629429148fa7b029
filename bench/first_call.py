"""The runtime's first call: how long the first ``autotune.gemm`` of a fresh process takes, and the later ones.

    python3 bench/first_call.py [--out DIR] [--shape 4096] [--repeats 20] [--device cuda|host]

For each dtype (f32, f16) at a tuned shape it starts a fresh Python process twice: once with an empty
disk cache (``AUTOTUNE_CACHE``: a new install's first run) and once with the cache that run left (a later
run). Each process imports CuPy and autotune, creates its operands and synchronizes, then times the first
``autotune.gemm`` (finding the table, deciding, loading the kernel, launching; synchronized) and then
``--repeats`` more calls, each synchronized: their median is the GPU time a call needs anyway, so
``first - later`` is what the first call adds. Each row names what ran (the tuned kernel or cuBLAS),
where the table came from (``prebuilt`` where the shipped table came with autotune current) and any
warning of the first call (a cubin the driver refused, compiled again).

``--device host`` runs the same on the runtime's host device (NumPy computes; no GPU, no CuPy), to check
the script and the table lookup where there is no GPU. Writes first_call.json and first_call.csv under
--out (default: the current folder); exits 1 where a call failed.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

DTYPES = ("f32", "f16")
FIELDS = ("dtype", "shape", "cache", "first_ms", "later_ms", "first_extra_ms", "runs", "table", "warnings", "status")


def child(dtype: str, size: int, repeats: int, device: str) -> dict:
    """One fresh process's measurement (run inside the process this script starts)."""
    if device == "host":
        import numpy

        rng = numpy.random.default_rng(0)
        element = numpy.float32 if dtype == "f32" else numpy.float16
        a, b = (rng.standard_normal((size, size)).astype(element) for _ in range(2))
        gemm, explain, synchronize = _host_call("gemm"), _host_call("explain"), lambda: None
    else:
        import cupy

        import autotune

        element = cupy.float32 if dtype == "f32" else cupy.float16
        a, b = (cupy.random.standard_normal((size, size), dtype=cupy.float32).astype(element) for _ in range(2))
        synchronize = cupy.cuda.get_current_stream().synchronize
        synchronize()
        gemm, explain = autotune.gemm, autotune.explain
    with warnings.catch_warnings(record=True) as caught:  # a cubin the driver refused says so here
        warnings.simplefilter("always")
        started = time.perf_counter()
        gemm(a, b)
        synchronize()
        first = time.perf_counter() - started
    later = []
    for _ in range(repeats):
        started = time.perf_counter()
        gemm(a, b)
        synchronize()
        later.append(time.perf_counter() - started)
    decision = explain(a, b)
    median = statistics.median(later)
    return {"dtype": dtype, "shape": f"{size}x{size}x{size}", "first_ms": first * 1e3, "later_ms": median * 1e3,
            "first_extra_ms": (first - median) * 1e3,
            "runs": "cuBLAS" if decision.uses_cublas else decision.kernel.name, "table": decision.table_note,
            "warnings": [str(warning.message) for warning in caught], "status": "ok"}


def _host_call(name: str):
    """The host device's runtime ``gemm`` or ``explain``: the runtime made (and imported) at the first call, as
    ``autotune.gemm`` does on a GPU."""
    def call(a, b):
        from autotune import runtime
        from autotune.runtime.devices import HostDevice

        if not hasattr(_host_call, "runtime"):
            _host_call.runtime = runtime.Runtime(HostDevice())
        return getattr(_host_call.runtime, name)(a, b)

    return call


def measure(dtype: str, size: int, repeats: int, device: str, cache: Path, label: str) -> dict:
    """Run :func:`child` in a fresh process with ``cache`` as its disk cache."""
    env = {**os.environ, "AUTOTUNE_CACHE": str(cache), "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, __file__, "--child", dtype, "--shape", str(size), "--repeats", str(repeats),
               "--device", device]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"dtype": dtype, "shape": f"{size}x{size}x{size}", "cache": label, "status": f"FAILED: {tail}"}
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "cache": label}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".", help="folder for first_call.json and first_call.csv")
    parser.add_argument("--shape", type=int, default=4096, help="M = N = K of the call (a tuned shape; default 4096)")
    parser.add_argument("--repeats", type=int, default=20, help="later calls timed (default 20)")
    parser.add_argument("--device", choices=("cuda", "host"), default="cuda")
    parser.add_argument("--child", choices=DTYPES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.shape, args.repeats, args.device)))
        return 0
    rows = []
    for dtype in DTYPES:
        with tempfile.TemporaryDirectory(prefix="autotune-first-call-") as cache:
            for label in ("empty", "warm"):  # a new install's first process, then the next one
                row = measure(dtype, args.shape, args.repeats, args.device, Path(cache), label)
                rows.append(row)
                shown = {key: f"{value:.1f}" if isinstance(value, float) else value for key, value in row.items()}
                print("  ".join(f"{key}={shown[key]}" for key in FIELDS if key in shown), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "first_call.json").write_text(json.dumps(rows, indent=1) + "\n")
    with open(out / "first_call.csv", "w", newline="") as file:
        writer = csv.DictWriter(file, FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return 0 if all(row["status"] == "ok" for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
