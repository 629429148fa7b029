"""The Python runtime on a GPU: every pick verified against cuBLAS and timed beside it, host overhead, PyTorch.

    python3 bench/runtime_check.py [--table autotune_table_h200_with_cubins.json] [--shapes SET] [--out DIR]

For 25 shapes per dtype (f32, f16 and bf16, the last as PyTorch tensors: CuPy has no bfloat16;
square, odd, tall, wide, long-K, LLM-style and token counts that cut rows), and 15 shapes of ``x @ W.T`` (f16 and bf16, ``b`` the transpose
of a row-major N x K weight: the table's nt kernels) it runs ``autotune.gemm`` on fresh random operands, checks every element against
cuBLAS in fp32 (NaN-poisoned output with beta 0, then beta 0.5 on a random C;
the bound of autotune.gpu.measure), and times ``autotune.gemm`` and cuBLAS the way a
search does (L2 flushed before each launch, which also hides launch latency), in interleaved rounds (the order
rotating); bf16 rows also time PyTorch's own ``addmm_`` on the same tensors (the runtime's fallback for them).
Each shape says what ran: the tuned kernel, or cuBLAS (the table's pick where its
kernel is predicted slower, or a fallback); where the table decided, its tuned
kernel is timed too, launched directly, so the row shows whether the pick was the
faster of the two there (the prediction against the measurement).
Then: a misaligned and a strided operand (cuBLAS fallback, still correct), a
PyTorch fp16 tensor (no copy: the runtime writes the tensor's own memory), and
host time per call against ``cupy.matmul`` on a small shape.
Every path is held to fp32 accumulation's bound, PyTorch's matmul (the fallback for bf16 tensors) too: the check
turns off PyTorch's default bf16 reduced-precision reduction (``allow_bf16_reduced_precision_reduction``), which
takes PyTorch's bf16 ``addmm`` at 777x1333x555 to 3.9x that bound (0.46x without it; bench/mlp_kernels.py).
``--beta B`` times ``c = a @ b + B * c`` instead of beta 0 (the verification is the same).
``--shapes`` (a shape set such as ``llm-held-out``, or a shape file) replaces both lists: each of its shapes is
checked for every dtype, and as ``x @ W.T`` for f16 and bf16.
Writes runtime_check.csv and runtime_check.json under --out; exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

import cupy
import numpy

import autotune
from autotune.gpu import measure
from autotune.problem import GemmProblem
from autotune.shapes import read_shapes

SHAPES = [
    (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
    (1000, 1000, 1000), (777, 1333, 555), (4095, 4097, 4093), (513, 257, 1025), (33, 65, 129),
    (1, 4096, 4096), (16, 4096, 4096), (128, 14336, 4096), (127, 4096, 11008), (2, 11008, 4096),
    (4096, 4096, 11008), (8192, 8192, 1024), (4096, 14336, 4096), (2048, 512, 8192),
    (8192, 1024, 1024), (1024, 8192, 1024), (6, 4096, 4096), (5, 14336, 4096),  # rows past a few-row kernel's
    (77, 4096, 4096), (1500, 4096, 4096), (3000, 14336, 4096),  # token counts that cut rows, N and K whole
]
DTYPES = ("f32", "f16", "bf16")
NT_SHAPES = [  # x @ W.T: nn.Linear's projections (M tokens, N out, K in) and odd sizes
    (1, 14336, 4096), (16, 14336, 4096), (32, 14336, 4096), (256, 14336, 4096), (1024, 4096, 4096),
    (1024, 4096, 14336), (4096, 4096, 14336), (8192, 11008, 4096), (16384, 4096, 4096), (2048, 4096, 11008),
    (777, 1333, 555), (33, 65, 130), (77, 14336, 4096), (1500, 4096, 14336), (3000, 4096, 4096),
]
NT_DTYPES = ("f16", "bf16")
ROUNDS = 5  # rounds of interleaved timing per shape


def users_array(array: cupy.ndarray, dtype: str):
    """What a user hands autotune.gemm for ``dtype``: the CuPy array itself, or for bf16 (which CuPy lacks; its
    arrays here hold the bits as uint16) a PyTorch bfloat16 tensor on the same memory."""
    if dtype != "bf16":
        return array
    import torch

    return torch.from_dlpack(array).view(torch.bfloat16)


def check_shape(problem: GemmProblem, seed: int, timed_beta: float = 0.0) -> dict:
    """Verify (beta 0 and 0.5) and time one shape (``c = a @ b + timed_beta * c``); the row for the report."""
    operands = measure.make_operands(problem, seed)
    a, b, target = (users_array(x, problem.dtype) for x in (operands.a, operands.b, operands.out))
    if problem.b_transposed:
        b = b.T  # the weight is stored N x K; the product is x @ W.T
    decision = autotune.explain(a, b, target)
    worst = 0.0
    for beta in (0.0, 0.5):
        case = GemmProblem(problem.m, problem.n, problem.k, problem.dtype, problem.layout, beta=beta)
        ref = measure.reference(case, operands)
        bound = measure.error_bound(case, operands, ref)
        result = measure.check(lambda out, s=beta: autotune.gemm(a, b, out=users_array(out, problem.dtype), beta=s),
                               case, operands, ref, bound)
        worst = max(worst, result.max_error)
        if not result.passed:
            return _row(problem, decision, worst, None, None, None, f"beta {beta}: {result.describe()}")
    launches = {"ours": lambda: autotune.gemm(a, b, out=target, beta=timed_beta),
                "cublas": measure.CublasGemm(operands.a, operands.b, operands.out, 1.0, timed_beta, problem.element,
                                             problem.b_transposed)}
    if decision.pick:
        launches["tuned"] = _tuned_launch(decision, (a, b, target), timed_beta)
    if problem.dtype == "bf16":  # what a PyTorch user calls otherwise, and the runtime's fallback for these tensors
        launches["torch"] = lambda: target.addmm_(a, b, beta=timed_beta, alpha=1.0)
    ms = interleaved(launches)
    row = _row(problem, decision, worst, ms["ours"], ms["cublas"], ms.get("tuned"), "ok")
    row["torch_addmm_ms"] = ms.get("torch")
    return row


def interleaved(launches: dict, rounds: int = ROUNDS, repeats: int = 6) -> dict[str, float]:
    """Each launch's median time over ``rounds`` rounds of ``repeats`` flushed launches, the launches taking turns
    within a round and the order rotating from round to round (so that clocks, heat and power weigh on all
    alike; a block of one launch's timings after another's would favour the first on a large GEMM)."""
    names = list(launches)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(rounds):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            samples[name] += measure.time_launches(launches[name], warmup=2, repeats=repeats).samples_ms
    return {name: float(numpy.median(times)) for name, times in samples.items()}


def _tuned_launch(decision, arrays, beta: float = 0.0):
    """The table's tuned kernel for this call launched directly: the one it runs, or the one cuBLAS stood in for."""
    runtime = autotune.runtime.runtime_for(0)
    table = runtime.choice.table
    kernel = table.for_layout(decision.layout)[decision.dtype].kernel(decision.pick.kernel)
    device = runtime.device
    a, b, out = (device.operand(array, name) for array, name in zip(arrays, ("a", "b", "out")))
    return lambda: device.launch(kernel, table.arch, a, b, out, 1.0, beta, cupy.cuda.get_current_stream())


