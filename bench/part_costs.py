"""What the parts of an ``hgemm_wgmma`` kernel cost: its time with its epilogue left out, and
its time per tile where its tiles fill whole waves of blocks.

    python3 bench/part_costs.py --shape 4096 --config hgemm_wgmma_wg_m2_... [--rounds 5]

These kernels, and cuBLAS at both sizes, are timed in alternated rounds (L2 flushed before every launch):

* ``full``: the config as it ships.
* ``no-epilogue``: the same source with every tile's epilogue skipped (``continue`` or ``return`` after
  the main loop), so no C is written. Its output is wrong, so it is timed and not verified. The difference to
  ``full`` bounds what overlapping the epilogue with the next tile's main loop could win.
* ``no-c-stores`` (a persistent kernel with the TMA epilogue): the epilogue's work kept, its stores of C left
  out. Where it takes as long as ``full``, the epilogue costs its instructions; where as long as
  ``no-epilogue``, the traffic of C.
* ``full`` on the problem with M grown until the tiles fill whole waves of blocks:
  if the last, partial wave costs a whole wave, the larger problem takes about as long; the share of
  the time a tile scheduler that splits the last wave could win is then ``1 - M / M_filled`` at most.

Prints each round, then the medians over rounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys

from ratio_repeat import parse_config_name

from autotune.gpu_specs import GPUS
from autotune.kernel.build import finish_build
from autotune.kernel.compile import compile_kernel
from autotune.kernel.render import render
from autotune.problem import make_problem
from autotune.records import Failure
from autotune.space.family import families_for_dtype

_TILE_LOOP_END = "        fence_accumulators(acc);\n"  # persistent: after a tile's main loop, before its epilogue
_MAIN_LOOP_END = "    fence_accumulators(acc);\n"  # one tile a block: after the main loop, before the epilogue


# Keeps the accumulators live without writing C (else ptxas drops the dead wgmma too): a sum in 8
# chains, and a copy within C only if the sum has one NaN bit pattern. About 130 instructions a thread a tile.
_KEEP_ALIVE = """{indent}{{
{indent}    float sums[8] = {{}};
{indent}    const float* const flat = &acc[0][0][0];
{indent}#pragma unroll
{indent}    for (int e = 0; e < M_TILES * (WN / 8) * 4; ++e) sums[e % 8] += flat[e];
{indent}    const float sum = ((sums[0] + sums[1]) + (sums[2] + sums[3])) + ((sums[4] + sums[5]) + (sums[6] + sums[7]));
{indent}    if (__float_as_uint(sum) == 0x7fc01234u) C[0] = C[1];
{indent}}}
{indent}{leave};  // part_costs: epilogue left out
"""


def without_epilogue(code: str) -> str:
    """The kernel's source with each tile's epilogue skipped (``continue`` in a persistent kernel's
    tile loop, ``return`` in a kernel of one tile a block)."""
    head, marker, tail = code.rpartition(_TILE_LOOP_END)
    if marker and "for (int tile = 0; tile < my_tiles; ++tile)" in head:
        return head + marker + _KEEP_ALIVE.format(indent="        ", leave="continue") + tail
    head, marker, tail = code.rpartition(_MAIN_LOOP_END)
    if not marker:
        raise SystemExit("not an hgemm_wgmma source: no epilogue to leave out")
    return head + marker + _KEEP_ALIVE.format(indent="    ", leave="return") + tail


_PERSISTENT_STORE = "tma_store(&tensor_map_c, block_n + col0 + 64 * slab, block_m + row0 + i * 64, box);"


def without_c_stores(code: str) -> str:
    """The persistent kernel's source with its epilogue's work (scale, convert, stmatrix into the ring) kept and
    its TMA stores of C left out: what the epilogue costs besides the traffic of C."""
    if code.count(_PERSISTENT_STORE) != 1:
        raise SystemExit("not a persistent hgemm_wgmma source with a TMA epilogue: no C stores to leave out")
    return code.replace(_PERSISTENT_STORE, "/* part_costs: C store left out */", 1)


def filled_rows(m: int, n: int, bm: int, bn: int, sms: int) -> int:
    """The most rows (a multiple of ``bm``, at least ``m``) whose tiles fit the waves that ``m`` rows need."""
    columns = math.ceil(n / bn)
    waves = math.ceil(math.ceil(m / bm) * columns / sms)
    return max(m, waves * sms // columns * bm)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="4096")
    parser.add_argument("--dtype", default="f16")
    parser.add_argument("--config", required=True, help="an hgemm_wgmma config name")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    import cupy

    from autotune.gpu.launch import KernelLaunch, load_kernel
    from autotune.gpu.measure import CublasGemm, make_operands, time_launches

    problem = make_problem(args.shape, args.dtype)
    space, config = parse_config_name(args.config, families_for_dtype(problem.dtype))
    gpu = GPUS["h200"]
    values = space.values(config, gpu)
    bm, bn = values["BM"], values["BN"]
    rows = filled_rows(problem.m, problem.n, bm, bn, gpu.sms)
    source = render(space, config, gpu)
    variants = {"full": source, "no-epilogue": dataclasses.replace(source, code=without_epilogue(source.code))}
    if source.code.count(_PERSISTENT_STORE) == 1:
        variants["no-c-stores"] = dataclasses.replace(source, code=without_c_stores(source.code))
    print(f"{problem.shape} {problem.dtype}: {config.name}; tiles {bm}x{bn}, filled waves at M = {rows}")

    timed = {}  # label -> launch callable
    kept = []
    for label, m in [(name, problem.m) for name in variants] + [(f"full at M={rows}", rows)]:
        shaped = dataclasses.replace(problem, m=m)
        built = finish_build(space, config, compile_kernel(variants[label.split(" ")[0]], use_cache=False), gpu,
                             shaped)
        if isinstance(built, Failure):
            raise SystemExit(f"{label}: {built.failure_class}: {built.message}")
        launch = built.launch
        function = load_kernel(cupy, built.cubin, built.entry, launch.dynamic_smem, launch.opt_in)
        kernel = KernelLaunch(cupy, function, launch.grid, launch.block, launch.dynamic_smem,
                              (m, problem.n, problem.k), launch.tensor_maps, workspace=launch.workspace)
        operands = make_operands(shaped, seed=0)
        stream = cupy.cuda.get_current_stream().ptr
        a, b, c = operands.a.data.ptr, operands.b.data.ptr, operands.out.data.ptr
        timed[label] = (lambda kernel=kernel, a=a, b=b, c=c: kernel(stream, a, b, c, 2, 1.0, 0.0))
        cublas = CublasGemm(operands.a, operands.b, operands.out, 1.0, 0.0, element=problem.element)
        timed[f"cuBLAS at M={m}"] = cublas
        kept.append((kernel, operands, cublas))

    medians: dict[str, list[float]] = {label: [] for label in timed}
    for round_ in range(1, args.rounds + 1):
        order = list(timed) if round_ % 2 else list(reversed(timed))
        for label in order:
            medians[label].append(time_launches(timed[label], warmup=5, repeats=args.repeats).median_ms)
        print(f"  round {round_}: " + ", ".join(f"{label} {medians[label][-1]:.4f} ms" for label in timed))
    final = {label: statistics.median(times) for label, times in medians.items()}
    print("medians over rounds:")
    for label, ms in final.items():
        print(f"  {label}: {ms:.4f} ms")
    full, bare = final["full"], final["no-epilogue"]
    print(f"  epilogue: {100 * (full - bare) / full:.1f}% of the kernel's time")
    if "no-c-stores" in final:
        print(f"  of which the stores of C: {100 * (full - final['no-c-stores']) / full:.1f}%")
    grown = final[f"full at M={rows}"]
    print(f"  filled waves: {rows / problem.m:.4f}x the work in {grown / full:.4f}x the time "
          f"(per row {full / problem.m * rows / grown:.4f}x as fast); cuBLAS "
          f"{final[f'cuBLAS at M={rows}'] / final[f'cuBLAS at M={problem.m}']:.4f}x the time")
    print(f"  ratio to cuBLAS: full {final[f'cuBLAS at M={problem.m}'] / full:.3f}x, "
          f"at M={rows} {final[f'cuBLAS at M={rows}'] / grown:.3f}x")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
