"""What NVRTC compiles cost on this machine's CPUs: one at a time and many at once.

    python3 bench/compile_cost.py --out DIR [--config NAME...] [--source FILE...] [--parallel 1,8,16]
                                  [--reps 3] [--probe-nice]

Each config (an sgemm kernel name, as the search names them; by default two dear kinds and a cheap one built
for any shape, and the first built for whole tiles) and each source file is compiled ``--reps`` times alone,
then once in each of N processes started together, for each N of ``--parallel``. Reported per case: wall and CPU seconds per compile, and compiles per second with N
processes. ``--probe-nice`` times ``import optuna`` in a fresh interpreter (what a search does while its
opening compiles) alone, beside 16 compile processes, and beside 16 that run at nice 10. Writes
``compile_cost.json`` and ``compile_cost.txt`` to DIR, with the CPU model and core count.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import multiprocessing.pool
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

DEFAULT_CONFIGS = (
    # a COPY_PTRS lean build with 16x8 micro-tiles built for any shape: before WHOLE_TILES, most of a 4096
    # search's compile time
    "sgemm_bm128_bn256_bk8_split_k1_tm16_tn8_warps_m1_pad_a4_pad_b0_vec4_stages2_cp_async1_smem_opt_in0"
    "_prefetch1_group_m8_lean_build1_lane_pairs1_copy_spread1_copy_ptrs1_whole_tiles0",
    # a lean build without COPY_PTRS, same micro-tile, built for any shape
    "sgemm_bm256_bn128_bk8_split_k1_tm16_tn8_warps_m8_pad_a0_pad_b0_vec4_stages2_cp_async0_smem_opt_in0"
    "_prefetch0_group_m1_lean_build1_lane_pairs1_copy_spread0_copy_ptrs0_whole_tiles0",
    # a cheap one
    "sgemm_bm64_bn64_bk16_split_k1_tm4_tn4_warps_m2_pad_a4_pad_b0_vec4_stages2_cp_async0_smem_opt_in0"
    "_prefetch0_group_m1_lean_build0_lane_pairs0_copy_spread0_copy_ptrs0_whole_tiles0",
    # the first, built for whole tiles: what a 4096 search compiles of it
    "sgemm_bm128_bn256_bk8_split_k1_tm16_tn8_warps_m1_pad_a4_pad_b0_vec4_stages2_cp_async1_smem_opt_in0"
    "_prefetch1_group_m8_lean_build1_lane_pairs1_copy_spread1_copy_ptrs1_whole_tiles1",
)


def render_config(name: str) -> str:
    """The CUDA source of the sgemm config ``name`` for the H200 (exits with one line on a bad name)."""
    from ratio_repeat import parse_config_name  # loaded here, not in each compile process

    from autotune.errors import InputError
    from autotune.gpu_specs import gpu_spec
    from autotune.kernel.render import render

    try:
        space, config = parse_config_name(name, ["sgemm"])
    except InputError as error:
        raise SystemExit(str(error)) from None
    return render(space, config, gpu_spec("h200")).code


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def compile_once(code: str, niceness: int = 0) -> tuple[float, float]:
    """Compile ``code`` for sm_90 with the search's options: (wall s, CPU s). A variable of a unique name
    keeps NVRTC's own cache of compiled programs (CUDA 12.9 on, keyed after preprocessing) from answering."""
    code = f"__device__ int unique_{uuid.uuid4().hex};\n{code}"
    if niceness:
        os.nice(niceness)
    from autotune.kernel import nvrtc
    from autotune.kernel.compile import OPTIONS, include_dirs

    options = ["--gpu-architecture=sm_90", *OPTIONS, *(f"-I{d}" for d in include_dirs())]
    cpu, wall = _cpu_seconds(), time.perf_counter()
    output = nvrtc.compile_program(code, "kernel.cu", options)
    if output.cubin is None:
        raise SystemExit(f"compile failed: {output.log[:300]}")
    return time.perf_counter() - wall, _cpu_seconds() - cpu


