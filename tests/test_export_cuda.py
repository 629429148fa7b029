"""The exported C library (``autotune export --format cuda``), built and called on a machine without a GPU.

A small kernel table (seeds of sgemm and hgemm_wgmma, made-up rules, compiled
for sm_90) is written out and built with CMake: static and installed for a C
project that finds it with find_package, shared for ctypes. Launches go through
a stand-in libcuda.so.1 (tests/data/fake_libcuda.c) that logs every driver
call, so the launch path is checked against the Python launcher's contract.
cuBLAS is turned off (AUTOTUNE_GEMM_CUBLAS=off) wherever calls are made, so
every call launches a tuned kernel; tests/test_dispatch.py covers cuBLAS.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autotune.errors import InputError
from autotune.export.compile import compile_table
from autotune.export.cuda import write_library
from autotune.kernel_abi import (
    _DATA_TYPES,
    _INTERLEAVE_NONE,
    _L2_PROMOTION_256B,
    _OOB_FILL_ZEROS,
    SWIZZLES,
    TensorMapSpec,
    fits_tma,
)
from autotune.problem import GemmProblem
from autotune.select.kernel_table import DtypeTable, KernelTable, TableError, TableRule, spec_for_arch
from autotune.select.selection import table_kernel, with_builds_for_any_shape
from autotune.space.family import load_space

FAKE_DRIVER = Path(__file__).parent / "data" / "fake_libcuda.c"
EXPORT_CHECK = Path(__file__).parent.parent / "bench" / "export_check.cpp"
DEVICE0 = 0x7F0000000000  # fake_libcuda.c: device 0's memory
DEVICE1 = 0x7E0000000000  # device 1's
WORKSPACES, WORKSPACE_SPAN = 0x7D0000000000, 1 << 32  # fake_libcuda.c: the workspaces cuMemAlloc hands out, in turn
A, B, C = DEVICE0 + 0x1000, DEVICE0 + 0x40000000, DEVICE0 + 0x80000000
STREAM = 0x5000
SUCCESS, INVALID_VALUE, UNSUPPORTED, NO_DRIVER, NO_CONTEXT, WRONG_ARCH, CUDA_ERROR = range(7)
OP_N, OP_T = 0, 1
FUNCTIONS = {"f32": "autotune_sgemm", "f16": "autotune_hgemm", "bf16": "autotune_bgemm"}
EX_FUNCTIONS = {"f32": "autotune_sgemm_ex", "f16": "autotune_hgemm_ex", "bf16": "autotune_bgemm_ex"}
NO_CUBLAS = {"AUTOTUNE_GEMM_CUBLAS": "off"}
ELEMENT_BYTES = {"f32": 4, "f16": 2, "bf16": 2}
DTYPES = list(FUNCTIONS)

pytestmark = pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("cc") is None,
                                reason="needs cmake and a C compiler (cc)")


# -- the table and its builds -------------------------------------------------------------


def _seed(family: str, **knobs: int) -> dict[str, int]:
    """The first seed of ``family`` with these knob values."""
    return next(s.as_dict() for s in load_space(family).seeds if all(s.as_dict()[k] == v for k, v in knobs.items()))


def _rule(m: int, n: int, k: int, kernel, others=()) -> TableRule:
    """``kernel`` at 1 ms, fastest; each of ``others`` measured there too, 15% slower than the one before. No
    cuBLAS time: every call launches a tuned kernel (tests/test_dispatch.py covers picks of cuBLAS)."""
    times = ((kernel.name, 1.0), *((other.name, 1.0 + 0.15 * (i + 1)) for i, other in enumerate(others)))
    return TableRule(m, n, k, kernel=kernel.name, ms=1.0, cublas_ms=None, measured_on="NVIDIA H200", times=times)


def _table(with_f16: bool = True) -> KernelTable:
    gpu = spec_for_arch("sm_90", "h200")
    # s128 is built for whole tiles: shapes of partial ones get its build for any shape
    s128 = table_kernel("sgemm", {**_seed("sgemm", BM=128, BN=128, BK=8, PREFETCH=0, CP_ASYNC=0), "WHOLE_TILES": 1}, gpu)
    s64 = table_kernel("sgemm", _seed("sgemm", BM=64, BN=64, TM=4), gpu)
    s_opt_in = table_kernel("sgemm", _seed("sgemm", SMEM_OPT_IN=1), gpu)
    gemv = table_kernel("sgemm_gemv", _seed("sgemm_gemv", MAX_M=4), gpu)  # serves M <= 4 only: no build for any shape
    kernels = with_builds_for_any_shape({k.name: k for k in (s128, s64, s_opt_in, gemv)}, gpu)
    f32 = DtypeTable(tuple(kernels.values()), (
        _rule(1024, 1024, 1024, s128, [s64]), _rule(4096, 4096, 4096, s_opt_in, [s128, s64]),
        _rule(2048, 1024, 1024, s64), _rule(1024, 2048, 1024, s128, [s_opt_in, s64]), _rule(256, 256, 256, s64, [s128]),
        _rule(16, 4096, 4096, s64, [s_opt_in]), _rule(4, 4096, 4096, gemv, [s64]), _rule(2, 14336, 4096, gemv)),
        gpu.sms, gpu.flops_per_element("f32"))  # cuBLAS by a roofline
    dtypes = {"f32": f32}
    if with_f16:
        plain = table_kernel("hgemm_wgmma", _seed("hgemm_wgmma", WG_M=1, PRODUCER=0, SPLIT_K=1), gpu)
        cluster = table_kernel("hgemm_wgmma", _seed("hgemm_wgmma", TMA=1, CLUSTER_N=2), gpu)
        tma = table_kernel("hgemm_wgmma", _seed("hgemm_wgmma", TMA=1, CLUSTER_N=1, CLUSTER_M=1), gpu)
        stream_k = table_kernel("hgemm_wgmma", {**_seed("hgemm_wgmma", PERSISTENT=1, CLUSTER_M=1), "STREAM_K": 1}, gpu)
        dtypes["f16"] = DtypeTable((plain, cluster, tma, stream_k), (
            _rule(1024, 1024, 1024, plain, [tma]), _rule(4096, 4096, 4096, cluster, [plain, tma]),
            _rule(6144, 6144, 6144, stream_k, [cluster]),
            _rule(128, 14336, 4096, tma, [plain]), _rule(8192, 8192, 1024, plain)), gpu.sms, gpu.flops_per_element("f16"))
        # the same configs built for bf16: kernels of their own (names ending in _bf16)
        bf16_plain, bf16_tma = (table_kernel("hgemm_wgmma", kernel.params, gpu, "bf16") for kernel in (plain, tma))
        dtypes["bf16"] = DtypeTable((bf16_plain, bf16_tma), (
            _rule(1024, 1024, 1024, bf16_tma, [bf16_plain]), _rule(4096, 4096, 4096, bf16_plain, [bf16_tma]),
            _rule(128, 14336, 4096, bf16_tma, [bf16_plain])), gpu.sms)
        # f16 for B stored N x K (transb = T): the same configs' nt builds
        nt_plain, nt_tma = (table_kernel("hgemm_wgmma", kernel.params, gpu, "f16", "nt") for kernel in (plain, tma))
        nt = {"f16": DtypeTable((nt_tma, nt_plain), (
            _rule(1024, 1024, 1024, nt_plain, [nt_tma]), _rule(4096, 4096, 4096, nt_tma, [nt_plain]),
            _rule(128, 14336, 4096, nt_tma, [nt_plain])), gpu.sms, gpu.flops_per_element("f16"))}
    return compile_table(KernelTable(arch="sm_90", gpu="h200", measured_on=("NVIDIA H200",), dtypes=dtypes,
                                     created_at="2026-12-01T00:00:00+00:00", source="tests",
                                     other_layouts={"nt": nt} if with_f16 else {}))


def _run(*command, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{' '.join(map(str, command))} failed:\n{result.stdout}\n{result.stderr}"
    return result


def _cmake_build(source: Path, build: Path, *options: str) -> str:
    """Configure and build; the configure output."""
    configured = _run("cmake", "-S", source, "-B", build, *options)
    _run("cmake", "--build", build, "-j2")
    return configured.stdout


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AUTOTUNE_CACHE", str(tmp_path_factory.mktemp("cache")))
        return _table(), _table(with_f16=False)


@pytest.fixture(scope="module")
def table(tables) -> KernelTable:
    return tables[0]


@dataclasses.dataclass(frozen=True)
class Build:
    """A library written and built once for the module: its sources, build folder and configure output."""

    source: Path
    folder: Path
    configured: str


@pytest.fixture(scope="module")
def shared_build(table, tmp_path_factory) -> Build:
    """The full table's library, built shared with every C warning an error, and its example where this
    machine has a C++ compiler and the CUDA toolkit."""
    root = tmp_path_factory.mktemp("shared")
    write_library(table, root / "lib")
    configured = _cmake_build(root / "lib", root / "build", "-DBUILD_SHARED_LIBS=ON",
                              "-DCMAKE_C_FLAGS=-Wall -Wextra -Wpedantic -Werror")
    return Build(root / "lib", root / "build", configured)


@pytest.fixture(scope="module")
def shared_library(shared_build) -> Path:
    return shared_build.folder / "libautotune_gemm.so"


@pytest.fixture(scope="module")
def library(shared_library):
    lib = ctypes.CDLL(str(shared_library))
    _declare(lib)
    return lib


@pytest.fixture(scope="module")
def fake_driver(tmp_path_factory) -> Path:
    """A folder holding the stand-in libcuda.so.1."""
    folder = tmp_path_factory.mktemp("fake_driver")
    _run("cc", "-shared", "-fPIC", "-O1", "-o", folder / "libcuda.so.1", FAKE_DRIVER)
    return folder


def _declare(lib) -> None:
    lib.autotune_kernel_for.restype = ctypes.c_char_p
    lib.autotune_kernel_for.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.autotune_last_error.restype = ctypes.c_char_p
    lib.autotune_status_string.restype = ctypes.c_char_p
    lib.autotune_status_string.argtypes = [ctypes.c_int]
    lib.autotune_arch.restype = ctypes.c_char_p
    lib.autotune_in_tuned_range.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    for name in FUNCTIONS.values():
        getattr(lib, name).argtypes = [ctypes.c_int] * 3 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p,
                                                            ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p]
    for name in EX_FUNCTIONS.values():
        getattr(lib, name).argtypes = [ctypes.c_int] * 5 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int,
                                                            ctypes.c_void_p, ctypes.c_int, ctypes.c_float,
                                                            ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    lib.autotune_kernel_for_ex.restype = ctypes.c_char_p
    lib.autotune_kernel_for_ex.argtypes = [ctypes.c_char_p] + [ctypes.c_int] * 8


# -- building, installing, linking ------------------------------------------------------------


def test_the_example_is_built_where_a_cxx_compiler_and_the_cuda_toolkit_are_found(shared_build):
    if shutil.which("nvcc"):
        assert "no CUDA toolkit found" not in shared_build.configured
    if shutil.which("c++"):
        assert "no C++ compiler found" not in shared_build.configured
    if "examples/example.cpp is not built" not in shared_build.configured:
        assert (shared_build.folder / "autotune_gemm_example").is_file()


def test_static_build_with_a_c_compiler_alone_installs_and_a_c_project_links_it_with_find_package(
        tables, fake_driver, tmp_path):
    """The default (static) build, with the C++ compiler missing: it configures and builds without it and
    leaves out the example. Installed, a C consumer finds it, links, and gets "unsupported" for the dtype
    the table lacks and for a transposed B without cuBLAS; its sgemm goes through to the (stand-in) driver."""
    write_library(tables[1], tmp_path / "lib")
    configured = _cmake_build(tmp_path / "lib", tmp_path / "build", "-DCMAKE_CXX_COMPILER=/nonexistent")
    assert (tmp_path / "build" / "libautotune_gemm.a").is_file()
    assert "no C++ compiler found, examples/example.cpp is not built" in configured
    assert not (tmp_path / "build" / "autotune_gemm_example").exists()
    _run("cmake", "--install", tmp_path / "build", "--prefix", tmp_path / "prefix")
    consumer = tmp_path / "consumer"
    consumer.mkdir()
    (consumer / "CMakeLists.txt").write_text(textwrap.dedent("""\
        cmake_minimum_required(VERSION 3.18)
        project(consumer C)
        find_package(autotune_gemm CONFIG REQUIRED)
        add_executable(consumer main.c)
        target_link_libraries(consumer PRIVATE autotune::autotune_gemm)
        """))
    (consumer / "main.c").write_text(textwrap.dedent(f"""\
        #include <stdio.h>
        #include "autotune_gemm.h"
        int main(void) {{
            float* p = (float*)0x{A:x}ULL;
            autotune_status status = autotune_hgemm(64, 64, 64, 1.0f, p, p, 0.0f, p, NULL);
            printf("hgemm %d %s\\n", (int)status, autotune_last_error());
            status = autotune_sgemm(64, 64, 64, 1.0f, p, p, 0.0f, p, NULL);
            printf("sgemm %d %s\\n", (int)status, autotune_last_error());
            printf("%s %d %d %s\\n", autotune_arch(), AUTOTUNE_GEMM_HAS_SGEMM, AUTOTUNE_GEMM_HAS_HGEMM,
                   autotune_kernel_for("f32", 64, 64, 64));
            status = autotune_sgemm_ex(AUTOTUNE_OP_N, AUTOTUNE_OP_T, 64, 64, 64, 1.0f, p, 64, p, 64, 0.0f, p, 64,
                                       NULL);
            printf("sgemm_ex %d %s\\n", (int)status, autotune_last_error());
            const char* ex = autotune_kernel_for_ex("f32", AUTOTUNE_OP_N, AUTOTUNE_OP_T, 64, 64, 64, 64, 64, 64);
            printf("%d\\n", ex == NULL);
            status = autotune_bgemm(64, 64, 64, 1.0f, p, p, 0.0f, p, NULL);
            printf("bgemm %d %d %s\\n", AUTOTUNE_GEMM_HAS_BGEMM, (int)status, autotune_last_error());
            return 0;
        }}
        """))
    _cmake_build(consumer, tmp_path / "consumer_build", f"-DCMAKE_PREFIX_PATH={tmp_path / 'prefix'}")
    env = {**os.environ, "LD_LIBRARY_PATH": str(fake_driver), **NO_CUBLAS}
    lines = _run(tmp_path / "consumer_build" / "consumer", env=env).stdout.splitlines()
    assert lines[0] == "hgemm 2 autotune_hgemm: this library has no f16 kernels (it has f32 only)"
    assert lines[1] == "sgemm 0 "
    pick = tables[1].dtypes["f32"].pick(64, 64, 64)
    assert lines[2] == f"sm_90 1 0 {pick.kernel}"
    assert lines[3] == ("sgemm_ex 2 autotune_sgemm_ex: transa = N, transb = T, lda = 64, ldb = 64, ldc = 64 needs "
                        "cuBLAS (the tuned kernels take transa = transb = N with lda = k, ldb = n and ldc = n), and "
                        "cuBLAS is turned off (AUTOTUNE_GEMM_CUBLAS=off)")
    assert lines[4] == "1"
    assert lines[5] == "bgemm 0 2 autotune_bgemm: this library has no bf16 kernels (it has f32 only)"


def test_library_files_and_header_name_the_table(table, tmp_path):
    written = write_library(table, tmp_path)
    names = {path.relative_to(tmp_path).as_posix() for path in written}
    assert {"CMakeLists.txt", "README.md", "include/autotune_gemm.h", "src/table.c", "examples/example.cpp",
            "cmake/autotune_gemmConfig.cmake.in"} <= names
    assert not any(name.endswith(".j2") for name in names)
    header = (tmp_path / "include" / "autotune_gemm.h").read_text()
    assert '#define AUTOTUNE_GEMM_ARCH "sm_90"' in header and "#define AUTOTUNE_GEMM_HAS_HGEMM 1" in header
    assert "#define AUTOTUNE_GEMM_HAS_BGEMM 1" in header and "autotune_bgemm_ex(" in header
    assert "#include <cuda" not in header
    source = (tmp_path / "src" / "table.c").read_text()
    for dtype in table.dtypes.values():
        for kernel in dtype.kernels:
            assert f"[{len(kernel.cubin)}] = {{" in source and f'"{kernel.launch.entry}"' in source


# -- dispatch ---------------------------------------------------------------------------------------


def _shapes() -> list[tuple[int, int, int]]:
    rng = random.Random(7)
    shapes = [(1, 1, 1), (2048, 2048, 2048), (1448, 1448, 1024), (1024, 1448, 1448), (1000, 1000, 1000),
              (777, 1333, 555), (16, 4096, 4096), (3, 4096, 4096), (6, 4096, 4096), (7, 14336, 4096),
              (2, 14336, 4098), (128, 14336, 4096), (4096, 4096, 11008), (8192, 8192, 1024),
              (2896, 2896, 2896), (65536, 1, 1), (512, 512, 512), (362, 362, 362), (2048, 2048, 1024),
              (1024, 1024, 1024), (1024, 1024, 1000)]
    shapes += [tuple(int(2 ** rng.uniform(0, 15)) for _ in range(3)) for _ in range(300)]
    return shapes


def _cublas_loads(library, table) -> bool:
    """Whether cuBLAS loads in this process: this table has no cuBLAS times, so only the tuned range sends
    1 x 1 x 1 to cuBLAS, and only where it loads."""
    assert table.dtypes["f32"].outside(1, 1, 1)
    return library.autotune_kernel_for(b"f32", 1, 1, 1) == b"cublas"


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_library_picks_the_kernel_the_table_picks(library, table, dtype):
    """Inside the tuned range; outside it a call runs cuBLAS where cuBLAS loads."""
    chosen, cublas, unserved = set(), _cublas_loads(library, table), 0
    for m, n, k in _shapes():
        picked = library.autotune_kernel_for(dtype.encode(), m, n, k)
        if table.dtypes[dtype].pick(m, n, k).unserved:  # no kernel of the rule runs it: cuBLAS, or an error
            unserved += 1
            assert picked == (b"cublas" if cublas else None), (dtype, m, n, k)
            assert cublas or b"no tuned kernel of this library runs" in library.autotune_last_error()
            continue
        assert picked is not None, library.autotune_last_error()
        pick = table.dtypes[dtype].pick(m, n, k)
        if cublas and (table.dtypes[dtype].outside(m, n, k) or pick.far or pick.cut):
            assert picked.decode() == "cublas", (dtype, m, n, k)
            continue
        assert picked.decode() == table.dtypes[dtype].pick(m, n, k).kernel, (dtype, m, n, k)
        chosen.add((picked.decode(), table.dtypes[dtype].pick(m, n, k).rule.kernel == picked.decode()))
    assert {kept for _, kept in chosen} == {True, False}  # some shapes get another kernel than the rule's fastest
    if dtype == "f32":  # the kernel built for whole tiles where they are whole, its build for any shape elsewhere
        assert unserved >= 2  # and shapes of more rows than the few-row kernel computes: cuBLAS
        whole = next(k for k in table.dtypes[dtype].kernels if k.any_shape)
        assert {whole.name, whole.any_shape} <= {name for name, _ in chosen}


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_library_tells_the_tuned_range_as_the_table_does(library, table, dtype):
    for m, n, k in _shapes():
        outside = table.dtypes[dtype].outside(m, n, k)
        assert library.autotune_in_tuned_range(dtype.encode(), m, n, k) == (0 if outside else 1), (m, n, k)
        if outside:
            assert library.autotune_last_error().decode() == outside
    assert library.autotune_in_tuned_range(b"f64", 8, 8, 8) == -1


def test_ties_go_to_the_larger_tuned_shape_then_the_earlier_rule(library, table):
    # 512^3 is as far from 256^3 as from 1024^3; 2048x2048x1024 as far from 2048x1024x1024 as from
    # 1024x2048x1024, which have the same volume: the earlier rule wins.
    f32 = table.dtypes["f32"]
    assert (f32.pick(512, 512, 512).rule.m, f32.rules[0].m) == (1024, 1024)
    assert library.autotune_kernel_for(b"f32", 512, 512, 512).decode() == f32.pick(512, 512, 512).kernel
    assert f32.rules[4].times != f32.rules[0].times  # 256^3 has other times
    assert f32.pick(2048, 2048, 1024).rule is f32.rules[2]
    assert library.autotune_kernel_for(b"sgemm", 2048, 2048, 1024).decode() == f32.rules[2].kernel
    assert f32.rules[3].kernel != f32.rules[2].kernel


def test_kernel_for_rejects_bad_dtypes_and_sizes(library):
    assert library.autotune_kernel_for(b"f64", 8, 8, 8) is None
    assert library.autotune_last_error() == b'dtype = "f64": expected "f32", "f16", "bf16", "sgemm", "hgemm" or "bgemm"'
    assert library.autotune_kernel_for(None, 8, 8, 8) is None
    assert library.autotune_last_error().startswith(b"dtype = NULL")
    assert library.autotune_kernel_for(b"f16", 8, 0, 8) is None
    assert library.autotune_last_error() == b"n = 0: expected n >= 1"
    assert library.autotune_arch() == b"sm_90"


# -- argument checks (before any driver call) -----------------------------------------------------


@pytest.mark.parametrize("call, status, message", [
    ((0, 8, 8, A, B, C), INVALID_VALUE, "m = 0: expected m >= 1"),
    ((8, 8, -3, A, B, C), INVALID_VALUE, "k = -3: expected k >= 1"),
    ((8, 8, 8, A, None, C), INVALID_VALUE, "B = NULL: expected a device pointer"),
    ((8, 8, 8, A, B, None), INVALID_VALUE, "C = NULL: expected a device pointer"),
    ((50000, 50000, 16, A, B, C), UNSUPPORTED,
     "C is m x n = 50000 x 50000 = 2500000000 elements: expected at most 2147483647 (the kernels index with int32)"),
    ((16, 8, 2**30, A, B, C), UNSUPPORTED, "A is m x k = 16 x 1073741824 = 17179869184 elements"),
    ((8, 8, 8, A + 4, B, C), UNSUPPORTED,
     f"A = {A + 4:#x}: expected a 16-byte aligned address (the tuned kernels need one)"),
])
@pytest.mark.parametrize("dtype", DTYPES)
def test_bad_arguments_get_their_status_and_one_line(library, dtype, call, status, message):
    m, n, k, a, b, c = call
    assert getattr(library, FUNCTIONS[dtype])(m, n, k, 1.0, a, b, 0.0, c, None) == status
    assert library.autotune_last_error().decode().startswith(message)
    assert "\n" not in library.autotune_last_error().decode()


# transa, transb, m, n, k, A, lda, B, ldb, C, ldc: each with its status and its one line
EX_BAD = [
    ((2, OP_N, 8, 16, 4, A, 4, B, 16, C, 16), INVALID_VALUE,
     "transa = 2: expected AUTOTUNE_OP_N (0) or AUTOTUNE_OP_T (1)"),
    ((OP_N, -1, 8, 16, 4, A, 4, B, 16, C, 16), INVALID_VALUE,
     "transb = -1: expected AUTOTUNE_OP_N (0) or AUTOTUNE_OP_T (1)"),
    ((OP_N, OP_T, 0, 16, 4, A, 4, B, 4, C, 16), INVALID_VALUE, "m = 0: expected m >= 1"),
    ((OP_T, OP_N, 8, 16, -2, A, 8, B, 16, C, 16), INVALID_VALUE, "k = -2: expected k >= 1"),
    ((OP_N, OP_N, 8, 16, 4, A, 3, B, 16, C, 16), INVALID_VALUE, "lda = 3: expected lda >= k = 4"),
    ((OP_T, OP_N, 8, 16, 4, A, 4, B, 16, C, 16), INVALID_VALUE, "lda = 4: expected lda >= m = 8"),
    ((OP_N, OP_N, 8, 16, 4, A, 4, B, 15, C, 16), INVALID_VALUE, "ldb = 15: expected ldb >= n = 16"),
    ((OP_N, OP_T, 8, 16, 4, A, 4, B, 3, C, 16), INVALID_VALUE, "ldb = 3: expected ldb >= k = 4"),
    ((OP_T, OP_T, 8, 16, 4, A, 8, B, 4, C, 0), INVALID_VALUE, "ldc = 0: expected ldc >= n = 16"),
    ((OP_N, OP_T, 8, 16, 4, None, 4, B, 4, C, 16), INVALID_VALUE, "A = NULL: expected a device pointer"),
    ((OP_T, OP_N, 8, 16, 4, A, 8, B, 16, None, 20), INVALID_VALUE, "C = NULL: expected a device pointer"),
    # the layout the kernels take is checked as autotune_sgemm checks it
    ((OP_N, OP_N, 50000, 50000, 16, A, 16, B, 50000, C, 50000), UNSUPPORTED,
     "C is m x n = 50000 x 50000 = 2500000000 elements: expected at most 2147483647 (the kernels index with int32)"),
    ((OP_N, OP_N, 8, 8, 8, A + 4, 8, B, 8, C, 8), UNSUPPORTED,
     f"A = {A + 4:#x}: expected a 16-byte aligned address (the tuned kernels need one)"),
]


@pytest.mark.parametrize("call, status, message", EX_BAD)
@pytest.mark.parametrize("dtype", DTYPES)
def test_bad_arguments_of_the_ex_functions_get_their_status_and_one_line(library, dtype, call, status, message):
    transa, transb, m, n, k, a, lda, b, ldb, c, ldc = call
    assert getattr(library, EX_FUNCTIONS[dtype])(transa, transb, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, ldc,
                                                 None) == status
    assert library.autotune_last_error().decode() == message
    if a is None or c is None or status == UNSUPPORTED and "aligned" in message:
        return  # a question about a layout has no pointers
    assert library.autotune_kernel_for_ex(dtype.encode(), transa, transb, m, n, k, lda, ldb, ldc) is None
    assert library.autotune_last_error().decode() == message


def test_kernel_for_ex_takes_the_kernels_layout_as_kernel_for_does(library, table):
    for dtype in DTYPES:
        for m, n, k in [(1000, 1000, 1000), (777, 1333, 555), (4096, 4096, 4096), (1, 1, 1)]:
            expected = library.autotune_kernel_for(dtype.encode(), m, n, k)
            assert library.autotune_kernel_for_ex(dtype.encode(), OP_N, OP_N, m, n, k, k, n, n) == expected
    assert library.autotune_kernel_for_ex(b"f64", OP_N, OP_N, 8, 8, 8, 8, 8, 8) is None
    assert library.autotune_last_error() == b'dtype = "f64": expected "f32", "f16", "bf16", "sgemm", "hgemm" or "bgemm"'


def test_kernel_for_ex_takes_the_nt_kernels_for_transb_t(library, table):
    """B stored N x K (transb = T, ldb = k): the dtype's nt table picks, as DtypeTable.pick does; a dtype without
    one goes to cuBLAS (or says cuBLAS is missing)."""
    nt, cublas = table.for_layout("nt")["f16"], _cublas_loads(library, table)
    picked = set()
    for m, n, k in _shapes():
        name = library.autotune_kernel_for_ex(b"f16", OP_N, OP_T, m, n, k, k, k, n)
        assert name is not None, library.autotune_last_error()
        if cublas and (nt.outside(m, n, k) or nt.pick(m, n, k).far or nt.pick(m, n, k).cut):
            assert name == b"cublas"
            continue
        assert name.decode() == nt.pick(m, n, k).kernel and name.decode().endswith("_nt"), (m, n, k)
        picked.add(name.decode())
    assert len(picked) == 2
    other = library.autotune_kernel_for_ex(b"f32", OP_N, OP_T, 1000, 1000, 1000, 1000, 1000, 1000)
    assert other == b"cublas" if cublas else other is None and b"needs cuBLAS" in library.autotune_last_error()
    padded = library.autotune_kernel_for_ex(b"f16", OP_N, OP_T, 1000, 1000, 1000, 1000, 1008, 1000)
    assert padded == b"cublas" if cublas else padded is None  # a leading dimension the kernels do not take


def test_without_a_driver_a_call_says_so(library):
    if ctypes.util.find_library("cuda"):
        pytest.skip("this machine has a CUDA driver")
    assert library.autotune_sgemm(64, 64, 64, 1.0, A, B, 0.0, C, None) == NO_DRIVER
    message = library.autotune_last_error().decode()
    assert message.startswith("libcuda.so.1 cannot be loaded (") and message.endswith("no NVIDIA driver on this machine")
    assert "\n" not in message
    assert library.autotune_status_string(NO_DRIVER) == b"no CUDA driver"
    assert library.autotune_kernel_for(b"f32", 64, 64, 64) is not None
    assert library.autotune_last_error() == b""  # each call starts afresh
    assert library.autotune_status_string(42) == b"unknown status"


# -- launches through the stand-in driver ----------------------------------------------------------

_CALLER = textwrap.dedent("""\
    import ctypes, json, sys
    lib = ctypes.CDLL(sys.argv[1])
    lib.autotune_last_error.restype = ctypes.c_char_p
    arguments = [ctypes.c_int] * 3 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float,
                                      ctypes.c_void_p, ctypes.c_void_p]
    ex_arguments = [ctypes.c_int] * 5 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                                         ctypes.c_float, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    results = []
    for i, (function, *call) in enumerate(json.loads(sys.argv[2])):
        with open(sys.argv[3], "a") as log:
            log.write(f"call {i}\\n")
        getattr(lib, function).argtypes = ex_arguments if function.endswith("_ex") else arguments
        results.append([getattr(lib, function)(*call), lib.autotune_last_error().decode()])
    print(json.dumps(results))
    """)


def _through_fake_driver(shared_library, fake_driver, tmp_path, calls, **env):
    """``(results, driver calls per call)``: each call's status and message, and the lines the stand-in
    driver logged during it."""
    log = tmp_path / "driver.log"
    log.unlink(missing_ok=True)
    environment = {**os.environ, "LD_LIBRARY_PATH": str(fake_driver), "FAKE_CUDA_LOG": str(log), **NO_CUBLAS,
                   **env}
    result = _run(sys.executable, "-c", _CALLER, shared_library, json.dumps(calls), log, env=environment)
    per_call: list[list[str]] = []
    for line in log.read_text().splitlines():
        if line.startswith("call "):
            per_call.append([])
        elif per_call:
            per_call[-1].append(line)
    return json.loads(result.stdout), per_call


def _expected_launch(table, dtype, m, n, k, alpha, beta, layout="row", workspace=WORKSPACES) -> tuple[list[str], str]:
    """The encodes and the launch line the Python launcher's contract asks for (``workspace``: the address of
    the workspace a kernel that takes one gets)."""
    tables = table.for_layout(layout)
    kernel = tables[dtype].kernel(tables[dtype].pick(m, n, k).kernel)
    launch, size = kernel.launch, ELEMENT_BYTES[dtype]
    encodes, maps = [], [f" workspace:{workspace}"] if launch.workspace else []
    for spec in launch.tensor_maps:
        pointer = {"A": A, "B": B, "C": C}[spec.operand]
        rows, columns = spec.shape(m, n, k, kernel.layout == "nt")
        if not fits_tma(pointer, columns, size):
            maps.append(" zeros")
            continue
        encodes.append(f"cuTensorMapEncodeTiled type {_DATA_TYPES[size]} address {pointer} dims {columns} {rows} "
                       f"stride {columns * size} box {spec.box[0]} {spec.box[1]} element_strides 1 1 "
                       f"interleave {_INTERLEAVE_NONE} swizzle {SWIZZLES[spec.swizzle]} l2 {_L2_PROMOTION_256B} "
                       f"oob {_OOB_FILL_ZEROS}")
        maps.append(f" map:{pointer}:{columns}:{rows}:{spec.box[0]}:{spec.box[1]}:{SWIZZLES[spec.swizzle]}")
    grid = " ".join(map(str, launch.grid_for(m, n, k)))
    line = (f"cuLaunchKernel {launch.entry} grid {grid} block {' '.join(map(str, launch.block))} "
            f"shared {launch.dynamic_smem} stream {STREAM} extra 0 args {A} {B} {C} {m} {n} {k} "
            f"{alpha:.9g} {beta:.9g} maps{''.join(maps)}")
    return encodes, line


LAUNCHES = [("f32", 1000, 1000, 1000, 1.0, 0.0), ("f32", 4096, 4096, 4096, 1.0, 0.5),
            ("f32", 777, 1333, 555, -2.25, 0.5), ("f32", 1000, 1000, 1000, 1.0, 0.5),
            ("f16", 4096, 4096, 4096, 1.0, 0.0), ("f16", 4096, 4100, 4096, 1.0, 0.0),
            ("f16", 4000, 4096, 4100, 0.5, 1.0), ("f16", 130, 14336, 4096, 1.0, 0.0),
            ("f16", 777, 1333, 555, 1.0, 0.5), ("f16", 4096, 4096, 4096, 1.0, 0.0),
            ("f16", 6144, 6144, 6144, 1.0, 0.0), ("f16", 6000, 6144, 6144, 2.0, 0.0),
            ("bf16", 4096, 4096, 4096, 1.0, 0.0), ("bf16", 130, 14336, 4096, 1.0, 0.5),
            ("bf16", 777, 1333, 555, 1.0, 0.0)]


def test_launches_follow_the_launch_contract_and_encode_maps_as_tensor_map_py(
        shared_library, fake_driver, table, tmp_path):
    calls = [[FUNCTIONS[d], m, n, k, alpha, A, B, beta, C, STREAM] for d, m, n, k, alpha, beta in LAUNCHES]
    results, driver_calls = _through_fake_driver(shared_library, fake_driver, tmp_path, calls)
    assert results == [[SUCCESS, ""]] * len(LAUNCHES)
    loaded: set[str] = set()
    kinds = {spec.operand for d in table.dtypes.values() for kern in d.kernels for spec in kern.launch.tensor_maps}
    assert kinds == {"A", "B", "C"}  # the table has TMA kernels
    for (dtype, m, n, k, alpha, beta), lines in zip(LAUNCHES, driver_calls):
        kernel = table.dtypes[dtype].kernel(table.dtypes[dtype].pick(m, n, k).kernel)
        setup = [line for line in lines if line.split()[0] in ("cuModuleLoadData", "cuModuleGetFunction",
                                                                "cuFuncSetAttribute")]
        if kernel.name in loaded:
            assert setup == []  # loaded once per context
        else:
            opt_in = [f"cuFuncSetAttribute {kernel.launch.entry} 8 {kernel.launch.dynamic_smem}"]
            assert setup == ["cuModuleLoadData", f"cuModuleGetFunction {kernel.launch.entry}",
                             *(opt_in if kernel.launch.opt_in else [])]
            loaded.add(kernel.name)
        encodes, launch = _expected_launch(table, dtype, m, n, k, alpha, beta)
        assert [line for line in lines if line.startswith("cuTensorMapEncodeTiled")] == encodes
        assert [line for line in lines if line.startswith("cuLaunchKernel")] == [launch]
    zeros = [line for line in sum(driver_calls, []) if line.startswith("cuLaunchKernel") and " zeros" in line]
    assert zeros  # an operand with rows that are not a multiple of 16 bytes gets a zero map


def test_a_kernel_that_takes_a_workspace_gets_its_stream_s_zeroed_one_after_beta(
        shared_library, fake_driver, table, tmp_path):
    """A stream-K kernel: one workspace per stream (allocated and zeroed on that stream before its first
    launch), passed after beta and before the tensor maps; other kernels on the stream allocate none."""
    kernel = table.dtypes["f16"].kernel(table.dtypes["f16"].pick(6144, 6144, 6144).kernel)
    assert kernel.launch.workspace > 0 and kernel.launch.tensor_maps
    other = STREAM + 0x100
    shapes = [(6144, 6144, 6144, STREAM), (6100, 6144, 6144, STREAM), (6144, 6144, 6144, other),
              (4096, 4096, 4096, STREAM), (6144, 6144, 6144, other)]
    calls = [[FUNCTIONS["f16"], m, n, k, 1.0, A, B, 0.0, C, stream] for m, n, k, stream in shapes]
    results, driver_calls = _through_fake_driver(shared_library, fake_driver, tmp_path, calls)
    assert results == [[SUCCESS, ""]] * len(shapes)
    first, second = WORKSPACES, WORKSPACES + WORKSPACE_SPAN
    made = [[line for line in lines if line.startswith(("cuMemAlloc", "cuMemsetD8Async"))] for lines in driver_calls]
    assert made == [[f"cuMemAlloc {kernel.launch.workspace} -> {first}",
                     f"cuMemsetD8Async {first} 0 {kernel.launch.workspace} stream {STREAM}"], [],
                    [f"cuMemAlloc {kernel.launch.workspace} -> {second}",
                     f"cuMemsetD8Async {second} 0 {kernel.launch.workspace} stream {other}"], [], []]
    for (m, n, k, stream), lines in zip(shapes, driver_calls):
        launch = next(line for line in lines if line.startswith("cuLaunchKernel"))
        picked = table.dtypes["f16"].kernel(table.dtypes["f16"].pick(m, n, k).kernel)
        if picked.launch.workspace:
            assert f" stream {stream} " in launch
            assert f"maps workspace:{first if stream == STREAM else second} map:" in launch
        else:
            assert "workspace" not in launch


NT_LAUNCHES = [(4096, 4096, 4096, 1.0, 0.0), (130, 14336, 4096, 1.0, 0.5), (1000, 1000, 1000, 1.0, 0.0),
               (777, 1333, 555, -1.0, 0.0)]


def test_nt_launches_encode_b_as_stored(shared_library, fake_driver, table, tmp_path):
    """autotune_hgemm_ex with transb = T launches the nt kernel the table picks, its map of B n rows of k."""
    calls = [["autotune_hgemm_ex", OP_N, OP_T, m, n, k, alpha, A, k, B, k, beta, C, n, STREAM]
             for m, n, k, alpha, beta in NT_LAUNCHES]
    results, driver_calls = _through_fake_driver(shared_library, fake_driver, tmp_path, calls)
    assert results == [[SUCCESS, ""]] * len(NT_LAUNCHES)
    for (m, n, k, alpha, beta), lines in zip(NT_LAUNCHES, driver_calls):
        encodes, launch = _expected_launch(table, "f16", m, n, k, alpha, beta, "nt")
        assert [line for line in lines if line.startswith("cuTensorMapEncodeTiled")] == encodes
        assert [line for line in lines if line.startswith("cuLaunchKernel")] == [launch] and "_nt" in launch
    nt, mapped = table.for_layout("nt")["f16"], 0
    for (m, n, k, _, _), lines in zip(NT_LAUNCHES, driver_calls):
        kernel = nt.kernel(nt.pick(m, n, k).kernel)
        if any(spec.operand == "B" for spec in kernel.launch.tensor_maps) and k % 8 == 0:
            assert any(f"address {B} dims {k} {n} " in line for line in lines)  # k columns, n rows
            mapped += 1
    assert mapped >= 1


def test_the_device_is_checked_once_per_context(shared_library, fake_driver, tmp_path):
    calls = [["autotune_sgemm", 64, 64, 64, 1.0, A, B, 0.0, C, None]] * 3
    results, driver_calls = _through_fake_driver(shared_library, fake_driver, tmp_path, calls)
    assert [status for status, _ in results] == [SUCCESS] * 3
    capability = [[line for line in lines if line.startswith("cuDeviceGetAttribute")] for lines in driver_calls]
    assert capability == [["cuDeviceGetAttribute 75 device 0", "cuDeviceGetAttribute 76 device 0"], [], []]


@pytest.mark.parametrize("env, call, status, message", [
    ({"FAKE_CUDA_CC": "80"}, (64, 64, 64, A, B, C), WRONG_ARCH, "library built for sm_90, device 0 is sm_80"),
    ({"FAKE_CUDA_NO_CONTEXT": "1"}, (64, 64, 64, A, B, C), NO_CONTEXT, "no current CUDA context on this thread"),
    ({}, (64, 64, 64, 0x10000, B, C), INVALID_VALUE,
     "A = 0x10000: expected device memory (cuPointerGetAttribute(DEVICE_ORDINAL): CUDA_ERROR_INVALID_VALUE 1"),
    ({}, (64, 64, 64, A, DEVICE1 + 0x100, C), INVALID_VALUE,
     f"B = {DEVICE1 + 0x100:#x}: memory of device 1, expected memory of device 0"),
    ({"FAKE_CUDA_ALLOCATION_BYTES": str(0x80000000 + 4 * 1000 * 999)}, (1000, 1000, 1000, A, B, C), INVALID_VALUE,
     f"C = {C:#x}: expected room for m x n = 1000 x 1000 elements (4000000 bytes), its allocation holds 3996000"),
    ({}, (2**31 - 1, 1, 1, A, B, C), UNSUPPORTED, "grid 1 x 16777216 x 1 of sgemm_bm128_bn128_"),
    ({"FAKE_CUDA_LAUNCH_ERROR": "1"}, (64, 64, 64, A, B, C), CUDA_ERROR, "cuLaunchKernel of sgemm_"),
])
def test_what_the_driver_says_gets_its_status_and_one_line(shared_library, fake_driver, tmp_path, env, call,
                                                           status, message):
    m, n, k, a, b, c = call
    results, driver_calls = _through_fake_driver(shared_library, fake_driver, tmp_path,
                                                 [["autotune_sgemm", m, n, k, 1.0, a, b, 0.0, c, None]], **env)
    assert results[0][0] == status and results[0][1].startswith(message), results
    assert "\n" not in results[0][1]
    if status != CUDA_ERROR:
        assert not any(line.startswith("cuLaunchKernel") for line in driver_calls[0])


def test_calls_from_many_threads_load_each_kernel_once_and_keep_their_own_messages(
        shared_library, fake_driver, tmp_path):
    script = textwrap.dedent(f"""\
        import ctypes, sys, threading
        lib = ctypes.CDLL(sys.argv[1])
        lib.autotune_last_error.restype = ctypes.c_char_p
        lib.autotune_sgemm.argtypes = [ctypes.c_int] * 3 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p,
                                                            ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p]
        bad = []
        def work(i):
            for j in range(40):
                m = 0 if i % 2 else 64 + j
                status = lib.autotune_sgemm(m, 64, 64, 1.0, {A}, {B}, 0.0, {C}, None)
                message = lib.autotune_last_error().decode()
                if (status, message) != ((1, "m = 0: expected m >= 1") if i % 2 else (0, "")):
                    bad.append((i, j, status, message))
        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        print(bad)
        """)
    log = tmp_path / "driver.log"
    env = {**os.environ, "LD_LIBRARY_PATH": str(fake_driver), "FAKE_CUDA_LOG": str(log), **NO_CUBLAS}
    assert _run(sys.executable, "-c", script, shared_library, env=env).stdout.strip() == "[]"
    lines = log.read_text().splitlines()
    loads = [line for line in lines if line.startswith("cuModuleGetFunction")]
    assert len(loads) == len(set(loads)) >= 1
    assert sum(line.startswith("cuLaunchKernel") for line in lines) == 4 * 40


# -- what write_library refuses -----------------------------------------------------------------------


def test_write_library_refuses_a_file_as_out_and_a_table_without_shapes(table, tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(InputError, match="a directory"):
        write_library(table, tmp_path / "file")
    empty = KernelTable(arch="sm_90", gpu="h200", measured_on=(), dtypes={"f32": DtypeTable((), ())})
    with pytest.raises(TableError, match="no tuned shapes"):
        write_library(empty, tmp_path / "out")


def test_write_library_refuses_a_kernel_whose_cubin_takes_other_parameters(table, tmp_path):
    f32 = table.dtypes["f32"]
    kernel = f32.kernels[0]
    extra = dataclasses.replace(kernel.launch, tensor_maps=(TensorMapSpec("map_a", "A", (8, 8), 0),))
    broken = dataclasses.replace(kernel, launch=extra)
    bad = dataclasses.replace(table, dtypes={"f32": DtypeTable((broken,), (_rule(64, 64, 64, broken),))})
    with pytest.raises(TableError, match="takes parameters of"):
        write_library(bad, tmp_path)


def _cublas_flags() -> list[str] | None:
    """nvcc flags for cuBLAS: the toolkit's, else the nvidia-cublas wheel's (CUDA 13: nvidia/cu13, CUDA 12:
    nvidia/cublas); None where neither is there."""
    toolkit = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    if (toolkit / "include" / "cublas_v2.h").is_file():
        return ["-lcublas"]
    for package in ("nvidia.cu13", "nvidia.cublas"):
        spec = importlib.util.find_spec(package) if importlib.util.find_spec("nvidia") else None
        for root in map(Path, spec.submodule_search_locations if spec else []):
            libraries = sorted((root / "lib").glob("libcublas.so.*"))
            if (root / "include" / "cublas_v2.h").is_file() and libraries:
                return [f"-I{root / 'include'}", f"-L{root / 'lib'}", f"-l:{libraries[0].name}"]
    return None


def test_the_gpu_check_program_compiles_against_the_library(request, tmp_path):
    flags = _cublas_flags()
    if shutil.which("nvcc") is None or flags is None:
        pytest.skip("needs nvcc and the cuBLAS headers (CUDA toolkit or the nvidia-cublas wheel)")
    build = request.getfixturevalue("shared_build")
    _run("nvcc", "-O2", "-std=c++17", "-x", "cu", "-arch=sm_90", EXPORT_CHECK, f"-I{build.source / 'include'}",
         *flags, f"-L{build.folder}", "-lautotune_gemm", "-ldl", "-lpthread", "-o", tmp_path / "export_check")
    assert (tmp_path / "export_check").is_file()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, shape", [
    ("f32", (1000, 1000, 1000)), ("f32", (777, 1333, 555)), ("f32", (4096, 4096, 4096)), ("f16", (4096, 4096, 4096)),
    ("f16", (4096, 4100, 4096)), ("f16", (4000, 4096, 4100)), ("f16", (130, 14336, 4096)), ("f16", (777, 1333, 555)),
    ("bf16", (4096, 4096, 4096)), ("bf16", (4000, 4096, 4100)), ("bf16", (130, 14336, 4096)), ("bf16", (777, 1333, 555))])
def test_on_the_gpu_the_library_passes_the_search_verification(library, table, dtype, shape):
    """The library's GEMM checked as a search checks a candidate: NaN-poisoned C, beta 0 and 0.5, every
    element against cuBLAS within measure.error_bound."""
    import cupy

    from autotune.gpu import measure
    from autotune.gpu.tasks import verification_problems

    properties = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
    if (properties["major"], properties["minor"]) != (9, 0):
        pytest.skip("the test table is built for sm_90")
    function = getattr(library, FUNCTIONS[dtype])
    operands = measure.make_operands(GemmProblem(*shape, dtype), seed=3)
    for problem in verification_problems(GemmProblem(*shape, dtype)):
        ref = measure.reference(problem, operands)
        bound = measure.error_bound(problem, operands, ref)

        def launch(out, problem=problem):
            status = function(problem.m, problem.n, problem.k, problem.alpha, operands.a.data.ptr,
                              operands.b.data.ptr, problem.beta, out.data.ptr, cupy.cuda.get_current_stream().ptr)
            assert status == SUCCESS, library.autotune_last_error()

        check = measure.check(launch, problem, operands, ref, bound)
        assert check.passed, (f"{_picked(table, dtype, shape)}: {check.describe()} (beta {problem.beta}; "
                              f"{_wrong_elements(operands.out, ref, bound, problem)})")


def _picked(table, dtype, shape) -> str:
    """What the table runs at ``shape``: its kernel's name, or cuBLAS."""
    pick = table.dtypes[dtype].pick(*shape)
    return "cuBLAS" if pick.cublas else pick.kernel


