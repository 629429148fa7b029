"""bench/sgemm_compilers.py without a GPU: the public kernel's source, entry and arguments; the rounds' order."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))
import sgemm_compilers  # noqa: E402

from autotune.errors import InputError  # noqa: E402
from autotune.kernel.compile import CompiledKernel, compile_kernel  # noqa: E402
from autotune.kernel.cubin import parameter_sizes  # noqa: E402
from autotune.problem import make_problem  # noqa: E402
from autotune.records import Timing  # noqa: E402

# A stand-in with the public kernel's file layout, includes and signature (not its code).
HEADER = "#pragma once\n#define SCALE_PTX(x, s) ((x) * (s))\n"
KERNEL = """#include "helper_cuda ptx.h"
#include <cstdint>

__global__ __launch_bounds__(256, 1) void sgemm_128x256x8(int m, int n, int k, const float alpha, const float* A,
                                                          int lda, const float* B, int ldb, const float beta,
                                                          float* C, int ldc) {
    uint64_t row = blockIdx.y * 128 + threadIdx.x / 2, col = blockIdx.x * 256 + threadIdx.x;
    if (row < m && col < n) C[row * ldc + col] = SCALE_PTX(A[row * lda] * B[col] + beta * k, alpha);
}
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    (tmp_path / "src" / "kernels").mkdir(parents=True)
    (tmp_path / "common").mkdir()
    (tmp_path / "src/kernels/128x256x8.cuh").write_text(KERNEL)
    (tmp_path / "common/helper_cuda ptx.h").write_text(HEADER)
    return tmp_path


def test_the_public_source_builds_with_nvrtc_under_its_mangled_name_and_takes_what_the_launch_passes(checkout):
    source = sgemm_compilers.public_source(checkout)
    assert "#include" not in source.code and "SCALE_PTX(x, s)" in source.code
    compiled = compile_kernel(source, "sm_90", use_cache=False)
    assert isinstance(compiled, CompiledKernel), compiled.message
    assert parameter_sizes(compiled.cubin, sgemm_compilers.PUBLIC_ENTRY) == (4, 4, 4, 4, 8, 4, 8, 4, 4, 8, 4)
    problem = make_problem("1000x700x333", "f32")
    kernel = sgemm_compilers.public_kernel(checkout, problem)
    assert sgemm_compilers.parameter_mismatch(sgemm_compilers.Build(kernel, "nvrtc", compiled)) is None
    assert kernel.grid == (3, 8, 1) and kernel.block == (256, 1, 1)  # ceil(700 / 256) by ceil(1000 / 128)


def test_the_public_arguments_are_row_major_leading_dimensions():
    problem = make_problem("1000x700x333", "f32")
    m, n, k, alpha, a, lda, b, ldb, beta, c, ldc = sgemm_compilers.public_arguments(problem, "A", "B", "C")
    assert (m, n, k, lda, ldb, ldc) == (1000, 700, 333, 333, 700, 700)
    assert (a, b, c, alpha, beta) == ("A", "B", "C", 1.0, 0.0)


def test_a_checkout_without_the_kernel_is_one_input_error(tmp_path):
    with pytest.raises(InputError, match=r"--public .*128x256x8.cuh"):
        sgemm_compilers.public_source(tmp_path)


def test_rounds_balance_who_runs_first_and_after_whom_and_the_table_pools_the_medians(monkeypatch, capsys):
    from autotune.gpu import measure

    order = []
    ms = {"cuBLAS": 2.0, "public/nvcc": 1.6, "config1/nvrtc": 2.5}

    def fake_time_launches(launch, **_):
        order.append(launch())
        return Timing.from_samples([ms[order[-1]]] * 3)

    monkeypatch.setattr(measure, "time_launches", fake_time_launches)
    launches = {label: (lambda label=label: label) for label in ms}
    results = sgemm_compilers.timed_rounds(launches, rounds=6, repeats=3)  # a full cycle for 3 things timed
    rounds = [order[i:i + 3] for i in range(0, 18, 3)]
    assert all(sorted(r) == sorted(ms) for r in rounds)
    assert Counter(r[0] for r in rounds) == {label: 2 for label in ms}
    after = Counter((r[i], r[i + 1]) for r in rounds for i in range(2))
    assert after == {(x, y): 2 for x in ms for y in ms if x != y}  # no build always right after cuBLAS

    builds = [sgemm_compilers.Build(sgemm_compilers.Kernel(label.split("/")[0], None, (1, 1, 1), (1, 1, 1), 0, None),
                                    label.split("/")[1], _compiled()) for label in list(ms)[1:]]
    capsys.readouterr()
    sgemm_compilers.print_table(builds, results)
    table = capsys.readouterr().out
    assert "1.250x  1.250-1.250x" in table and "0.800x  0.800-0.800x" in table


def _compiled() -> CompiledKernel:
    from autotune.records import Resources

    return CompiledKernel("k", "sm_90", b"", Resources(200, 0, 0, 4, 8, 8), "")
