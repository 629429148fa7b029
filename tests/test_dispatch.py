"""A dispatch that is never knowingly slower than cuBLAS: cuBLAS as a candidate of the selection table.

The table picks cuBLAS where its tuned kernel's predicted time (its time at the nearest tuned shape,
scaled by its busiest SM's work) is more than cuBLAS's (its time there, carried in proportion to
m * n * k). Checked here: the pick itself, the runtime's decision and ``explain`` (on the host device),
the held-out report and ``autotune table``, old table files, and the exported C library (built with
stand-in cubins; its rule against the Python pick with cuBLAS outside the tuned range, and its cuBLAS
path through a stand-in libcuda and libcublas that log every call, with the layouts of the _ex functions
that only cuBLAS takes).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy
import pytest

from autotune.cli import main
from autotune.export.cuda import write_library
from autotune.gpu_specs import gpu_spec
from autotune.kernel.contract import LaunchContract
from autotune.problem import GemmProblem
from autotune.records import Environment, Measurement, Timing
from autotune.results import ResultStore
from autotune.runtime import Runtime
from autotune.runtime.devices import HostDevice
from autotune.select.kernel_table import (
    SELECTION_RULE,
    DtypeTable,
    KernelTable,
    TableKernel,
    TableRule,
    read_table,
    spec_for_arch,
)
from autotune.select.selection import (
    CUBLAS,
    Measured,
    Results,
    Selection,
    judge,
    quality,
    table_kernel,
    with_builds_for_any_shape,
)
from autotune.space.family import load_space

H200 = gpu_spec("h200")
DATA = Path(__file__).parent / "data"
RNG = numpy.random.default_rng(11)


def _kernel(name: str, tile: int, bk: int = 32) -> TableKernel:
    """A kernel of square ``tile`` x ``tile`` blocks running cdiv(K, bk) k-tiles each."""
    launch = LaunchContract(entry=name, target="sm_90", block=(256, 1, 1),
                            grid=(f"cdiv(N, {tile})", f"cdiv(M, {tile})", "1"), dynamic_smem=0, opt_in=False,
                            k_tiles=f"cdiv(K, {bk})")
    return TableKernel(name=name, family="sgemm", params={}, template_hash="0" * 16, launch=launch)


def _rule(shape, times, cublas_ms) -> TableRule:
    ordered = tuple(sorted(times, key=lambda t: t[1]))
    return TableRule(*shape, kernel=ordered[0][0], ms=ordered[0][1], cublas_ms=cublas_ms, measured_on="NVIDIA H200",
                     times=ordered)


# -- the pick ---------------------------------------------------------------------------------------


def test_the_pick_goes_to_cublas_where_the_kernel_was_slower_at_the_rule_shape_and_stays_where_it_was_faster():
    big, small = _kernel("big", 128), _kernel("small", 64)
    rules = (_rule((4096, 4096, 4096), [("big", 2.0), ("small", 2.5)], cublas_ms=1.8),  # cuBLAS faster
             _rule((1024, 1024, 1024), [("small", 0.10), ("big", 0.11)], cublas_ms=0.12),  # the kernel faster
             _rule((256, 256, 256), [("small", 0.01)], cublas_ms=None),  # cuBLAS not measured
             _rule((2048, 2048, 2048), [("big", 1.0)], cublas_ms=1.0))  # a tie stays on the kernel
    table = DtypeTable((big, small), rules, H200.sms)

    slower = table.pick(4096, 4096, 4096)
    assert slower.cublas and slower.kernel == "big"  # the kernel it stands in for where cuBLAS cannot run
    assert slower.kernel_ms == pytest.approx(2.0) and slower.cublas_ms == pytest.approx(1.8)
    assert slower.ratio_to_cublas == pytest.approx(0.9)
    faster = table.pick(1024, 1024, 1024)
    assert not faster.cublas and faster.kernel == "small" and faster.ratio_to_cublas == pytest.approx(1.2)
    unmeasured = table.pick(256, 256, 256)
    assert not unmeasured.cublas and unmeasured.cublas_ms is None and unmeasured.ratio_to_cublas is None
    assert not table.pick(2048, 2048, 2048).cublas
    assert [table.goes_to_cublas(rule) for rule in rules] == [True, False, False, False]
    assert "cuBLAS instead where that least time is more than cublas_ms * cost(shape) / cost(tuned shape)" \
        in SELECTION_RULE


def test_with_a_ridge_cublas_s_time_at_few_rows_follows_the_bytes_of_b_not_m():
    """At 4 rows the GEMV-like kernel took 69.9 us and cuBLAS 101 us (both reading B); at 2 rows and a
    narrower B, m * n * k alone would carry cuBLAS to 38.8 us and pick it, a roofline to 77.5 us."""
    gemv = _kernel("gemv", 128)
    rule = _rule((4, 14336, 4096), [("gemv", 0.0699)], cublas_ms=0.101)
    by_volume = DtypeTable((gemv,), (rule,), H200.sms).pick(2, 11008, 4096)
    assert by_volume.cublas and by_volume.cublas_ms == pytest.approx(0.101 * 2 * 11008 / (4 * 14336))
    ridge = H200.flops_per_element("f32")
    assert ridge == pytest.approx(67.0 * 4 / 4.8)
    by_roofline = DtypeTable((gemv,), (rule,), H200.sms, ridge).pick(2, 11008, 4096)
    moved = (2 * 4096 + 4096 * 11008 + 2 * 11008) / (4 * 4096 + 4096 * 14336 + 4 * 14336)
    assert not by_roofline.cublas and by_roofline.cublas_ms == pytest.approx(0.101 * moved)
    big = DtypeTable((gemv,), (_rule((4096, 4096, 4096), [("gemv", 1.0)], cublas_ms=1.0),), H200.sms, ridge)
    assert big.pick(2048, 2048, 2048).cublas_ms == pytest.approx(1.0 / 8)  # compute-bound: m * n * k


def test_cublas_time_carries_in_proportion_to_mnk_and_wins_where_the_kernels_last_wave_is_empty():
    """At 4096^3 the 128x128 kernel runs 32 x 32 = 1024 blocks, 8 turns of 132 SMs, 5% faster than cuBLAS.
    Its time moves in whole turns, cuBLAS's with m * n * k."""
    table = DtypeTable((_kernel("big", 128),), (_rule((4096, 4096, 4096), [("big", 1.0)], cublas_ms=1.05),),
                       H200.sms)
    longer = table.pick(4096, 4096, 4224)  # k-tiles 132 for 128: both grow by 1/32
    assert not longer.cublas and longer.kernel_ms == pytest.approx(132 / 128)
    assert longer.cublas_ms == pytest.approx(1.05 * 4224 / 4096)
    fuller = table.pick(4224, 4096, 4096)  # 33 x 32 = 1056 blocks: still 8 turns, cuBLAS 3% slower
    assert not fuller.cublas and fuller.kernel_ms == pytest.approx(1.0)
    stepped = table.pick(4352, 4096, 4096)  # 34 x 32 = 1088 blocks: a 9th turn for 6% more work
    assert stepped.cublas and stepped.kernel_ms == pytest.approx(9 / 8)
    assert stepped.cublas_ms == pytest.approx(1.05 * 4352 / 4096)
    emptier = table.pick(3850, 4096, 4096)  # 31 x 32 = 992 blocks: still 8 turns for 6% less work
    assert emptier.cublas and emptier.kernel_ms == pytest.approx(1.0)


