"""A tuned kernel against cuBLAS timed two ways, L2 flushed (as searches and retime do) and back to back.

    python3 bench/warm_timing.py [--out DIR]

For a few shapes of the Llama MLP block and squares (the table's kernel for each, launched directly, whether
the table picks it or cuBLAS), each way's median over interleaved rounds: flushed, one launch between its own
events after the L2 flush; back to back, BACK_TO_BACK launches between one pair of events, per launch. Where the
two ratios to cuBLAS differ, a table built from flushed times misjudges the kernel in a model, whose GEMMs run
back to back. Then where the runtime's host time per call goes: cProfile of ``autotune.gemm`` repeated on a
shape that falls back to cuBLAS and on one a tuned kernel serves. Writes warm_timing.json under --out.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
from pathlib import Path

import cupy

import autotune
from autotune.gpu import measure
from autotune.problem import GemmProblem

sys.path.insert(0, str(Path(__file__).resolve().parent))
from runtime_check import _tuned_launch, users_array  # noqa: E402

SHAPES = [  # (dtype, layout, m, n, k)
    ("f16", "nt", 4096, 4096, 14336), ("f16", "nt", 1024, 4096, 14336), ("bf16", "nt", 4096, 4096, 14336),
    ("f16", "nt", 4096, 14336, 4096), ("f16", "row", 4096, 4096, 4096), ("f16", "row", 8192, 8192, 8192),
    ("f32", "row", 4096, 4096, 4096),
]
ROUNDS = 5
BACK_TO_BACK = 20


def back_to_back_ms(launch, calls: int = BACK_TO_BACK) -> float:
    """Milliseconds per launch of ``calls`` launches between one pair of events, after one untimed launch."""
    launch()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    for _ in range(calls):
        launch()
    end.record()
    end.synchronize()
    return cupy.cuda.get_elapsed_time(start, end) / calls


def compare(dtype: str, layout: str, m: int, n: int, k: int, seed: int) -> dict:
    problem = GemmProblem(m, n, k, dtype, layout)
    operands = measure.make_operands(problem, seed)
    a, b, target = (users_array(x, dtype) for x in (operands.a, operands.b, operands.out))
    if problem.b_transposed:
        b = b.T
    decision = autotune.explain(a, b, target)
    launches = {"kernel": _tuned_launch(decision, (a, b, target)),
                "cublas": measure.CublasGemm(operands.a, operands.b, operands.out, 1.0, 0.0, problem.element,
                                             problem.b_transposed)}
    flushed = {name: [] for name in launches}
    warm = {name: [] for name in launches}
    for turn in range(ROUNDS):
        for name in list(launches)[turn % 2:] + list(launches)[:turn % 2]:
            flushed[name] += measure.time_launches(launches[name], warmup=2, repeats=10).samples_ms
            warm[name].append(back_to_back_ms(launches[name]))
    row = {"dtype": dtype, "layout": layout, "shape": f"{m}x{n}x{k}", "kernel": decision.pick.kernel,
           "table_runs": "cuBLAS" if decision.uses_cublas else "kernel"}
    for label, times in (("flushed", flushed), ("back_to_back", warm)):
        kernel_ms, cublas_ms = statistics.median(times["kernel"]), statistics.median(times["cublas"])
        row.update({f"{label}_kernel_ms": kernel_ms, f"{label}_cublas_ms": cublas_ms,
                    f"{label}_ratio": cublas_ms / kernel_ms})
    return row


def host_profile(label: str, call, calls: int = 2000) -> str:
    """The 15 functions of most own time over ``calls`` calls of ``call`` (after 200 untimed)."""
    for _ in range(200):
        call()
    cupy.cuda.get_current_stream().synchronize()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        call()
    profiler.disable()
    cupy.cuda.get_current_stream().synchronize()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(15)
    return f"== {label}: {calls} calls\n{text.getvalue()}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for seed, shape in enumerate(SHAPES):
        row = compare(*shape, seed)
        rows.append(row)
        print(f"{row['dtype']:>4} {row['layout']:>3} {row['shape']:>16} {row['table_runs']:>6}: flushed "
              f"{row['flushed_kernel_ms']:.4f} vs {row['flushed_cublas_ms']:.4f} ms ({row['flushed_ratio']:.3f}x), "
              f"back to back {row['back_to_back_kernel_ms']:.4f} vs {row['back_to_back_cublas_ms']:.4f} ms "
              f"({row['back_to_back_ratio']:.3f}x)  {row['kernel'][:60]}", flush=True)
    profiles = []
    for dtype, size in ((cupy.float32, 64), (cupy.float16, 1024)):
        x = cupy.random.standard_normal((size, size), dtype=cupy.float32).astype(dtype)
        y = cupy.random.standard_normal((size, size), dtype=cupy.float32).astype(dtype)
        z = cupy.empty((size, size), dtype=dtype)
        route = "cuBLAS" if autotune.explain(x, y, z).uses_cublas else "tuned kernel"
        profiles.append(host_profile(f"autotune.gemm(a, b, out=out), {cupy.dtype(dtype).name} {size}^3 [{route}]",
                                     lambda x=x, y=y, z=z: autotune.gemm(x, y, out=z)))
    for text in profiles:
        print(text)
    (out / "warm_timing.json").write_text(json.dumps({"shapes": rows, "host_profiles": profiles}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