def _row(problem, decision, worst, ms, cublas_ms, tuned_ms, status) -> dict:
    """What ran and why, its error, and the times: autotune.gemm, cuBLAS and (where the table decided) its tuned
    kernel; ``pick_right``: whether the table's choice was the faster of its kernel and cuBLAS here."""
    pick = decision.pick
    tuned_ratio = cublas_ms / tuned_ms if tuned_ms and cublas_ms else None
    return {"dtype": problem.dtype, "layout": problem.layout, "shape": problem.shape, "torch_addmm_ms": None,
            "runs": "cuBLAS" if decision.uses_cublas else "kernel",
            "kernel": "cuBLAS" if decision.uses_cublas else decision.kernel.name,
            "table_pick": ("cublas" if pick.cublas else pick.kernel) if pick else None,
            "tuned_kernel": pick.kernel if pick else None, "why": decision.reason, "max_error_over_bound": worst,
            "ms": ms, "cublas_ms": cublas_ms, "ratio_to_cublas": cublas_ms / ms if ms and cublas_ms else None,
            "tuned_ms": tuned_ms, "predicted_tuned_ratio": pick.ratio_to_cublas if pick else None,
            "tuned_ratio_to_cublas": tuned_ratio,
            "pick_right": (pick.cublas == (tuned_ratio < 1.0)) if pick and tuned_ratio else None, "status": status}


