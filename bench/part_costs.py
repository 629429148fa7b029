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
    from autotune.gpu.detect import attached_gpu
    from autotune.gpu.measure import time_launches

    problem = make_problem(args.shape, args.dtype)
    space, config = parse_config_name(args.config, families_for_dtype(problem.dtype))
    gpu = attached_gpu()
    values = space.values(config, gpu)
    rows = filled_rows(problem.m, problem.n, values["BM"], values["BN"], gpu.sms)
    print(f"{problem.shape} {problem.dtype}: {config.name}; tiles {values['BM']}x{values['BN']}, "
          f"filled waves at M = {rows}")
    compiled = {name: compile_kernel(source, use_cache=False) for name, source in _variants(render(space, config, gpu))}
    timed, kept = {}, []  # label -> launch; what the launches' addresses point into
    for m, names in ((problem.m, list(compiled)), (rows, ["full"])):
        shaped = dataclasses.replace(problem, m=m)
        timed[f"cuBLAS at M={m}"], operands = _cublas(shaped)
        kept.append(operands)
        for name in names:
            timed[name if m == problem.m else f"{name} at M={m}"] = _kernel(space, config, compiled[name], gpu,
                                                                           shaped, operands)
    medians: dict[str, list[float]] = {label: [] for label in timed}
    for round_ in range(1, args.rounds + 1):
        for label in (list(timed) if round_ % 2 else list(reversed(timed))):
            medians[label].append(time_launches(timed[label], warmup=5, repeats=args.repeats).median_ms)
        print(f"  round {round_}: " + ", ".join(f"{label} {medians[label][-1]:.4f} ms" for label in timed))
    _report({label: statistics.median(times) for label, times in medians.items()}, problem.m, rows)


def _variants(source):
    """(name, source) of the kernels timed at the problem's size: as it ships, without its epilogue, and
    (a persistent kernel with the TMA epilogue) without its stores of C."""
    yield "full", source
    yield "no-epilogue", dataclasses.replace(source, code=without_epilogue(source.code))
    if source.code.count(_PERSISTENT_STORE) == 1:
        yield "no-c-stores", dataclasses.replace(source, code=without_c_stores(source.code))


def _cublas(problem):
    """cuBLAS on fresh operands of ``problem``, and those operands."""
    from autotune.gpu.measure import CublasGemm, make_operands

    operands = make_operands(problem, seed=0)
    return CublasGemm(operands.a, operands.b, operands.out, 1.0, 0.0, element=problem.element), operands


def _kernel(space, config, compiled, gpu, problem, operands):
    """A launch of ``compiled`` on ``problem``'s ``operands`` (c = a @ b), on the current stream."""
    import cupy

    from autotune.gpu.launch import KernelLaunch, load_kernel

    built = finish_build(space, config, compiled, gpu, problem)
    if isinstance(built, Failure):
        raise SystemExit(f"{config.name} at {problem.shape}: {built.failure_class}: {built.message}")
    launch = built.launch
    kernel = KernelLaunch(cupy, load_kernel(cupy, built.cubin, built.entry, launch.dynamic_smem, launch.opt_in),
                          launch.grid, launch.block, launch.dynamic_smem, (problem.m, problem.n, problem.k),
                          launch.tensor_maps, workspace=launch.workspace)
    stream, element_bytes = cupy.cuda.get_current_stream().ptr, operands.a.itemsize
    a, b, c = operands.a.data.ptr, operands.b.data.ptr, operands.out.data.ptr
    return lambda: kernel(stream, a, b, c, element_bytes, 1.0, 0.0)


def _report(ms: dict[str, float], m: int, rows: int) -> None:
    """The medians over rounds, and what they say of the epilogue and of the last wave."""
    print("medians over rounds:")
    for label, time in ms.items():
        print(f"  {label}: {time:.4f} ms")
    full, grown = ms["full"], ms[f"full at M={rows}"]
    cublas, cublas_grown = ms[f"cuBLAS at M={m}"], ms[f"cuBLAS at M={rows}"]
    print(f"  epilogue: {100 * (full - ms['no-epilogue']) / full:.1f}% of the kernel's time")
    if "no-c-stores" in ms:
        print(f"  of which the stores of C: {100 * (full - ms['no-c-stores']) / full:.1f}%")
    print(f"  filled waves: {rows / m:.4f}x the work in {grown / full:.4f}x the time "
          f"(per row {full / m * rows / grown:.4f}x as fast); cuBLAS {cublas_grown / cublas:.4f}x the time")
    print(f"  ratio to cuBLAS: full {cublas / full:.3f}x, at M={rows} {cublas_grown / grown:.3f}x")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