def _two_rule_table() -> DtypeTable:
    """Tile 16 on 4 SMs: at 64^3 the kernel is slower than cuBLAS, at 128^3 faster."""
    rules = (_rule((64, 64, 64), [("t16", 0.010)], cublas_ms=0.008),
             _rule((128, 128, 128), [("t16", 0.05)], cublas_ms=0.08))
    return DtypeTable((_kernel("t16", 16, bk=16),), rules, sms=4)


def test_old_table_files_read_and_pick_cublas_by_the_same_rule(tmp_path):
    table = KernelTable(arch="sm_90", gpu="h200", measured_on=("NVIDIA H200",), dtypes={"f32": _two_rule_table()})
    path = tmp_path / "v2.json"
    table.write(path, with_cubins=False)
    data = json.loads(path.read_text())
    assert data["schema_version"] == 2 and data["selection"] == SELECTION_RULE
    assert read_table(path).dtypes["f32"].pick(64, 64, 64).cublas
    for dtype in data["dtypes"].values():  # as version 1 wrote it: one time per rule, no SM count, no k-tiles
        dtype.pop("sms")
        for rule in dtype["rules"]:
            rule.pop("times")
        for kernel in dtype["kernels"]:
            kernel["launch"].pop("k_tiles")
    data["schema_version"] = 1
    path.write_text(json.dumps(data))
    old = read_table(path).dtypes["f32"]
    assert [(old.pick(*s).kernel, old.pick(*s).cublas) for s in [(64, 64, 64), (128, 128, 128)]] == [
        ("t16", True), ("t16", False)]


# -- the runtime ------------------------------------------------------------------------------------


@pytest.fixture
def runtime():
    device = HostDevice()
    table = KernelTable(arch="sm_90", gpu="h200", measured_on=("NVIDIA H200",), dtypes={"f32": _two_rule_table()})
    return Runtime(device, (table, "test table")), device


def _matrices(m, n, k):
    return RNG.standard_normal((m, k)).astype(numpy.float32), RNG.standard_normal((k, n)).astype(numpy.float32)


def test_the_runtime_runs_cublas_where_the_table_picks_it_and_explain_gives_both_predicted_times(runtime):
    rt, device = runtime
    a, b = _matrices(64, 64, 64)
    assert numpy.allclose(rt.gemm(a, b), a @ b, rtol=1e-5, atol=1e-4)
    assert device.calls == [("cublas",)]
    decision = rt.explain(a, b)
    assert decision.uses_cublas and decision.kernel is None and decision.pick.cublas
    assert decision.rule.shape == (64, 64, 64) and decision.pick.kernel == "t16"
    assert str(decision) == (
        "f32 64x64x64: cuBLAS, because the table picks it: the tuned kernel k1 is predicted 0.800x cuBLAS at this "
        "shape (k1 is t16; tuned at this shape: 0.01 ms against cuBLAS's 0.008 ms on NVIDIA H200) (tuned on NVIDIA H200, from test table)")

    a, b = _matrices(60, 64, 64)  # nearest 64^3: the same 4 x 4 blocks, cuBLAS's time scaled by 60/64
    rt.gemm(a, b)
    assert device.calls[-1] == ("cublas",)
    text = str(rt.explain(a, b))
    assert "the tuned kernel k1 is predicted 0.750x cuBLAS at this shape" in text
    assert "0.01 ms against 0.0075 ms, carried from the nearest tuned shape 64x64x64" in text


def test_the_runtime_runs_the_kernel_where_it_is_predicted_faster_and_says_by_how_much(runtime):
    rt, device = runtime
    a, b = _matrices(120, 128, 128)  # nearest 128^3: the same 8 x 8 blocks, cuBLAS's time scaled by 120/128
    assert numpy.allclose(rt.gemm(a, b), a @ b, rtol=1e-5, atol=1e-4)
    assert device.calls == [("kernel", "t16", (8, 8, 1))]
    decision = rt.explain(a, b)
    assert not decision.uses_cublas and not decision.pick.cublas
    assert "predicted 1.500x cuBLAS here" in str(decision) and "0.05 ms there on NVIDIA H200, 1.600x cuBLAS" in str(
        decision)


def test_with_beta_not_0_a_kernel_that_reads_c_slowly_gives_way_to_cublas_and_others_run(runtime):
    rt, device = runtime
    a, b = _matrices(120, 128, 128)  # the tuned kernel's shape (above)
    c = RNG.standard_normal((120, 128)).astype(numpy.float32)
    expected = a @ b + 0.5 * c
    assert numpy.allclose(rt.gemm(a, b, out=c, beta=0.5), expected, rtol=1e-5, atol=1e-4)
    assert device.calls == [("kernel", "t16", (8, 8, 1))]  # an sgemm kernel: the table's pick stands

    table = rt.choice.table
    dtype = table.dtypes["f32"]
    slow = dataclasses.replace(dtype, kernels=tuple(dataclasses.replace(k, family="hgemm_wgmma") for k in dtype.kernels))
    rt2 = Runtime(device, (dataclasses.replace(table, dtypes={"f32": slow}), "test table"))
    device.calls.clear()
    c = RNG.standard_normal((120, 128)).astype(numpy.float32)
    rt2.gemm(a, b, out=c)  # beta 0: the kernel; then beta 0.5 on the same operands: cuBLAS, not the route kept
    rt2.gemm(a, b, out=c, beta=0.5)
    rt2.gemm(a, b, out=c)
    assert device.calls == [("kernel", "t16", (8, 8, 1)), ("cublas",), ("kernel", "t16", (8, 8, 1))]
    decision = rt2.explain(a, b, c, beta=0.5)
    assert decision.uses_cublas and decision.pick is not None and not decision.pick.cublas
    assert str(decision).startswith("f32 120x128x128: cuBLAS, because beta is not 0: hgemm_wgmma kernels read C far "
                                    "slower than cuBLAS, and the table's times are of beta 0")
    assert not rt2.explain(a, b, c).uses_cublas


