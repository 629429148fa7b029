"""Which GPU kernels the Llama MLP block runs, plain and on autotune.torch, and what PyTorch's bf16 matmul loses.

    python3 bench/mlp_kernels.py [--dtype f16] [--tokens 1024] [--out DIR]

1. The block of ``examples/llama_mlp`` (4096 -> 14336 -> 4096), both models under ``torch.compile`` as the
   example runs them, profiled for 10 calls at one token count: every CUDA kernel with its count and total
   time, per model (``mlp_kernels.json``): whether the tuned nt kernel runs, and what else the tuned model adds.
2. PyTorch's bf16 ``addmm`` at 777x1333x555 (the runtime's cuBLAS fallback for bf16 tensors) against an fp64
   product, with ``torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction`` on (PyTorch's default)
   and off: the largest error over fp32 accumulation's bound (autotune.gpu.measure.error_bound).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "llama_mlp"))
from llama_mlp import DTYPES, LlamaMLP  # noqa: E402

import autotune.torch as at  # noqa: E402


def kernels(model, x: torch.Tensor, calls: int = 10) -> dict[str, dict]:
    """Each CUDA kernel ``model(x)`` runs over ``calls`` calls: count and total microseconds."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        for _ in range(calls):
            model(x)
        torch.cuda.synchronize()
    found: dict[str, dict] = defaultdict(lambda: {"count": 0, "us": 0.0})
    for event in profile.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            found[event.name]["count"] += 1
            found[event.name]["us"] += event.time_range.elapsed_us()
    return dict(sorted(found.items(), key=lambda item: -item[1]["us"]))


def profile_block(dtype: torch.dtype, tokens: int) -> dict:
    torch.manual_seed(0)
    plain = LlamaMLP(4096, 14336, dtype).eval()
    tuned = LlamaMLP(4096, 14336, dtype).eval()
    tuned.load_state_dict(plain.state_dict())
    at.use_autotune(tuned)
    models = {"pytorch": torch.compile(plain, fullgraph=True, dynamic=True),
              "autotune": torch.compile(tuned, fullgraph=True, dynamic=True)}
    x = torch.randn(tokens, 4096, dtype=dtype, device="cuda")
    with torch.inference_mode():
        for model in models.values():
            for _ in range(3):
                model(x)
        return {name: kernels(model, x) for name, model in models.items()}


def bf16_fallback_error() -> dict:
    from autotune.gpu import measure
    from autotune.problem import GemmProblem

    problem = GemmProblem(777, 1333, 555, "bf16")
    operands = measure.make_operands(problem, 7)
    ref = measure.reference(problem, operands)
    bound = measure.error_bound(problem, operands, ref)
    a, b = (torch.from_dlpack(x).view(torch.bfloat16) for x in (operands.a, operands.b))
    ref_t, bound_t = torch.from_dlpack(ref), torch.from_dlpack(bound)
    result = {}
    for allowed in (True, False):
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = allowed
        out = torch.empty(777, 1333, dtype=torch.bfloat16, device="cuda")
        out.addmm_(a, b, beta=0.0, alpha=1.0)
        torch.cuda.synchronize()
        result[f"reduced_precision_{'allowed' if allowed else 'off'}"] = float(((out.float() - ref_t).abs() / bound_t).max())
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="f16")
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--out", default=".")
    args = parser.parse_args()
    report = {"dtype": args.dtype, "tokens": args.tokens, "kernels": profile_block(DTYPES[args.dtype], args.tokens),
              "bf16_addmm_error_over_bound": bf16_fallback_error()}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "mlp_kernels.json").write_text(json.dumps(report, indent=1))
    for name, found in report["kernels"].items():
        total = sum(k["us"] for k in found.values())
        print(f"{name}: {total / 10:.1f} us per call")
        for kernel, stats in list(found.items())[:8]:
            print(f"  {stats['us'] / 10:8.1f} us  x{stats['count'] // 10:<3} {kernel[:110]}")
    print(f"bf16 addmm at 777x1333x555, error over the fp32-accumulation bound: {report['bf16_addmm_error_over_bound']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