def _warm_worker(_: int) -> None:  # load NVRTC before the clock starts
    from autotune.kernel import nvrtc

    nvrtc.version()


@contextlib.contextmanager
def _warm_pool(processes: int) -> Iterator[multiprocessing.pool.Pool]:
    """``processes`` spawned processes with NVRTC loaded."""
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        pool.map(_warm_worker, range(processes))
        yield pool


def concurrent(code: str, processes: int) -> dict:
    """``processes`` compiles of ``code`` started together, one per process."""
    with _warm_pool(processes) as pool:
        started = time.perf_counter()
        results = pool.map(compile_once, [code] * processes)
        elapsed = time.perf_counter() - started
    walls = [wall for wall, _ in results]
    cpus = [cpu for _, cpu in results]
    return {"processes": processes, "elapsed_s": elapsed, "wall_mean_s": sum(walls) / len(walls),
            "cpu_mean_s": sum(cpus) / len(cpus), "compiles_per_s": processes / elapsed}


def probe_nice(code: str, processes: int = 16) -> dict:
    """``import optuna`` in a fresh interpreter: alone, beside ``processes`` compiles, beside compiles at
    the compile pool's niceness."""
    from autotune.kernel.compile import COMPILE_NICENESS

    def timed_import() -> float:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import optuna, sqlalchemy"], check=True)
        return time.perf_counter() - started

    found = {"alone_s": min(timed_import() for _ in range(3))}
    for label, niceness in (("beside_compiles_s", 0), ("beside_niced_compiles_s", COMPILE_NICENESS)):
        with _warm_pool(processes) as pool:
            pending = pool.starmap_async(compile_once, [(code, niceness)] * processes)
            time.sleep(0.3)
            found[label] = timed_import()
            pending.get()
    return found


def machine() -> dict:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout if shutil.which("lscpu") else ""
    threads = re.search(r"Thread\(s\) per core:\s*(\d+)", lscpu)
    return {"cpu": model, "cpus": os.cpu_count(), "threads_per_core": int(threads.group(1)) if threads else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--config", nargs="*", default=list(DEFAULT_CONFIGS))
    parser.add_argument("--source", nargs="*", type=Path, default=[])
    parser.add_argument("--parallel", default="1,8,16")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--probe-nice", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    cases = [(name, render_config(name)) for name in args.config]
    cases += [(str(path), path.read_text()) for path in args.source]
    report = {"machine": machine(), "cases": []}
    lines = [f"{report['machine']}"]
    for label, code in cases:
        compile_once(code)  # NVRTC loaded, caches warm
        alone = [compile_once(code) for _ in range(args.reps)]
        case = {"case": label, "lines": len(code.splitlines()),
                "alone_wall_s": min(w for w, _ in alone), "alone_cpu_s": min(c for _, c in alone),
                "parallel": [concurrent(code, int(n)) for n in args.parallel.split(",")]}
        report["cases"].append(case)
        lines.append(f"{label[:90]}: alone {case['alone_wall_s']:.2f} s wall, {case['alone_cpu_s']:.2f} s CPU")
        for row in case["parallel"]:
            lines.append(f"    {row['processes']:2d} at once: {row['wall_mean_s']:.2f} s wall, {row['cpu_mean_s']:.2f} s CPU "
                         f"per compile; {row['compiles_per_s']:.2f} compiles/s")
        print(lines[-len(case['parallel']) - 1:], flush=True)
    if args.probe_nice:
        report["nice"] = probe_nice(cases[0][1])
        lines.append("import optuna, sqlalchemy: " + ", ".join(f"{k} {v:.2f}" for k, v in report["nice"].items()))
    (args.out / "compile_cost.json").write_text(json.dumps(report, indent=1))
    (args.out / "compile_cost.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