def _runtime_operand(array, dtype):
    """``array`` as the runtime takes it: bf16's bit patterns (uint16 in CuPy) as a PyTorch bfloat16 tensor."""
    if dtype != "bf16":
        return array
    torch = pytest.importorskip("torch", reason="bf16 reaches the Python runtime as PyTorch tensors")
    return torch.from_dlpack(array).view(torch.bfloat16)


def _wrong_elements(out, ref, bound, problem) -> str:
    """How many elements of ``out`` miss ``ref`` by more than ``bound``, and in which rows and columns."""
    import cupy

    from autotune.gpu import measure

    wrong = cupy.asnumpy(~(cupy.abs(measure.widen(out, problem.element) - ref) <= bound))
    rows, columns = wrong.any(axis=1).nonzero()[0], wrong.any(axis=0).nonzero()[0]
    return (f"{int(wrong.sum())} elements wrong, in rows {rows[:8].tolist()}{'...' if len(rows) > 8 else ''} "
            f"and columns {columns[:8].tolist()}{'...' if len(columns) > 8 else ''}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, shape", [("f16", (777, 1333, 555)), ("bf16", (777, 1333, 555)),
                                          ("bf16", (4000, 4096, 4100))])
def test_on_the_gpu_the_python_runtime_with_the_library_s_table_passes_the_same_verification(table, dtype, shape,
                                                                                            monkeypatch):
    """The Python runtime with the library's table (its kernel, or cuBLAS where the shape cuts the kernel's
    tiles), checked as the library is. bf16 on cuBLAS runs PyTorch's matmul, which follows PyTorch's setting:
    here, as in the library's cuBLAS handle, no bf16 reductions of partial sums (PyTorch allows them by
    default, and they miss the fp32-accumulation bound at 777x1333x555)."""
    import cupy

    if dtype == "bf16":
        torch = pytest.importorskip("torch", reason="bf16 reaches the Python runtime as PyTorch tensors")
        monkeypatch.setattr(torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction", False)

    from autotune.gpu import measure
    from autotune.gpu.tasks import verification_problems
    from autotune.runtime import Runtime
    from autotune.runtime.devices import CupyDevice

    properties = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
    if (properties["major"], properties["minor"]) != (9, 0):
        pytest.skip("the test table is built for sm_90")
    runtime = Runtime(CupyDevice(0), (table, "the library's table"))
    operands = measure.make_operands(GemmProblem(*shape, dtype), seed=3)
    for problem in verification_problems(GemmProblem(*shape, dtype)):
        ref = measure.reference(problem, operands)
        bound = measure.error_bound(problem, operands, ref)

        def launch(out, problem=problem):
            runtime.gemm(*(_runtime_operand(x, dtype) for x in (operands.a, operands.b)),
                         out=_runtime_operand(out, dtype), alpha=problem.alpha, beta=problem.beta)

        check = measure.check(launch, problem, operands, ref, bound)
        assert check.passed, (f"{_picked(table, dtype, shape)}: {check.describe()} (beta {problem.beta}; "
                              f"{_wrong_elements(operands.out, ref, bound, problem)})")