# -- the held-out report and `autotune table` ----------------------------------------------------------


def test_the_held_out_report_times_a_cublas_pick_at_cublas_time_there():
    table = _two_rule_table()
    measured = {
        (64, 64, 64): Measured(GemmProblem(64, 64, 64), {"t16": 0.010}, {"t16": "NVIDIA H200"}, "t16", 0.008),
        (128, 128, 128): Measured(GemmProblem(128, 128, 128), {"t16": 0.05}, {"t16": "NVIDIA H200"}, "t16", 0.08),
        (60, 64, 64): Measured(GemmProblem(60, 64, 64), {"t16": 0.011}, {"t16": "NVIDIA H200"}, "t16", 0.009),
        (120, 128, 128): Measured(GemmProblem(120, 128, 128), {"t16": 0.05}, {"t16": "NVIDIA H200"}, "t16", 0.07),
    }
    selection = Selection(table, Results(measured, {}), ((64, 64, 64), (128, 128, 128)), H200, "f32")
    to_cublas, to_kernel = judge(selection, [(60, 64, 64), (120, 128, 128)])
    assert to_cublas.cublas and to_cublas.config_name == CUBLAS and to_cublas.kernel.name == "t16"
    assert (to_cublas.pick_ms, to_cublas.ratio_to_cublas) == (0.009, 1.0)
    assert to_cublas.fraction_of_best == pytest.approx(0.011 / 0.009)  # cuBLAS beat the best tuned kernel there
    assert not to_kernel.cublas and to_kernel.config_name == "t16" and to_kernel.pick_ms == 0.05
    q = quality([to_cublas, to_kernel])
    assert q.measured == 2 and q.geomean_ratio_to_cublas == pytest.approx((1.0 * 0.07 / 0.05) ** 0.5)


ENV = Environment("h200", "NVIDIA H200", "sm_90", "580", "13.0", "13.0", "14.2.0")


def _add(store, shape, config, ms):
    problem = GemmProblem(*shape)
    store.add_measurement(ENV, problem, config, "h" if config else None,
                          Measurement(Timing(ms, ms, ms, ms, ms, (ms,)), problem.tflops(ms), 0.1), "s")


def test_autotune_table_shows_the_rules_and_held_out_picks_that_go_to_cublas(tmp_path, capsys):
    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    config = load_space("sgemm").seeds[0]
    _add(store, (1024, 1024, 1024), config, 1.0)
    _add(store, (1024, 1024, 1024), None, 0.9)  # cuBLAS faster: the rule goes to cuBLAS
    _add(store, (4096, 4096, 4096), config, 40.0)
    _add(store, (4096, 4096, 4096), None, 45.0)
    _add(store, (1100, 1024, 1024), config, 1.3)  # held out, nearest 1024^3: cuBLAS
    _add(store, (1100, 1024, 1024), None, 1.1)
    _add(store, (3900, 4096, 4096), config, 39.0)  # held out, nearest 4096^3: the kernel
    _add(store, (3900, 4096, 4096), None, 42.0)
    held = tmp_path / "held.txt"
    held.write_text("1100x1024x1024\n3900x4096x4096\n")
    arguments = ["table", "--gpu", "h200", "--db", store.url, "--hold-out", str(held)]

    assert main([*arguments, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(r["shape"], r["cublas"]) for r in data["rules"]] == [("1024x1024x1024", True), ("4096x4096x4096", False)]
    assert data["cublas_rules"] == 1 and data["selection"] == SELECTION_RULE
    shapes = data["held_out"]["shapes"]
    assert [(h["pick"], h["kernel"], h["cublas"], h["pick_ms"]) for h in shapes] == [
        (CUBLAS, CUBLAS, True, 1.1), (config.name, "k1", False, 39.0)]
    assert data["held_out"]["quality"]["worst_ratio_to_cublas"] == 1.0

    assert main(arguments) == 0
    text = capsys.readouterr().out
    assert "(1 of 2 rules go to cuBLAS)" in text
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line[:1].isdigit()}
    assert rows["1024x1024x1024"][-1] == "cuBLAS" and rows["4096x4096x4096"][-1] == "k1"  # the rules' "runs"
    assert "cuBLAS" in rows["1100x1024x1024"] and "k1" in rows["3900x4096x4096"]  # the held-out picks


# -- the exported C library --------------------------------------------------------------------------

needs_compilers = pytest.mark.skipif(
    shutil.which("cmake") is None or shutil.which("cc") is None or shutil.which("c++") is None,
    reason="needs cmake and a C and C++ compiler (cc, c++)")

DEVICE0 = 0x7F0000000000  # tests/data/fake_libcuda.c: device 0's memory
A, B, C = DEVICE0 + 0x1000, DEVICE0 + 0x40000000, DEVICE0 + 0x80000000
STREAM = 0x5000
SUCCESS, INVALID_VALUE, UNSUPPORTED, CUDA_ERROR = 0, 1, 2, 6
OP_N, OP_T = 0, 1
FUNCTIONS = {"f32": "autotune_sgemm", "f16": "autotune_hgemm", "bf16": "autotune_bgemm"}
EX_FUNCTIONS = {"f32": "autotune_sgemm_ex", "f16": "autotune_hgemm_ex", "bf16": "autotune_bgemm_ex"}
GEMMS = {"f32": "cublasSgemm_v2", "f16": "cublasGemmEx", "bf16": "cublasGemmEx"}
GEMM_EX_TYPES = {"f16": 2, "bf16": 14}  # cudaDataType: CUDA_R_16F, CUDA_R_16BF
CUBLAS_CALLS = ("cublasCreate_v2", "cublasSetStream_v2", "cublasSgemm_v2", "cublasGemmEx")


def _empty_elf() -> bytes:
    """The smallest 64-bit ELF a cubin reader takes: one empty string table. The library only embeds it, and
    the stand-in driver only checks its magic, so no kernel need be compiled."""
    header = bytearray(64)
    header[:7] = b"\x7fELF\x02\x01\x01"
    struct.pack_into("<Q", header, 0x28, 64)  # the section headers follow the file header
    struct.pack_into("<HHH", header, 0x3A, 64, 1, 0)
    return bytes(header) + struct.pack("<IIQQQQIIQQ", 0, 3, 0, 0, 128, 1, 0, 0, 1, 0) + b"\0"


def _seed(family: str, **knobs: int) -> dict[str, int]:
    return next(s.as_dict() for s in load_space(family).seeds if all(s.as_dict()[k] == v for k, v in knobs.items()))


