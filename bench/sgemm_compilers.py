"""Is an SGEMM's speed in its source or in its compiler? Each kernel built by NVRTC and by nvcc, timed against cuBLAS.

    python3 bench/sgemm_compilers.py --shape 4096 --rounds 10 --public DIR --config NAME [--config NAME ...]
    python3 bench/sgemm_compilers.py --dry-run --public DIR --config NAME     # builds only, no GPU

Sources: ``public``, the hand-written kernel ``sgemm_128x256x8`` of salykova/sgemm.cu (``--public``: a
checkout holding ``src/kernels/128x256x8.cuh`` and ``common/helper_cuda ptx.h``; the header is inlined and
``<cstdint>`` replaced by the one typedef the kernel uses, so that both compilers build one text), and
``config1``, ``config2``, ... of our ``sgemm`` family (``--config``: a name as a search prints it, rendered
by autotune). Each source is built for sm_90 by NVRTC exactly as autotune builds it
(``autotune.kernel.compile.compile_kernel``) and by the toolkit's nvcc (``-cubin -O3 -Xptxas -v -std=c++17``,
skipped with a message where there is no nvcc); registers and spills come from each build's ptxas report.

On the GPU every build is first verified (NaN-poisoned C, beta 0 and 0.5, against cuBLAS on the same
inputs); a build that fails is reported and not timed. Then each round times cuBLAS and every build like a
search's closing measurement (L2 flushed before each launch, CUDA events around it, the median), in orders
that change each round so that, over a full cycle (as many rounds as things timed, twice that for an odd
count), each runs first and directly after each other equally often. The table gives each build's pooled
median, its ratio to cuBLAS's pooled median and the range of the per-round ratios.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy
from ratio_repeat import parse_config_name

from autotune.errors import AutotuneError, CompilerError, InputError, NoGpuError
from autotune.gpu_specs import GPUS
from autotune.kernel.compile import OPTIONS as NVRTC_OPTIONS
from autotune.kernel.compile import CompiledKernel, CompileFailure, compile_kernel, nvrtc_version, parse_resources
from autotune.kernel.cubin import parameter_sizes
from autotune.kernel.render import KernelSource, render
from autotune.problem import GemmProblem, make_problem
from autotune.records import Timing
from autotune.space.family import families_for_dtype

GPU = GPUS["h200"]  # our configs' launch geometry is the space's for this GPU; every build is for its arch
PUBLIC_KERNEL = Path("src/kernels/128x256x8.cuh")
PUBLIC_HEADER = Path("common/helper_cuda ptx.h")
PUBLIC_ENTRY = "_Z15sgemm_128x256x8iiifPKfiS0_ifPfi"  # sgemm_128x256x8(int, int, int, float, const float*, ...)
PUBLIC_TILE_M, PUBLIC_TILE_N, PUBLIC_THREADS = 128, 256, 256
CSTDINT_STAND_IN = "typedef unsigned long uint64_t;  // <cstdint> on 64-bit Linux; NVRTC has no <cstdint>"
NVCC_OPTIONS = ("-cubin", "-O3", "-Xptxas", "-v", "-std=c++17")
SMEM_DEFAULT_LIMIT = 48 * 1024  # above this a kernel must opt in to dynamic shared memory
WARMUP = 10


@dataclasses.dataclass(frozen=True)
class Kernel:
    """One source and its launch: ``arguments(problem, a, b, c)`` gives the kernel's argument list."""

    label: str
    source: KernelSource
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_smem: int
    arguments: Callable[[GemmProblem, object, object, object], tuple]


@dataclasses.dataclass(frozen=True)
class Build:
    kernel: Kernel
    compiler: str  # "nvrtc" or "nvcc"
    result: CompiledKernel | CompileFailure

    @property
    def label(self) -> str:
        return f"{self.kernel.label}/{self.compiler}"


def public_source(checkout: Path) -> KernelSource:
    """The public kernel's file with its PTX-helper header inlined where it is included and ``<cstdint>``
    (of which it uses ``uint64_t``) replaced by that one typedef: one text that NVRTC and nvcc both build."""
    kernel, header = checkout / PUBLIC_KERNEL, checkout / PUBLIC_HEADER
    if not (kernel.is_file() and header.is_file()):
        raise InputError("--public", str(checkout),
                         f"a checkout of salykova/sgemm.cu holding {PUBLIC_KERNEL} and '{PUBLIC_HEADER}'")
    include, code = f'#include "{header.name}"', kernel.read_text()
    if include not in code:
        raise InputError("--public", str(checkout), f"a {PUBLIC_KERNEL} with the line {include}")
    code = code.replace(include, header.read_text().replace("#pragma once", ""), 1)
    code = code.replace("#include <cstdint>", CSTDINT_STAND_IN, 1)
    return KernelSource(entry=PUBLIC_ENTRY, code=code, template_hash="", target=GPU.sm)


