"""Which kernels cuBLAS runs at given shapes: the cuBLAS call the tables and searches time against
(``autotune.gpu.measure.CublasGemm``: gemmEx, fp32 compute), profiled through PyTorch's profiler (CUPTI sees
every kernel of the process), with each kernel's name, launches and time per cuBLAS call.

    python3 bench/cublas_kernels.py f32:128x4096x11008 f16:4096 ... [--out DIR]

A kernel's name gives cuBLAS's tile, cluster and split choices (``nvjet_sm90_hsh_128x64_64x8_1x2_h_bz_NNT``,
``sm90_xmma_gemm_..._128x128x16_...``): evidence for the tiles a family lacks, not code to copy.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import cupy
import torch

from autotune.gpu import measure
from autotune.problem import GemmProblem, make_problem

CALLS = 20


def profile(problem: GemmProblem) -> list[dict]:
    """The kernels of CALLS cuBLAS calls at ``problem``: name, launches and microseconds per call."""
    operands = measure.make_operands(problem, seed=0)
    gemm = measure.CublasGemm(operands.a, operands.b, operands.out, 1.0, 0.0, problem.element,
                              problem.b_transposed)
    for _ in range(3):
        gemm()
    cupy.cuda.Device().synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as trace:
        for _ in range(CALLS):
            gemm()
        cupy.cuda.Device().synchronize()
    found: dict[str, dict] = defaultdict(lambda: {"calls": 0, "us": 0.0})
    for event in trace.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            entry = found[event.name]
            entry["calls"] += 1
            entry["us"] += event.time_range.elapsed_us()
    return [{"kernel": name, "calls_per_gemm": entry["calls"] / CALLS, "us_per_gemm": entry["us"] / CALLS}
            for name, entry in sorted(found.items(), key=lambda item: -item[1]["us"])]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="+", help="DTYPE:SHAPE, e.g. f32:128x4096x11008 or f16:4096 (layout row)")
    parser.add_argument("--out", type=Path, default=None, help="write cublas_kernels.json here")
    args = parser.parse_args(argv)
    report = []
    for case in args.cases:
        dtype, _, shape = case.partition(":")
        problem = make_problem(shape, dtype)
        kernels = profile(problem)
        report.append({"dtype": dtype, "shape": f"{problem.m}x{problem.n}x{problem.k}", "kernels": kernels})
        for kernel in kernels:
            print(f"{dtype} {problem.m}x{problem.n}x{problem.k}: {kernel['us_per_gemm']:8.2f} us "
                  f"x{kernel['calls_per_gemm']:g}  {kernel['kernel']}", flush=True)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "cublas_kernels.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