@functools.lru_cache(maxsize=1)
def _library_table() -> KernelTable:
    """f32, f16 and bf16 kernels of the shipped families (one built for whole tiles, TMA ones) on LLM-like and square
    rules, cuBLAS from 25% faster to 25% slower than the rule's kernel, or not measured; cuBLAS's times carried by
    the H200's roofline (f32, f16) or by m * n * k (bf16)."""
    gpu = spec_for_arch("sm_90", "h200")
    rng = random.Random(5)
    factors = [0.75, 0.9, 0.97, 1.0, 1.03, 1.1, 1.25, None]

    def dtype_table(kernels, shapes, ridge):
        twins = {k.any_shape for k in kernels}  # builds for any shape: launched, never measured at a rule
        rules = []
        for i, shape in enumerate(shapes):
            names = rng.sample([k.name for k in kernels if k.name not in twins], k=2)
            times = [(name, round(rng.uniform(0.5, 2.0), 4) * shape[0] * shape[1] * shape[2] / 2**36) for name in names]
            fastest = min(ms for _, ms in times)
            factor = factors[i % len(factors)]
            rules.append(_rule(shape, times, None if factor is None else fastest * factor))
        return DtypeTable(tuple(kernels), tuple(rules), gpu.sms, ridge)

    whole = table_kernel("sgemm", {**_seed("sgemm", BM=128, BN=128, BK=8, PREFETCH=0, CP_ASYNC=0), "WHOLE_TILES": 1},
                         gpu)
    f32 = with_builds_for_any_shape({k.name: k for k in (
        whole, table_kernel("sgemm", _seed("sgemm", BM=64, BN=64, TM=4), gpu),
        table_kernel("sgemm", _seed("sgemm", SMEM_OPT_IN=1), gpu))}, gpu)
    f16 = [table_kernel("hgemm_wgmma", _seed("hgemm_wgmma", WG_M=1, PRODUCER=0, SPLIT_K=1), gpu),
           table_kernel("hgemm_wgmma", _seed("hgemm_wgmma", TMA=1, CLUSTER_N=1, CLUSTER_M=1), gpu)]
    bf16 = [table_kernel("hgemm_wgmma", _seed("hgemm_wgmma", WG_M=1, PRODUCER=0, SPLIT_K=1), gpu, "bf16"),
            table_kernel("hgemm_mma", load_space("hgemm_mma").seeds[0].as_dict(), gpu, "bf16")]
    llm = [(m, n, k) for n, k in ((4096, 4096), (14336, 4096), (4096, 14336)) for m in (1, 16, 128, 1024, 4096)]
    squares = [(s, s, s) for s in (256, 1024, 2048, 4096, 8192)]
    table = KernelTable(arch="sm_90", gpu="h200", measured_on=("NVIDIA H200",), created_at="2026-12-01", source="tests",
                        dtypes={"f32": dtype_table(list(f32.values()), llm + squares, gpu.flops_per_element("f32")),
                                "f16": dtype_table(f16, squares + llm[::2], gpu.flops_per_element("f16")),
                                "bf16": dtype_table(bf16, squares[1::2] + llm[1::2], 0.0)})  # by m * n * k
    cubin = _empty_elf()
    return dataclasses.replace(table, dtypes={
        name: dataclasses.replace(dtype, kernels=tuple(dataclasses.replace(k, cubin=cubin) for k in dtype.kernels))
        for name, dtype in table.dtypes.items()})


def _run(*command, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{' '.join(map(str, command))} failed:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The table, its library's folder and its shared build (every warning an error, no cuBLAS headers)."""
    root = tmp_path_factory.mktemp("dispatch_library")
    table = _library_table()
    write_library(table, root / "lib")
    _run("cmake", "-S", root / "lib", "-B", root / "build", "-DBUILD_SHARED_LIBS=ON",
         "-DAUTOTUNE_GEMM_BUILD_EXAMPLE=OFF", "-DCMAKE_C_FLAGS=-Wall -Wextra -Wpedantic -Werror")
    _run("cmake", "--build", root / "build", "-j2")
    return table, root / "lib", root / "build" / "libautotune_gemm.so"


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory) -> tuple[Path, Path]:
    """A folder with the stand-in libcuda.so.1, and the stand-in libcublas."""
    folder = tmp_path_factory.mktemp("stand_ins")
    _run("cc", "-shared", "-fPIC", "-O1", "-o", folder / "libcuda.so.1", DATA / "fake_libcuda.c")
    _run("cc", "-shared", "-fPIC", "-O1", "-o", folder / "libfakecublas.so", DATA / "fake_libcublas.c")
    return folder, folder / "libfakecublas.so"