def public_arguments(problem: GemmProblem, a, b, c) -> tuple:
    """``(m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)``, all row-major."""
    i, f = numpy.int32, numpy.float32
    m, n, k = problem.m, problem.n, problem.k
    return i(m), i(n), i(k), f(problem.alpha), a, i(k), b, i(n), f(problem.beta), c, i(n)


def autotune_arguments(problem: GemmProblem, a, b, c) -> tuple:
    """``(A, B, C, M, N, K, alpha, beta)``: what every kernel of ours takes."""
    i, f = numpy.int32, numpy.float32
    return a, b, c, i(problem.m), i(problem.n), i(problem.k), f(problem.alpha), f(problem.beta)


def argument_sizes(arguments: tuple) -> tuple[int, ...]:
    """Bytes of each argument as passed: a NumPy scalar's own size, 8 for an array (a pointer)."""
    return tuple(value.itemsize if isinstance(value, numpy.generic) else 8 for value in arguments)


def public_kernel(checkout: Path, problem: GemmProblem) -> Kernel:
    grid = (-(-problem.n // PUBLIC_TILE_N), -(-problem.m // PUBLIC_TILE_M), 1)
    return Kernel("public", public_source(checkout), grid, (PUBLIC_THREADS, 1, 1), 0, public_arguments)


def config_kernel(name: str, label: str, problem: GemmProblem) -> Kernel:
    """A config of ours, named as a search prints it, rendered and laid out by autotune."""
    space, config = parse_config_name(name, families_for_dtype("f32"))
    launch = space.launch(config, GPU, problem)
    if launch.tensor_maps:
        raise InputError("--config", name, "a config launched without tensor maps")
    return Kernel(label, render(space, config, GPU), launch.grid, launch.block, launch.dynamic_smem,
                  autotune_arguments)


def find_nvcc() -> str | None:
    """nvcc on PATH, else in $CUDA_HOME/bin or /usr/local/cuda/bin."""
    homes = [Path(os.environ["CUDA_HOME"])] if os.environ.get("CUDA_HOME") else []
    found = shutil.which("nvcc") or next((p for h in [*homes, Path("/usr/local/cuda")]
                                          if (p := h / "bin" / "nvcc").is_file()), None)
    return str(found) if found else None


def nvcc_version(nvcc: str) -> str:
    """``13.0.88`` from ``nvcc --version`` (its last line where no release is found)."""
    text = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    found = re.search(r"release [\d.]+, V([\d.]+)", text)
    return found.group(1) if found else (text.strip().splitlines() or ["unknown"])[-1]


def build_with_nvcc(nvcc: str, source: KernelSource) -> CompiledKernel | CompileFailure:
    """``nvcc -cubin`` of the source in a scratch folder; resources from ptxas's report."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sgemm_compilers_") as folder:
        path, cubin = Path(folder, "kernel.cu"), Path(folder, "kernel.cubin")
        path.write_text(source.code)
        command = [nvcc, *NVCC_OPTIONS, f"-arch={source.target}", "-o", str(cubin), str(path)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        log, seconds = done.stdout + done.stderr, time.perf_counter() - started
        if done.returncode != 0:
            first = next((line for line in log.splitlines() if "error" in line), log.strip()[:200])
            return CompileFailure(source.entry, first.strip(), log, seconds)
        try:
            resources = parse_resources(log)
        except CompilerError as error:
            return CompileFailure(source.entry, str(error), log, seconds)
        return CompiledKernel(source.entry, source.target, cubin.read_bytes(), resources, log, seconds)


def build_all(kernels: list[Kernel], nvcc: str | None) -> list[Build]:
    """Every kernel by NVRTC (as autotune builds it, not from the cache) and, where there is one, by nvcc."""
    builds = []
    for kernel in kernels:
        builds.append(Build(kernel, "nvrtc", compile_kernel(kernel.source, kernel.source.target, use_cache=False)))
        if nvcc:
            builds.append(Build(kernel, "nvcc", build_with_nvcc(nvcc, kernel.source)))
    return builds


def parameter_mismatch(build: Build) -> str | None:
    """Why the built kernel cannot take its launch's arguments (their sizes against the cubin's), or None."""
    taken = parameter_sizes(build.result.cubin, build.result.entry)
    passed = argument_sizes(build.kernel.arguments(GemmProblem(1, 1, 1), None, None, None))
    return f"takes parameters of {list(taken)} bytes; its launch passes {list(passed)}" \
        if taken and taken != passed else None


def describe_build(build: Build) -> str:
    if isinstance(build.result, CompileFailure):
        return f"  {build.label:14s} build failed: {build.result.message}"
    r, mismatch = build.result.resources, parameter_mismatch(build)
    return (f"  {build.label:14s} {r.registers:3d} registers, spills {r.spill_stores}/{r.spill_loads} B stored/loaded, "
            f"stack frame {r.stack_frame} B, {r.smem_static} B static smem ({build.result.seconds:.1f} s)"
            + (f"; {mismatch}" if mismatch else ""))


# -- on the GPU ---------------------------------------------------------------------------------------


def gpu_environment(cupy, measure) -> str:
    """GPU name, driver and CUDA runtime; an error unless the GPU is of the arch the builds are for."""
    runtime = cupy.cuda.runtime
    try:
        props = runtime.getDeviceProperties(runtime.getDevice())
    except runtime.CUDARuntimeError as error:
        raise NoGpuError(f"no usable CUDA GPU ({error}); --dry-run builds and reports without one") from None
    arch = f"sm_{props['major']}{props['minor']}"
    if arch != GPU.sm:
        raise AutotuneError(f"the GPU is {arch}; this bench builds for {GPU.sm} ({GPU.key})")
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    version = runtime.runtimeGetVersion()
    driver = measure.nvml_driver_version() or str(runtime.driverGetVersion())
    return f"gpu: {name} ({arch}), driver {driver}, CUDA runtime {version // 1000}.{version % 1000 // 10}"


def kernel_launch(build: Build, operands, stream) -> Callable:
    """``launch(problem, out)`` of a build's cubin on the operands' A and B; an error if the kernel's
    parameters (read from the cubin) are not what the launch passes."""
    import cupy

    kernel, compiled = build.kernel, build.result
    mismatch = parameter_mismatch(build)
    if mismatch:
        raise AutotuneError(mismatch)
    module = cupy.cuda.function.Module()
    module.load(compiled.cubin)
    function = module.get_function(compiled.entry)  # keeps the module loaded
    if kernel.dynamic_smem > SMEM_DEFAULT_LIMIT:
        driver = cupy.cuda.driver
        driver.funcSetAttribute(function.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                kernel.dynamic_smem)

    def launch(problem: GemmProblem, out) -> None:
        function(kernel.grid, kernel.block, kernel.arguments(problem, operands.a, operands.b, out),
                 shared_mem=kernel.dynamic_smem, stream=stream)

    return launch


def verified_launches(builds: list[Build], problem: GemmProblem, operands, stream) -> dict[str, Callable]:
    """Label -> timed launch of each build that verifies at beta 0 and 0.5; the others are reported."""
    import cupy

    from autotune.gpu import measure
    from autotune.gpu.tasks import verification_problems

    references = {}
    for checked in verification_problems(problem):
        ref = measure.reference(checked, operands)
        references[checked] = (ref, measure.error_bound(checked, operands, ref))
    launches = {}
    for build in (b for b in builds if isinstance(b.result, CompiledKernel)):
        try:
            launch = kernel_launch(build, operands, stream)
            checks = {p: measure.check(functools.partial(launch, p), p, operands, *references[p]) for p in references}
        except (AutotuneError, cupy.cuda.driver.CUDADriverError, cupy.cuda.runtime.CUDARuntimeError) as error:
            print(f"  {build.label}: launch failed: {error}; not timed")
            continue
        failed = [f"beta {p.beta:g}: {c.describe()}" for p, c in checks.items() if not c.passed]
        worst = max(c.max_error for c in checks.values())
        print(f"  {build.label}: " + (f"WRONG ({'; '.join(failed)}); not timed" if failed
                                      else f"verified (worst element {worst:.3f}x the bound)"))
        if not failed:
            launches[build.label] = functools.partial(launch, problem, operands.out)
    return launches


def balanced_orders(count: int) -> list[list[int]]:
    """The rows of a balanced Latin square (Williams design) of ``count`` items: over the rows each item
    runs first equally often and directly after each other item equally often (``2 * count`` rows for an
    odd ``count``, ``count`` for an even one)."""
    first, low, high = [0], 1, count - 1
    while low <= high:
        first.append(low)
        low += 1
        if low <= high:
            first.append(high)
            high -= 1
    rows = [[(item + shift) % count for item in first] for shift in range(count)]
    return rows + [row[::-1] for row in rows] if count % 2 else rows


def timed_rounds(launches: dict[str, Callable], rounds: int, repeats: int) -> list[dict[str, Timing]]:
    """Each round times every launch once, in the orders of :func:`balanced_orders` taken in turn."""
    from autotune.gpu import measure

    labels, results = list(launches), []
    orders = balanced_orders(len(labels))
    for round_ in range(rounds):
        order = [labels[i] for i in orders[round_ % len(orders)]]
        times = {label: measure.time_launches(launches[label], warmup=WARMUP, repeats=repeats, budget_ms=None)
                 for label in order}
        results.append(times)
        cublas_ms = times["cuBLAS"].median_ms
        shown = ", ".join(f"{label} {times[label].median_ms:.4f} ({cublas_ms / times[label].median_ms:.3f}x)"
                          for label in labels[1:])
        print(f"  round {round_ + 1:2d}: cuBLAS {cublas_ms:.4f} ms, {shown}; order {' > '.join(order)}")
    return results


def print_table(builds: list[Build], results: list[dict[str, Timing]]) -> None:
    pooled = {label: Timing.from_samples([ms for r in results for ms in r[label].samples_ms]).median_ms
              for label in results[0]}
    print(f"\n{'build':8s} {'compiler':8s} {'regs':>4s} {'spills B':>9s} {'median ms':>9s} {'x cuBLAS':>8s}  per round")
    print(f"{'cuBLAS':8s} {'':8s} {'':4s} {'':9s} {pooled['cuBLAS']:9.4f} {1:8.3f}x")
    for build in builds:
        head = f"{build.kernel.label:8s} {build.compiler:8s}"
        if isinstance(build.result, CompileFailure):
            print(f"{head} build failed: {build.result.message}")
            continue
        r = build.result.resources
        head += f" {r.registers:4d} {r.spill_stores:4d}/{r.spill_loads:<4d}"
        if build.label not in pooled:
            print(f"{head} not timed (failed verification or launch)")
            continue
        ratios = [result["cuBLAS"].median_ms / result[build.label].median_ms for result in results]
        print(f"{head} {pooled[build.label]:9.4f} {pooled['cuBLAS'] / pooled[build.label]:8.3f}x "
              f" {min(ratios):.3f}-{max(ratios):.3f}x")


def run_on_gpu(builds: list[Build], problem: GemmProblem, rounds: int, repeats: int) -> None:
    import cupy

    from autotune.gpu import measure

    print(gpu_environment(cupy, measure))
    stream = cupy.cuda.Stream(non_blocking=True)
    stream.use()
    operands = measure.make_operands(problem, seed=0)
    print(f"verification at {problem.m}x{problem.n}x{problem.k} (NaN-poisoned C, against cuBLAS):")
    launches = {"cuBLAS": measure.CublasGemm(operands.a, operands.b, operands.out, problem.alpha, problem.beta),
                **verified_launches(builds, problem, operands, stream)}
    if len(launches) == 1:
        raise AutotuneError("no build verified: nothing to time")
    print(f"timing: {rounds} rounds of {WARMUP} warm-up and {repeats} timed launches each, L2 flushed before each; "
          f"the order is balanced over every {len(balanced_orders(len(launches)))} rounds")
    print_table(builds, timed_rounds(launches, rounds, repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="4096", help="4096 or MxNxK (default 4096)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=100, help="timed launches per build and round")
    parser.add_argument("--public", type=Path, help="a checkout of salykova/sgemm.cu (its src/ and common/)")
    parser.add_argument("--config", action="append", default=[], help="a config of ours (repeatable)")
    parser.add_argument("--dry-run", action="store_true", help="build and report registers and spills; no GPU")
    args = parser.parse_args()
    try:
        for option, value in (("--rounds", args.rounds), ("--repeats", args.repeats)):
            if value < 1:
                raise InputError(option, value, "a positive integer")
        problem = make_problem(args.shape, "f32")
        kernels = [public_kernel(args.public, problem)] if args.public else []
        kernels += [config_kernel(name, f"config{i}", problem) for i, name in enumerate(args.config, 1)]
        if not kernels:
            raise InputError("sources", "none", "--public DIR and/or --config NAME")
        for i, name in enumerate(args.config, 1):
            print(f"config{i}: {name}")
        nvcc = find_nvcc()
        print(f"nvrtc {nvrtc_version()}: --gpu-architecture={GPU.sm} {' '.join(NVRTC_OPTIONS)}")
        print(f"nvcc {nvcc_version(nvcc)} ({nvcc}): {' '.join(NVCC_OPTIONS)} -arch={GPU.sm}" if nvcc else
              "nvcc: not on PATH, in $CUDA_HOME/bin or in /usr/local/cuda/bin; nvcc builds skipped")
        builds = build_all(kernels, nvcc)
        print("builds:")
        for build in builds:
            print(describe_build(build))
        if not args.dry_run:
            run_on_gpu(builds, problem, args.rounds, args.repeats)
    except AutotuneError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
