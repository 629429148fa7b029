"""Where a projection's time goes: PyTorch's own ``nn.Linear`` product against ``autotune::gemm``, per call.

    python3 bench/op_profile.py [--json FILE] [--tokens 1,16,128,1024,4096] [--dtypes f16,bf16]

For the Llama MLP's projections (4096 -> 14336 and 14336 -> 4096) at each token count, five ways of
computing ``x @ W.T``: ``F.linear`` on the ``out x in`` weight (what ``nn.Linear`` runs), ``torch.mm`` on
the weight laid out ``in x out`` (what :class:`autotune.torch.Linear` hands cuBLAS), ``autotune::gemm``
eager on that weight, the same under ``torch.compile``, and ``autotune::gemm`` on the
``out x in`` weight's transposed view (which the runtime hands to PyTorch's matmul). Per way: the host's time per call
(``perf_counter`` over CALLS calls queued without a synchronisation, the GPU's queue never full), the
GPU's time per call (CUDA events around CALLS calls back to back) and the GPU kernels it ran (names and
microseconds from ``torch.profiler``). Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

import autotune.torch as at

CALLS = 50
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}
PROJECTIONS = ((4096, 14336), (14336, 4096))  # (in, out)


def host_us(call) -> float:
    """Microseconds of host time per call, queued CALLS at a time (medians of 5)."""
    times = []
    for _ in range(5):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(CALLS):
            call()
        times.append((time.perf_counter() - start) / CALLS * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def gpu_us(call) -> float:
    """Microseconds per call between CUDA events around CALLS calls back to back (medians of 5)."""
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(CALLS):
            call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / CALLS * 1e3)
    return statistics.median(times)


def kernels(call) -> list[tuple[str, float]]:
    """The GPU kernels of one call: (name, microseconds), from torch.profiler over CALLS calls."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        for _ in range(CALLS):
            call()
        torch.cuda.synchronize()
    rows = [(event.key, event.device_time_total / CALLS) for event in profile.key_averages()
            if event.device_time_total > 0]
    return sorted(rows, key=lambda row: -row[1])[:4]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", default="1,16,128,1024,4096")
    parser.add_argument("--dtypes", default="f16,bf16")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("op_profile: needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    rows = []
    compiled = torch.compile(lambda x, w: torch.ops.autotune.gemm(x, w, None, 1.0, 0.0), fullgraph=True,
                             dynamic=True)
    with torch.inference_mode():
        for dtype_name in args.dtypes.split(","):
            dtype = DTYPES[dtype_name]
            for inputs, outputs in PROJECTIONS:
                weight = torch.randn(outputs, inputs, dtype=dtype, device="cuda") * inputs ** -0.5
                weight_t = weight.t().contiguous()  # in x out, row-major
                for tokens in (int(t) for t in args.tokens.split(",")):
                    x = torch.randn(tokens, inputs, dtype=dtype, device="cuda")
                    ways = {
                        "F.linear": lambda: torch.nn.functional.linear(x, weight),
                        "mm in x out": lambda: torch.mm(x, weight_t),
                        "autotune::gemm": lambda: torch.ops.autotune.gemm(x, weight_t, None, 1.0, 0.0),
                        "autotune::gemm compiled": lambda: compiled(x, weight_t),
                        "autotune::gemm on W.T": lambda: torch.ops.autotune.gemm(x, weight.t(), None, 1.0, 0.0),
                    }
                    for way, call in ways.items():
                        call()
                        row = {"dtype": dtype_name, "shape": f"{tokens}x{outputs}x{inputs}", "way": way,
                               "host_us": host_us(call), "gpu_us": gpu_us(call), "kernels": kernels(call)}
                        rows.append(row)
                        top = "; ".join(f"{name[:60]} {us:.1f}" for name, us in row["kernels"][:2])
                        print(f"{dtype_name:>4} {row['shape']:>16} {way:>24}  host {row['host_us']:7.1f} us  "
                              f"GPU {row['gpu_us']:7.1f} us  {top}", flush=True)
    if args.json:
        with open(args.json, "w") as file:
            json.dump(rows, file, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
