"""hgemm_wgmma's persistent kernels and setmaxnreg split verified on an H200 against cuBLAS: shapes of one tile
per block and shapes where blocks walk several tiles, aligned (TMA) and not (element-wise copies), beta 0
(C poisoned with NaN, never read) and beta 0.5."""

import pytest
from test_gpu_kernels import _assert_verified, _both_betas, _run_all

from autotune.space.family import load_space

pytestmark = pytest.mark.gpu

# Shapes with fewer tiles than SMs (each block one tile) and with more, so that blocks walk 2-4 tiles and the
# pipeline's stages wrap from one tile into the next: K of 1-9 k-tiles, N and K multiples of 8 or not.
SHAPES = [
    (1, 1, 1), (17, 33, 65), (200, 264, 72), (129, 4095, 7), (513, 511, 1025),
    (2049, 2056, 136), (2049, 2050, 129), (4097, 1032, 520), (1000, 8200, 64), (3001, 3000, 8),
]

VARIANTS = [  # over the persistent 128x256 seed: each epilogue, wgmma depth, block order and tile width
    {}, {"SMEM_EPILOGUE": 0}, {"WAIT_DEPTH": 0, "STAGES": 3}, {"WAIT_DEPTH": 2}, {"GROUP_M": 1},
    {"SETMAXNREG": 0}, {"WN": 64, "STAGES": 8}, {"CLUSTER_N": 2, "WN": 128}, {"PERSISTENT": 0}, {"WN": 192},
]


def _configs(space, gpu):
    seeds = [seed for seed in space.seeds if seed["PERSISTENT"]]
    base = seeds[0].as_dict()
    configs = seeds + [space.config({**base, **change}) for change in VARIANTS]
    for config in configs:
        assert space.check(config, gpu).feasible, (config.name, space.check(config, gpu).reason)
    return list(dict.fromkeys(configs))


def test_persistent_and_setmaxnreg_configs_verify(worker):
    from autotune.gpu_specs import GPUS

    gpu = GPUS[worker.environment().gpu_key]
    if gpu.arch != 90:
        pytest.skip(f"wgmma needs sm_90a ({gpu.key} is sm_{gpu.arch})")
    space = load_space("hgemm_wgmma")
    configs = _configs(space, gpu)
    problems = _both_betas(SHAPES, "f16")
    outcomes = _run_all(worker, space, gpu, configs, problems)
    _assert_verified(outcomes)
    assert len(outcomes) == len(configs) * len(problems)  # none skipped for its resources
