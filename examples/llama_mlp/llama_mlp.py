"""A Llama-style MLP block (gate, up and down projections) on autotune's kernels, timed against PyTorch.

    python examples/llama_mlp/llama_mlp.py [--dtype f16|bf16] [--tokens 1,16,128,1024,4096]
                                           [--hidden 4096] [--intermediate 14336] [--cuda-graphs] [--json FILE]

The same block, with the same weights, runs twice: as plain PyTorch, and with
``autotune.torch.use_autotune`` (every ``nn.Linear`` asks the table, and runs ``autotune::gemm`` where a
tuned kernel wins, else ``F.linear``), both under
``torch.compile``. For each token count it checks the two outputs agree and prints both times
per call (medians of CUDA-event timings of 10 calls back to back, the two models interleaved) and
their ratio, and the ratio of one call timed alone. ``--cuda-graphs`` compiles both with
``mode="reduce-overhead"`` (each call a CUDA graph replayed: no host time per call) and has the tuned
block's layers pick by the kernels' times alone (``use_autotune(model, cuda_graphs=True)``). Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch
from torch import nn

import autotune.torch as at

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}
BACK_TO_BACK = 10  # calls per timing: the host queues ahead, as for the layers of a model
TOLERANCE = 2e-2  # largest difference from PyTorch's output, relative to its largest element


class LlamaMLP(nn.Module):
    """``down(silu(gate(x)) * up(x))``, the feed-forward block of a Llama layer."""

    def __init__(self, hidden: int, intermediate: int, dtype: torch.dtype, device: str = "cuda"):
        super().__init__()
        self.gate = nn.Linear(hidden, intermediate, bias=False, dtype=dtype, device=device)
        self.up = nn.Linear(hidden, intermediate, bias=False, dtype=dtype, device=device)
        self.down = nn.Linear(intermediate, hidden, bias=False, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(nn.functional.silu(self.gate(x)) * self.up(x))


def time_ms(block, x: torch.Tensor, rounds: int, calls: int = 1) -> list[float]:
    """Milliseconds per call of ``rounds`` timings with CUDA events, each around ``calls`` calls made back to
    back (1: one call alone, so the host's time before its first kernel counts; more: the host queues ahead,
    as it does for the layers of a model)."""
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            block(x)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return times


def compare(hidden: int, intermediate: int, dtype: torch.dtype, tokens: list[int], rounds: int,
            cuda_graphs: bool = False) -> list[dict]:
    torch.manual_seed(0)
    plain = LlamaMLP(hidden, intermediate, dtype).eval()
    for layer in (plain.gate, plain.up, plain.down):
        nn.init.normal_(layer.weight, std=hidden ** -0.5)
    tuned = LlamaMLP(hidden, intermediate, dtype).eval()
    tuned.load_state_dict(plain.state_dict())
    at.use_autotune(tuned, cuda_graphs)
    mode = "reduce-overhead" if cuda_graphs else None  # reduce-overhead: CUDA graphs, one per token count
    plain_compiled = torch.compile(plain, fullgraph=True, dynamic=True, mode=mode)  # one graph for every token count
    tuned_compiled = torch.compile(tuned, fullgraph=True, dynamic=True, mode=mode)
    rows = []
    with torch.inference_mode():
        for count in tokens:
            x = torch.randn(count, hidden, dtype=dtype, device="cuda")
            for _ in range(3):  # the compiles, the first calls and (CUDA graphs) their capture
                expected, got = plain_compiled(x).clone(), tuned_compiled(x).clone()
            error = ((got.float() - expected.float()).abs().max() / expected.float().abs().max()).item()
            row = {"tokens": count, "max_relative_error": error}
            for label, calls in (("", BACK_TO_BACK), ("alone_", 1)):
                plain_ms, tuned_ms = [], []
                for _ in range(5):  # interleaved rounds: both see the same clocks
                    plain_ms += time_ms(plain_compiled, x, rounds, calls)
                    tuned_ms += time_ms(tuned_compiled, x, rounds, calls)
                plain_median, tuned_median = statistics.median(plain_ms), statistics.median(tuned_ms)
                row.update({f"{label}pytorch_ms": plain_median, f"{label}autotune_ms": tuned_median,
                            f"{label}speedup": plain_median / tuned_median})
            row["kernels"] = [str(at_explain(x, layer, cuda_graphs)) for layer in (tuned.gate, tuned.down)]
            rows.append(row)
    return rows


def at_explain(x: torch.Tensor, layer: nn.Linear, cuda_graphs: bool):
    """What the operator would run for one projection (its first operand shaped as the layer sees it)."""
    rows = torch.empty(x.shape[0], layer.in_features, dtype=x.dtype, device=x.device)
    return at.explain(rows, layer.weight.t(), cuda_graphs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="f16")
    parser.add_argument("--tokens", default="1,16,128,1024,4096")
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--intermediate", type=int, default=14336)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--cuda-graphs", action="store_true",
                        help='compile both blocks with mode="reduce-overhead" (CUDA graphs)')
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("llama_mlp: needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    tokens = [int(t) for t in args.tokens.split(",")]
    rows = compare(args.hidden, args.intermediate, DTYPES[args.dtype], tokens, args.rounds, args.cuda_graphs)
    print(f"{'tokens':>7} {'PyTorch ms':>11} {'autotune ms':>12} {'speedup':>8} {'one call alone':>15} "
          f"{'max rel err':>12}")
    for row in rows:
        print(f"{row['tokens']:>7} {row['pytorch_ms']:>11.4f} {row['autotune_ms']:>12.4f} {row['speedup']:>7.3f}x "
              f"{row['alone_speedup']:>14.3f}x {row['max_relative_error']:>12.2e}")
    geomean = statistics.geometric_mean(row["speedup"] for row in rows)
    alone = statistics.geometric_mean(row["alone_speedup"] for row in rows)
    graphs = ", CUDA graphs" if args.cuda_graphs else ""
    print(f"{args.dtype}{graphs}: geometric mean {geomean:.3f}x PyTorch over {len(rows)} token counts, {BACK_TO_BACK} "
          f"calls back to back ({alone:.3f}x one call alone)")
    for row in rows:
        print(f"{row['tokens']} tokens: " + " | ".join(row["kernels"]))
    wrong = [row["tokens"] for row in rows if row["max_relative_error"] > TOLERANCE]
    if wrong:
        print(f"llama_mlp: outputs differ from PyTorch's by more than {TOLERANCE} at {wrong} tokens", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"dtype": args.dtype, "cuda_graphs": args.cuda_graphs, "hidden": args.hidden, "intermediate": args.intermediate,
                       "back_to_back": BACK_TO_BACK, "geomean_speedup": geomean, "geomean_speedup_alone": alone,
                       "rows": rows}, file, indent=1)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