def check_fallbacks() -> list[dict]:
    """A misaligned and a strided operand run on cuBLAS and are still right."""
    rows = []
    a = cupy.random.standard_normal((257, 129), dtype=cupy.float32)
    b = cupy.random.standard_normal((129, 300), dtype=cupy.float32)
    flat = cupy.empty(257 * 129 + 1, dtype=cupy.float32)
    shifted = flat[1:].reshape(257, 129)
    shifted[...] = a
    strided = cupy.random.standard_normal((129, 600), dtype=cupy.float32)[:, ::2]
    strided[...] = b
    want = a.astype(cupy.float64) @ b.astype(cupy.float64)
    for name, left, right in (("misaligned a", shifted, b), ("strided b", a, strided)):
        decision = autotune.explain(left, right)
        got = autotune.gemm(left, right)
        error = float(cupy.max(cupy.abs(got - want)) / cupy.max(cupy.abs(want)))
        ok = decision.uses_cublas and error < 1e-5
        rows.append({"case": name, "runs": "cuBLAS" if decision.uses_cublas else decision.kernel.name,
                     "why": decision.reason, "relative_error": error, "status": "ok" if ok else "FAILED"})
    return rows


TORCH_SHAPES = ((1000, 2000, 3000), (4096, 4096, 4096), (8192, 8192, 8192), (1024, 1024, 1024))  # m, n, k


def check_torch() -> dict:
    """A PyTorch fp16 product through the runtime, in place, against torch in fp32, at the first of
    TORCH_SHAPES where the table runs a tuned kernel (elsewhere it runs cuBLAS, which proves less)."""
    try:
        import torch
    except ImportError:
        return {"status": "skipped: no torch"}
    for m, n, k in TORCH_SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(k, n, device="cuda", dtype=torch.float16)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
        decision = autotune.explain(a, b, out)
        if not decision.uses_cublas:
            break
    returned = autotune.gemm(a, b, out=out)
    fresh = autotune.gemm(a, b)
    torch.cuda.synchronize()
    want = a.float() @ b.float()
    error = float((out.float() - want).abs().max() / want.abs().max())
    same = returned is out and isinstance(fresh, torch.Tensor) and torch.equal(fresh, out)
    ok = same and error < 2e-3 and not decision.uses_cublas
    return {"shape": f"{m}x{n}x{k}", "kernel": "cuBLAS" if decision.uses_cublas else decision.kernel.name,
            "relative_error": error, "in_place": returned is out,
            "fresh_result_is_tensor": isinstance(fresh, torch.Tensor),
            "status": "ok" if ok else "FAILED"}


