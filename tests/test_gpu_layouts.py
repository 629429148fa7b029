"""Layout nt (B stored N x K, nn.Linear's weight) verified on a GPU against cuBLAS's transposed product:
the naive kernels (whose reading of B is one line, so they check the reference too) and hgemm_wgmma's builds
of every copy path (TMA with and without multicast, cp.async with and without a producer, split-K, the
element-wise copies where K is not a multiple of 8) at shapes of one block and of several, beta 0 (C
poisoned with NaN, never read) and beta 0.5."""

import pytest
from test_gpu_kernels import _assert_verified, _run_all

from autotune.problem import GemmProblem
from autotune.space.family import load_space

pytestmark = pytest.mark.gpu

SHAPES = [(1, 1, 1), (17, 33, 65), (200, 264, 72), (129, 4095, 7), (513, 511, 1025), (2049, 2050, 136),
          (1000, 8200, 64), (64, 4096, 4096)]

WGMMA_VARIANTS = [  # over the 128x256 TMA seed: each B path and tile a build of nt changes
    {}, {"BK": 32}, {"CLUSTER_M": 2}, {"CLUSTER_N": 2, "WN": 128}, {"WG_M": 1, "WG_N": 2, "WN": 128},
    {"TMA": 0}, {"TMA": 0, "BK": 32}, {"PRODUCER": 0, "TMA": 0, "SMEM_EPILOGUE": 0},
    {"PRODUCER": 0, "TMA": 0, "SPLIT_K": 2, "SMEM_EPILOGUE": 1}, {"PERSISTENT": 1, "SETMAXNREG": 1},
    {"WG_M": 1, "M_TILES": 1, "WN": 64, "STAGES": 8},
    # warpgroup widths that are no number of 64-column slabs (B stored N x K only), against wave quantization
    {"WN": 224, "SMEM_EPILOGUE": 0}, {"WN": 224, "PERSISTENT": 1, "SETMAXNREG": 1, "SMEM_EPILOGUE": 0},
    {"WN": 96, "WG_M": 1, "STAGES": 8, "SMEM_EPILOGUE": 0}, {"WN": 192, "TMA": 0, "SMEM_EPILOGUE": 1},
]


def _problems(shapes, dtype):
    return [GemmProblem(m, n, k, dtype, layout="nt", alpha=alpha, beta=beta) for (m, n, k) in shapes
            for alpha, beta in ((1.0, 0.0), (-1.5, 0.5))]


@pytest.mark.parametrize("family, dtype", [("naive_f32", "f32"), ("naive_f16", "f16")])
def test_naive_nt_kernels_verify(worker, gpu, family, dtype):
    space = load_space(family, dtype, "nt")
    configs = [config for config in space if space.check(config, gpu).feasible][:1]
    outcomes = _run_all(worker, space, gpu, configs, _problems(SHAPES[:5], dtype))
    _assert_verified(outcomes)
    assert len(outcomes) == 10


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_wgmma_nt_builds_verify(worker, gpu, dtype):
    if gpu.arch != 90:
        pytest.skip(f"wgmma needs sm_90a ({gpu.key} is sm_{gpu.arch})")
    space = load_space("hgemm_wgmma", dtype, "nt")
    base = next(seed for seed in space.seeds if seed["TMA"] and seed["WN"] == 256 and not seed["PERSISTENT"])
    configs = [space.config({**base.as_dict(), **change}) for change in WGMMA_VARIANTS] + space.seeds
    configs = list(dict.fromkeys(c for c in configs if space.check(c, gpu).feasible))
    assert len(configs) >= 20 and all(config.name.endswith("_nt") for config in configs)
    problems = _problems(SHAPES, dtype)
    outcomes = _run_all(worker, space, gpu, configs, problems)
    _assert_verified(outcomes)
    assert len(outcomes) == len(configs) * len(problems)  # none turned away for its resources