def _shapes() -> list[tuple[int, int, int]]:
    """The rules' shapes, each a little off them, and shapes spread over every size."""
    rng = random.Random(3)
    table = _library_table()
    shapes = []
    for dtype in table.dtypes.values():
        for rule in dtype.rules:
            shapes.append(rule.shape)
            shapes += [(max(1, rule.m + d), rule.n, rule.k) for d in (-7, 9, rule.m // 8 + 1)]
            shapes += [(rule.m, rule.n + 64, rule.k), (rule.m, rule.n, rule.k - 100)]
    shapes += [tuple(int(2 ** rng.uniform(0, 15)) for _ in range(3)) for _ in range(400)]
    return shapes


_KERNEL_FOR = textwrap.dedent("""\
    import ctypes, json, sys
    lib = ctypes.CDLL(sys.argv[1])
    lib.autotune_kernel_for.restype = ctypes.c_char_p
    lib.autotune_kernel_for.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    print(json.dumps({dtype: [lib.autotune_kernel_for(dtype.encode(), *shape).decode() for shape in shapes]
                      for dtype, shapes in json.loads(sys.argv[2]).items()}))
    """)


def _kernel_for(library: Path, shapes: dict, **env) -> dict[str, list[str]]:
    """What ``autotune_kernel_for`` answers for each dtype's shapes, in a process with ``env``."""
    result = _run(sys.executable, "-c", _KERNEL_FOR, library, json.dumps(shapes), env={**os.environ, **env})
    return json.loads(result.stdout)


def _to_cublas(dtype_table: DtypeTable, shape: tuple[int, int, int], beta: float = 0.0) -> bool:
    """Whether a call runs cuBLAS where it loads: the table picks it, the shape is outside the tuned range, or beta
    is not 0 and the kernel reads C slowly (autotune.runtime.dispatch.decide)."""
    pick = dtype_table.pick(*shape)
    slow = beta != 0 and pick.kernel is not None and dtype_table.kernel(pick.kernel).reads_c_slowly
    return pick.cublas or dtype_table.outside(*shape) is not None or slow


@needs_compilers
def test_the_library_renders_the_python_pick_with_cublas_and_falls_back_to_the_kernel_without_it(exported, stand_ins):
    table, _, library = exported
    shapes = _shapes()
    asked = {dtype: shapes for dtype in table.dtypes}
    with_cublas = _kernel_for(library, asked, AUTOTUNE_GEMM_CUBLAS=str(stand_ins[1]))
    off = _kernel_for(library, asked, AUTOTUNE_GEMM_CUBLAS="off")
    missing = _kernel_for(library, asked, AUTOTUNE_GEMM_CUBLAS=str(stand_ins[0] / "libcublas.so.404"))
    for dtype, dtype_table in table.dtypes.items():
        picks = [dtype_table.pick(*shape) for shape in shapes]
        assert with_cublas[dtype] == [CUBLAS if _to_cublas(dtype_table, s) else p.kernel
                                      for p, s in zip(picks, shapes)], dtype
        assert off[dtype] == missing[dtype] == [p.kernel for p in picks], dtype
        outside = [p for p, s in zip(picks, shapes) if dtype_table.outside(*s)]
        assert outside and all(p.cublas and p.far for p in outside), dtype  # beyond 2x of every tuned shape
        assert any(p.cut and not (p.far or p.unserved) for p in picks), dtype  # N or K cuts tiles whole at the rule
        ruled = {rule.shape for rule in dtype_table.rules}
        kinds = {(p.cublas, p.rule.shape == shape) for p, shape in zip(picks, shapes)}
        assert kinds == {(True, True), (True, False), (False, True), (False, False)}, dtype  # on and off the rules
        assert any(p.cublas != dtype_table.goes_to_cublas(p.rule) for p in picks), dtype  # picks that flip off them
        assert ruled <= set(shapes)


@needs_compilers
def test_the_library_loads_cublas_at_run_time_with_no_headers_and_no_link_dependency(exported):
    table, folder, library = exported
    sources = "\n".join(path.read_text() for path in (folder / "src").iterdir())
    assert "cublasSgemm_v2" in sources and "#include <cublas" not in sources and '#include "cublas_' not in sources
    cmake = (folder / "CMakeLists.txt").read_text()
    assert "cublas" not in cmake.replace("src/cublas.c", "").lower()
    if shutil.which("readelf"):
        needed = _run("readelf", "-d", library).stdout
        assert "libc.so" in needed and "libcuda" not in needed and "cublas" not in needed
    header = (folder / "include" / "autotune_gemm.h").read_text()
    assert '#define AUTOTUNE_GEMM_CUBLAS_NAME "cublas"' in header and "AUTOTUNE_GEMM_CUBLAS" in header
    readme = (folder / "README.md").read_text()
    assert "AUTOTUNE_GEMM_CUBLAS=off" in readme and "libcublas.so.13" in readme
    cublas_rule = next(r for r in table.dtypes["f32"].rules if table.dtypes["f32"].goes_to_cublas(r))
    assert f"{cublas_rule.m}x{cublas_rule.n}x{cublas_rule.k}: cuBLAS (else `{cublas_rule.kernel}`)" in readme
    for dtype, dtype_table in table.dtypes.items():  # the tuned range, outside which calls run cuBLAS
        (m_low, m_high), (n_low, n_high), (k_low, k_high) = dtype_table.served_sizes().values()
        assert f"{dtype} m {m_low}..{m_high}, n {n_low}..{n_high}, k {k_low}..{k_high}" in readme
    assert "typedef enum autotune_op" in header and "AUTOTUNE_GEMM_API autotune_status autotune_hgemm_ex(" in header
    assert "autotune_kernel_for_ex(" in header and "lda = 3: expected lda >= k = 8" in header
    assert "autotune_sgemm_ex(AUTOTUNE_OP_N, AUTOTUNE_OP_T, m, n, k, 1.0f, x, k, W, k, 0.0f, y, n, stream);" in readme


_CALLER = textwrap.dedent("""\
    import ctypes, json, sys
    lib = ctypes.CDLL(sys.argv[1])
    lib.autotune_last_error.restype = ctypes.c_char_p
    lib.autotune_kernel_for_ex.restype = ctypes.c_char_p
    i, f, p = ctypes.c_int, ctypes.c_float, ctypes.c_void_p
    signatures = {"gemm": [i] * 3 + [f, p, p, f, p, p], "gemm_ex": [i] * 5 + [f, p, i, p, i, f, p, i, p],
                  "kernel_for_ex": [ctypes.c_char_p] + [i] * 8}
    results = []
    for number, (function, *call) in enumerate(json.loads(sys.argv[2])):
        with open(sys.argv[3], "a") as log:
            log.write(f"call {number}\\n")
        kind = ("kernel_for_ex" if function == "autotune_kernel_for_ex" else
                "gemm_ex" if function.endswith("_ex") else "gemm")
        getattr(lib, function).argtypes = signatures[kind]
        if kind == "kernel_for_ex":
            call[0] = call[0].encode()
        answer = getattr(lib, function)(*call)
        results.append([answer.decode() if isinstance(answer, bytes) else answer,
                        lib.autotune_last_error().decode()])
    print(json.dumps(results))
    """)


def _calls(library: Path, stand_ins: tuple[Path, Path], tmp_path: Path, calls, **env):
    """Each call's status and message, and the lines the stand-in driver and cuBLAS logged during it."""
    log = tmp_path / "calls.log"
    log.unlink(missing_ok=True)
    environment = {**os.environ, "LD_LIBRARY_PATH": str(stand_ins[0]), "FAKE_CUDA_LOG": str(log),
                   "AUTOTUNE_GEMM_CUBLAS": str(stand_ins[1]), **env}
    result = _run(sys.executable, "-c", _CALLER, library, json.dumps(calls), log, env=environment)
    per_call: list[list[str]] = []
    for line in log.read_text().splitlines():
        if line.startswith("call "):
            per_call.append([])
        elif per_call:
            per_call[-1].append(line)
    return json.loads(result.stdout), per_call


def _picked_shapes(table: KernelTable, dtype: str, cublas: bool, count: int) -> list[tuple[int, int, int]]:
    """``count`` shapes (near the rules) where a call runs cuBLAS, or where it runs the kernel."""
    return [s for s in _shapes() if _to_cublas(table.dtypes[dtype], s) == cublas][:count]


@needs_compilers
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_calls_run_cublas_where_the_table_picks_it_with_row_major_operands_swapped(exported, stand_ins, tmp_path,
                                                                                     dtype):
    table, _, library = exported
    to_cublas = _picked_shapes(table, dtype, True, 3)
    to_kernel = _picked_shapes(table, dtype, False, 2)
    shapes = [to_cublas[0], to_kernel[0], to_cublas[1], to_kernel[1], to_cublas[2]]
    calls = [[FUNCTIONS[dtype], m, n, k, 1.5, A, B, -0.5, C, STREAM] for m, n, k in shapes]
    results, logged = _calls(library, stand_ins, tmp_path, calls)
    assert results == [[SUCCESS, ""]] * len(calls)
    creates = [line for lines in logged for line in lines if line.startswith("cublasCreate_v2")]
    assert creates == ["cublasCreate_v2 status 0"]  # one handle for the context
    modes = [line for lines in logged for line in lines if line.startswith("cublasSetMathMode")]
    assert modes == ["cublasSetMathMode handle 256 mode 16"]  # its fp16 and bf16 partial sums reduced in fp32
    for (m, n, k), lines in zip(shapes, logged):
        pick = table.dtypes[dtype].pick(m, n, k)
        launches = [line for line in lines if line.startswith("cuLaunchKernel")]
        gemms = [line for line in lines if line.startswith(("cublasSgemm_v2", "cublasGemmEx"))]
        if not _to_cublas(table.dtypes[dtype], (m, n, k), beta=-0.5):
            assert len(launches) == 1 and gemms == [], (m, n, k)
            assert launches[0].startswith(f"cuLaunchKernel {table.dtypes[dtype].kernel(pick.kernel).launch.entry} ")
            assert not any(line.startswith(CUBLAS_CALLS) for line in lines)
            continue
        assert launches == [], (m, n, k)
        assert f"cublasSetStream_v2 handle 256 stream {STREAM}" in lines
        # row-major C = A B is column-major C^T = B^T A^T: B first, m and n swapped, each ld its row length
        if dtype == "f32":
            assert gemms == [f"cublasSgemm_v2 handle 256 op 0 0 m {n} n {m} k {k} alpha 1.5 A {B} lda {n} B {A} "
                             f"ldb {k} beta -0.5 C {C} ldc {n}"]
        else:
            kind = GEMM_EX_TYPES[dtype]
            assert gemms == [f"cublasGemmEx handle 256 op 0 0 m {n} n {m} k {k} alpha 1.5 A {B} type {kind} lda {n} "
                             f"B {A} type {kind} ldb {k} beta -0.5 C {C} type {kind} ldc {n} compute 68 algo -1"]
        assert lines.index(gemms[0]) > lines.index(f"cublasSetStream_v2 handle 256 stream {STREAM}")


@needs_compilers
def test_a_call_with_beta_runs_cublas_where_the_kernel_reads_c_slowly_and_the_kernel_without_cublas(
        exported, stand_ins, tmp_path):
    table, _, library = exported
    (m, n, k), = _picked_shapes(table, "f16", False, 1)
    kernel = table.dtypes["f16"].kernel(table.dtypes["f16"].pick(m, n, k).kernel)
    assert kernel.reads_c_slowly  # an hgemm_wgmma kernel
    calls = [["autotune_hgemm", m, n, k, 1.0, A, B, beta, C, STREAM] for beta in (0.0, 0.5)]
    results, logged = _calls(library, stand_ins, tmp_path, calls)
    assert results == [[SUCCESS, ""]] * 2
    assert any(line.startswith(f"cuLaunchKernel {kernel.launch.entry} ") for line in logged[0])
    assert not any(line.startswith("cuLaunchKernel") for line in logged[1])
    assert any(line.startswith("cublasGemmEx") and " beta 0.5 " in line for line in logged[1])
    results, logged = _calls(library, stand_ins, tmp_path, calls[1:], AUTOTUNE_GEMM_CUBLAS="off")
    assert results == [[SUCCESS, ""]]
    assert any(line.startswith(f"cuLaunchKernel {kernel.launch.entry} ") for line in logged[0])


@needs_compilers
def test_without_a_cublas_handle_calls_launch_the_kernel_and_a_refused_gemm_is_a_cuda_error(exported, stand_ins,
                                                                                           tmp_path):
    table, _, library = exported
    (m, n, k), = _picked_shapes(table, "f32", True, 1)
    kernel = table.dtypes["f32"].kernel(table.dtypes["f32"].pick(m, n, k).kernel)
    calls = [["autotune_sgemm", m, n, k, 1.0, A, B, 0.0, C, None]] * 2
    results, logged = _calls(library, stand_ins, tmp_path, calls, FAKE_CUBLAS_CREATE_STATUS="1")
    assert results == [[SUCCESS, ""]] * 2
    assert [line for line in logged[0] if line.startswith("cublas")] == ["cublasCreate_v2 status 1"]
    assert not any(line.startswith("cublas") for line in logged[1])  # tried once per context
    assert all(any(line.startswith(f"cuLaunchKernel {kernel.launch.entry} ") for line in lines) for lines in logged)

    results, logged = _calls(library, stand_ins, tmp_path, calls[:1], FAKE_CUBLAS_GEMM_STATUS="13")
    status, message = results[0]
    assert status == CUDA_ERROR and "\n" not in message
    assert message == (f"cublasSgemm_v2 of {stand_ins[1]} for {m} x {n} x {k} failed: "
                       "CUBLAS_STATUS_EXECUTION_FAILED 13")
    assert not any(line.startswith("cuLaunchKernel") for line in logged[0])

    results, logged = _calls(library, stand_ins, tmp_path, calls[:1], AUTOTUNE_GEMM_CUBLAS="off")
    assert results == [[SUCCESS, ""]] and not any(line.startswith("cublas") for line in logged[0])
    assert any(line.startswith(f"cuLaunchKernel {kernel.launch.entry} ") for line in logged[0])


@needs_compilers
def test_outside_the_tuned_range_calls_run_cublas_where_it_loads_else_the_kernel(exported, stand_ins, tmp_path):
    table, _, library = exported
    f32 = table.dtypes["f32"]
    shape = next(s for s in _shapes() if f32.outside(*s))
    kernel = f32.kernel(f32.pick(*shape).kernel)
    calls = [["autotune_sgemm", *shape, 1.0, A, B, 0.0, C, STREAM]]
    results, logged = _calls(library, stand_ins, tmp_path, calls)
    assert results == [[SUCCESS, ""]]
    assert [line for line in logged[0] if line.startswith(("cublasSgemm_v2", "cuLaunchKernel"))] == [
        f"cublasSgemm_v2 handle 256 op 0 0 m {shape[1]} n {shape[0]} k {shape[2]} alpha 1 A {B} lda {shape[1]} "
        f"B {A} ldb {shape[2]} beta 0 C {C} ldc {shape[1]}"]
    results, logged = _calls(library, stand_ins, tmp_path, calls, AUTOTUNE_GEMM_CUBLAS="off")
    assert results == [[SUCCESS, ""]]
    assert [line.split()[1] for line in logged[0] if line.startswith("cuLaunchKernel")] == [kernel.launch.entry]
    assert not any(line.startswith("cublas") for line in logged[0])


# -- the _ex functions: transposes and leading dimensions --------------------------------------------------

# transa, transb and how much each leading dimension exceeds its operand's row length (lda, ldb, ldc)
LAYOUTS = [(ta, tb, pads) for ta in (OP_N, OP_T) for tb in (OP_N, OP_T) for pads in ((0, 0, 0), (2, 3, 4))] + [
    (OP_N, OP_N, (0, 0, 4)), (OP_N, OP_N, (1, 0, 0)), (OP_N, OP_N, (0, 5, 0)), (OP_N, OP_T, (0, 0, 4)),
    (OP_T, OP_N, (0, 3, 0))]
GEMM_LINE = re.compile(r"(cublasSgemm_v2|cublasGemmEx) handle \d+ op (\d) (\d) m (\d+) n (\d+) k (\d+) alpha (\S+) "
                       r"A (\d+)(?: type \d+)? lda (\d+) B (\d+)(?: type \d+)? ldb (\d+) beta (\S+) "
                       r"C (\d+)(?: type \d+)? ldc (\d+)")


def _leading_dimensions(transa: int, transb: int, m: int, n: int, k: int, pads=(0, 0, 0)) -> tuple[int, int, int]:
    """lda, ldb and ldc: each operand's stored row length (A m x k or k x m, B k x n or n x k, C m x n), padded."""
    return (m if transa else k) + pads[0], (k if transb else n) + pads[1], n + pads[2]


def _ex_call(dtype, transa, transb, m, n, k, lda, ldb, ldc, alpha=1.5, beta=-0.5, a=A, b=B, c=C) -> list:
    return [EX_FUNCTIONS[dtype], transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, STREAM]


def _rows(rows: int, columns: int, ld: int) -> numpy.ndarray:
    """Where each element of a row-major rows x columns matrix with rows ld apart lies."""
    i, j = numpy.ogrid[:rows, :columns]
    return i * ld + j


def _columns(rows: int, columns: int, ld: int) -> numpy.ndarray:
    """Where each element of a column-major rows x columns matrix with columns ld apart lies."""
    i, j = numpy.ogrid[:rows, :columns]
    return i + j * ld


def _run_as_cublas(line: str, memory: dict[int, numpy.ndarray]) -> numpy.ndarray:
    """C's memory after the logged cuBLAS GEMM, computed with cuBLAS's (column-major) meaning of its
    arguments on ``memory`` (address -> elements)."""
    _, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc = GEMM_LINE.match(line).groups()
    ta, tb, m, n, k, lda, ldb, ldc = map(int, (ta, tb, m, n, k, lda, ldb, ldc))
    op_a = memory[int(a)][_columns(k, m, lda)].T if ta else memory[int(a)][_columns(m, k, lda)]
    op_b = memory[int(b)][_columns(n, k, ldb)].T if tb else memory[int(b)][_columns(k, n, ldb)]
    out = memory[int(c)].copy()
    where = _columns(m, n, ldc)
    out[where] = float(alpha) * op_a @ op_b + float(beta) * out[where]
    return out


def _row_major_gemm(transa, transb, m, n, k, lda, ldb, ldc, alpha, beta, memory) -> numpy.ndarray:
    """C's memory after C = alpha * op(A) op(B) + beta * C as the _ex functions define it (row-major)."""
    op_a = memory[A][_rows(k, m, lda)].T if transa else memory[A][_rows(m, k, lda)]
    op_b = memory[B][_rows(n, k, ldb)].T if transb else memory[B][_rows(k, n, ldb)]
    out = memory[C].copy()
    where = _rows(m, n, ldc)
    out[where] = alpha * op_a @ op_b + beta * out[where]
    return out


@needs_compilers
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_each_ex_layout_is_the_cublas_gemm_of_the_transposed_product(exported, stand_ins, tmp_path, dtype):
    """Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS gets B first with transb and
    ldb, then A with transa and lda, m and n swapped; checked both as the logged arguments and by running
    them with cuBLAS's meaning on random memory against the row-major product."""
    table, _, library = exported
    m, n, k = 5, 7, 3  # outside the tuned range: the kernels' layout runs cuBLAS too, as autotune_sgemm does
    assert table.dtypes[dtype].outside(m, n, k)
    cases = [(ta, tb, _leading_dimensions(ta, tb, m, n, k, pads)) for ta, tb, pads in LAYOUTS]
    calls = [_ex_call(dtype, ta, tb, m, n, k, *lds) for ta, tb, lds in cases]
    calls.append([FUNCTIONS[dtype], m, n, k, 1.5, A, B, -0.5, C, STREAM])
    results, logged = _calls(library, stand_ins, tmp_path, calls)
    assert results == [[SUCCESS, ""]] * len(calls)
    gemms = [[line for line in lines if line.startswith(GEMMS[dtype])] for lines in logged]
    assert all(not any(line.startswith("cuLaunchKernel") for line in lines) for lines in logged)
    rng = numpy.random.default_rng(7)
    for (ta, tb, (lda, ldb, ldc)), lines in zip(cases, gemms):
        kind = f" type {GEMM_EX_TYPES[dtype]}" if dtype in GEMM_EX_TYPES else ""
        fields = (f"op {tb} {ta} m {n} n {m} k {k} alpha 1.5 A {B}{kind} lda {ldb} B {A}{kind} ldb {lda} beta -0.5 "
                  f"C {C}{kind} ldc {ldc}")
        tail = " compute 68 algo -1" if dtype in GEMM_EX_TYPES else ""
        assert lines == [f"{GEMMS[dtype]} handle 256 {fields}{tail}"], (ta, tb, lda, ldb, ldc)
        memory = {address: rng.standard_normal(256) for address in (A, B, C)}
        expected = _row_major_gemm(ta, tb, m, n, k, lda, ldb, ldc, 1.5, -0.5, memory)
        numpy.testing.assert_allclose(_run_as_cublas(lines[0], memory), expected, rtol=1e-12, atol=1e-12)
    assert gemms[cases.index((OP_N, OP_N, (k, n, n)))] == gemms[-1]  # what autotune_sgemm (hgemm) runs there


@needs_compilers
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_the_kernels_layout_goes_the_way_of_the_plain_function(exported, stand_ins, tmp_path, dtype):
    """transa = transb = N with lda = k, ldb = n, ldc = n: the same driver and cuBLAS calls as autotune_sgemm
    (autotune_hgemm) makes, the kernel's launch included, where it runs the kernel and where cuBLAS."""
    table, _, library = exported
    shapes = _picked_shapes(table, dtype, False, 3) + _picked_shapes(table, dtype, True, 2)
    calls = []
    for m, n, k in shapes:
        plain = [FUNCTIONS[dtype], m, n, k, 0.75, A, B, 0.0, C, STREAM]  # beta 0: where every kernel runs
        calls += [plain, _ex_call(dtype, OP_N, OP_N, m, n, k, k, n, n, alpha=0.75, beta=0.0), plain]
    results, logged = _calls(library, stand_ins, tmp_path, calls)
    assert results == [[SUCCESS, ""]] * len(calls)
    for i, shape in enumerate(shapes):
        ex, plain = logged[3 * i + 1], logged[3 * i + 2]  # both after the first call loaded what it needed
        assert ex == plain, shape
        launches = [line for line in ex if line.startswith("cuLaunchKernel")]
        if _to_cublas(table.dtypes[dtype], shape):
            assert launches == [] and any(line.startswith(GEMMS[dtype]) for line in ex), shape
        else:
            kernel = table.dtypes[dtype].kernel(table.dtypes[dtype].pick(*shape).kernel)
            assert len(launches) == 1 and launches[0].startswith(f"cuLaunchKernel {kernel.launch.entry} "), shape


@needs_compilers
def test_a_layout_only_cublas_takes_is_unsupported_without_it_with_one_line(exported, stand_ins, tmp_path):
    table, _, library = exported
    (m, n, k), = _picked_shapes(table, "f32", False, 1)
    layout = f"transa = N, transb = T, lda = {k}, ldb = {k}, ldc = {n}"
    needs = f"{layout} needs cuBLAS (the tuned kernels take transa = transb = N with lda = k, ldb = n and ldc = n)"
    calls = [_ex_call("f32", OP_N, OP_T, m, n, k, k, k, n), _ex_call("f32", OP_N, OP_N, m, n, k, k, n, n),
             ["autotune_kernel_for_ex", "f32", OP_N, OP_T, m, n, k, k, k, n],
             ["autotune_kernel_for_ex", "f16", OP_T, OP_N, m, n, k, m, n, n + 1]]
    for env, why in [({"AUTOTUNE_GEMM_CUBLAS": "off"}, "cuBLAS is turned off (AUTOTUNE_GEMM_CUBLAS=off)"),
                     ({"AUTOTUNE_GEMM_CUBLAS": str(stand_ins[0] / "libcublas.so.404")},
                      f"AUTOTUNE_GEMM_CUBLAS={stand_ins[0] / 'libcublas.so.404'} does not load"),
                     ({"AUTOTUNE_GEMM_CUBLAS": str(stand_ins[0] / "libcuda.so.1")},
                      f"AUTOTUNE_GEMM_CUBLAS={stand_ins[0] / 'libcuda.so.1'} lacks cublasCreate_v2")]:
        results, logged = _calls(library, stand_ins, tmp_path, calls, **env)
        assert results[0] == [UNSUPPORTED, f"autotune_sgemm_ex: {needs}, and {why}"]
        assert not any(line.startswith(("cuLaunchKernel", "cublas")) for line in logged[0])
        assert results[1] == [SUCCESS, ""] and any(line.startswith("cuLaunchKernel") for line in logged[1])
        assert results[2] == [None, f"{needs}, and {why}"]
        assert results[3][0] is None and results[3][1].startswith(
            f"transa = T, transb = N, lda = {m}, ldb = {n}, ldc = {n + 1} needs cuBLAS")
    results, _ = _calls(library, stand_ins, tmp_path, calls[2:])
    assert results == [[CUBLAS, ""], [CUBLAS, ""]]


@needs_compilers
def test_cublas_failures_on_a_layout_only_it_takes_name_the_layout(exported, stand_ins, tmp_path):
    _, _, library = exported
    calls = [_ex_call("f32", OP_T, OP_T, 64, 32, 16, 64, 16, 40)] * 2
    layout = "transa = T, transb = T, lda = 64, ldb = 16, ldc = 40"
    results, logged = _calls(library, stand_ins, tmp_path, calls, FAKE_CUBLAS_CREATE_STATUS="1")
    expected = (f"autotune_sgemm_ex: {layout} needs cuBLAS (the tuned kernels take transa = transb = N with lda = k, "
                f"ldb = n and ldc = n), and cublasCreate_v2 of {stand_ins[1]} failed in this context: "
                "CUBLAS_STATUS_NOT_INITIALIZED 1")
    assert results == [[CUDA_ERROR, expected]] * 2  # tried once per context, the same answer after
    assert not any(line.startswith("cuLaunchKernel") for lines in logged for line in lines)
    results, _ = _calls(library, stand_ins, tmp_path, calls[:1], FAKE_CUBLAS_GEMM_STATUS="13")
    assert results == [[CUDA_ERROR, f"cublasSgemm_v2 of {stand_ins[1]} for 64 x 32 x 16 ({layout}) failed: "
                                    "CUBLAS_STATUS_EXECUTION_FAILED 13"]]


@needs_compilers
def test_ex_operands_need_room_for_their_strided_rows_and_no_16_byte_alignment_on_cublas(exported, stand_ins,
                                                                                          tmp_path):
    _, _, library = exported
    m, n, k = 5, 7, 3
    needed = ((m - 1) * 11 + n) * 4  # C's rows 11 apart: the last one ends 4 * 11 + 7 elements in
    room = {"FAKE_CUDA_ALLOCATION_BYTES": str(C - DEVICE0 + needed)}
    results, _ = _calls(library, stand_ins, tmp_path, [_ex_call("f32", OP_N, OP_T, m, n, k, k, k, 11)], **room)
    assert results == [[SUCCESS, ""]]
    short = {"FAKE_CUDA_ALLOCATION_BYTES": str(C - DEVICE0 + needed - 4)}
    results, _ = _calls(library, stand_ins, tmp_path, [_ex_call("f32", OP_N, OP_T, m, n, k, k, k, 11)], **short)
    assert results == [[INVALID_VALUE, f"C = {C:#x}: expected room for m x n = 5 x 7 elements with rows ldc = 11 "
                                       f"apart ({needed} bytes), its allocation holds {needed - 4} bytes from there"]]
    results, logged = _calls(library, stand_ins, tmp_path, [_ex_call("f32", OP_T, OP_N, m, n, k, m, n, n, a=A + 4)])
    assert results == [[SUCCESS, ""]]
    assert any(line.startswith("cublasSgemm_v2") and f" B {A + 4} " in line for line in logged[0])