def host_overhead(calls: int = 3000) -> dict:
    """Host microseconds per call: autotune.gemm, cupy.matmul and a bare cuBLAS call, on an f16 shape a
    tuned kernel serves (1024^3: about 10 us of GPU time, so the host sets the pace) and on a 64^3 f32
    shape that falls back to cuBLAS."""
    result = {}
    for dtype, size in ((cupy.float16, 1024), (cupy.float32, 64)):
        a = cupy.random.standard_normal((size, size), dtype=cupy.float32).astype(dtype)
        b = cupy.random.standard_normal((size, size), dtype=cupy.float32).astype(dtype)
        out = cupy.empty((size, size), dtype=dtype)
        label = f"{numpy.dtype(dtype).name} {size}^3"
        route = "cuBLAS" if autotune.explain(a, b, out).uses_cublas else "tuned kernel"
        ways = {f"{label}: autotune.gemm(a, b, out=out) [{route}]": lambda: autotune.gemm(a, b, out=out),
                f"{label}: autotune.gemm(a, b) [{route}]": lambda: autotune.gemm(a, b),
                f"{label}: cupy.matmul(a, b, out=out)": lambda: cupy.matmul(a, b, out=out),
                f"{label}: cupy.matmul(a, b)": lambda: cupy.matmul(a, b),
                f"{label}: cuBLAS gemmEx, arguments prepared": measure.CublasGemm(a, b, out, 1.0, 0.0)}
        for name, call in ways.items():
            for _ in range(200):
                call()
            cupy.cuda.get_current_stream().synchronize()
            samples = []
            for _ in range(5):
                start = time.perf_counter()
                for _ in range(calls):
                    call()
                cupy.cuda.get_current_stream().synchronize()
                samples.append((time.perf_counter() - start) / calls * 1e6)
            result[name] = float(numpy.median(samples))
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", help="a table file from `autotune export --format python` (default: looked up)")
    parser.add_argument("--shapes", help="check these shapes instead (a shape set such as llm-held-out, or a file)")
    parser.add_argument("--out", default=".")
    parser.add_argument("--beta", type=float, default=0.0,
                        help="time c = a @ b + BETA * c (default 0; the table's times are of beta 0)")
    args = parser.parse_args()
    shapes, nt_shapes = (SHAPES, NT_SHAPES) if args.shapes is None else (read_shapes(args.shapes),) * 2
    if args.table:
        autotune.load(args.table)
    try:
        import torch

        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    except ImportError:
        pass  # no bf16 tensors to check either
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    problems = [GemmProblem(*shape, dtype) for dtype in DTYPES for shape in shapes]
    problems += [GemmProblem(*shape, dtype, "nt") for dtype in NT_DTYPES for shape in nt_shapes]
    for seed, problem in enumerate(problems):
        row = check_shape(problem, seed, args.beta)
        rows.append(row)
        print(_line(row), flush=True)
    report = {"device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(), "timed_beta": args.beta,
              "table": str(autotune.runtime.runtime_for(0).choice.note), "shapes": rows,
              "fallbacks": check_fallbacks(), "torch": check_torch(), "host_us_per_call": host_overhead()}
    with open(out / "runtime_check.csv", "w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (out / "runtime_check.json").write_text(json.dumps(report, indent=1))
    for row in report["fallbacks"]:
        print(f"fallback {row['case']}: {row['runs']} ({row['why']}), relative error {row['relative_error']:.2e}: "
              f"{row['status']}")
    print(f"torch: {report['torch']}")
    for name, micros in report["host_us_per_call"].items():
        print(f"host {micros:7.2f} us/call  {name}")
    ratios = [r["ratio_to_cublas"] for r in rows if r["ratio_to_cublas"]]
    for dtype, layout in [(dtype, "row") for dtype in DTYPES] + [(dtype, "nt") for dtype in NT_DTYPES]:
        own = [r for r in rows if r["dtype"] == dtype and r["layout"] == layout]
        timed = [r["ratio_to_cublas"] for r in own if r["ratio_to_cublas"]]
        dtype = dtype if layout == "row" else f"{dtype} x @ W.T"
        if timed:
            print(f"{dtype}: geometric mean {float(numpy.exp(numpy.mean(numpy.log(timed)))):.3f}x cuBLAS over "
                  f"{len(timed)} shapes, worst {min(timed):.3f}x")
        judged = [r["pick_right"] for r in own if r["pick_right"] is not None]
        print(f"{dtype}: the tuned kernel ran on {sum(r['runs'] == 'kernel' for r in own)} shapes, cuBLAS on "
              f"{sum(r['runs'] == 'cuBLAS' for r in own)} ({sum(r['table_pick'] == 'cublas' for r in own)} the "
              f"table's pick); the table chose the faster of its kernel and cuBLAS at {sum(judged)} of {len(judged)}")
    failed = [r for r in rows if r["status"] != "ok"] + [r for r in report["fallbacks"] if r["status"] != "ok"]
    failed += [report["torch"]] if report["torch"]["status"] not in ("ok",) else []
    print(f"{len(rows) - len([r for r in rows if r['status'] != 'ok'])} of {len(rows)} shapes verified; "
          f"{len(failed)} failures; {len(ratios)} timed")
    return 1 if failed else 0


def _line(row: dict) -> str:
    """One shape: status, error, times, what ran; where the table decided, its tuned kernel predicted and measured."""
    ratio = f"{row['ratio_to_cublas']:.3f}x" if row["ratio_to_cublas"] else "-"
    text = (f"{row['dtype']}{' nt' if row['layout'] == 'nt' else ''} {row['shape']:>16} {row['status']:>4} err/bound {row['max_error_over_bound']:.3f} "
            f"ms {row['ms'] or 0:.5f} cuBLAS {row['cublas_ms'] or 0:.5f} {ratio:>7} ran {row['kernel'][:60]}")
    if row["torch_addmm_ms"]:
        text += f" (PyTorch's addmm_ {row['torch_addmm_ms']:.5f} ms)"
    if row["table_pick"]:
        predicted, measured = (f"{row[key]:.3f}x" if row[key] else "-"
                               for key in ("predicted_tuned_ratio", "tuned_ratio_to_cublas"))
        verdict = {True: "right", False: "WRONG", None: "-"}[row["pick_right"]]
        text += (f"; table: {row['table_pick'][:40]}, tuned kernel predicted {predicted}, measured {measured} "
                 f"cuBLAS ({verdict})")
    return text


if __name__ == "__main__":
    sys.exit(main())
