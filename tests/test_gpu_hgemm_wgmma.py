"""hgemm_wgmma's persistent kernels (stream-K among them) and setmaxnreg split verified on an H200 against cuBLAS: shapes of one tile
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
    (4097, 4100, 200),  # 128x256 tiles: three whole waves on 132 SMs, then 33 more (stream-K shares 165)
]

VARIANTS = [  # over the persistent 128x256 seed: each epilogue, wgmma depth, block order and tile width
    {}, {"SMEM_EPILOGUE": 0}, {"WAIT_DEPTH": 0, "STAGES": 3}, {"WAIT_DEPTH": 2}, {"GROUP_M": 1},
    {"SETMAXNREG": 0}, {"WN": 64, "STAGES": 8}, {"CLUSTER_N": 2, "WN": 128}, {"PERSISTENT": 0}, {"WN": 192},
    # stream-K: the pieces of shared tiles summed through the workspace, with each epilogue and block order
    {"STREAM_K": 1}, {"STREAM_K": 1, "SMEM_EPILOGUE": 0, "GROUP_M": 1}, {"STREAM_K": 1, "WN": 64, "STAGES": 8},
    {"STREAM_K": 1, "WAIT_DEPTH": 2},
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


# A producer warpgroup's element-wise copies (operands TMA cannot address: K or N not a multiple of 8), repeated
# with fresh operands: the build of the C library's check that once returned a wrong element (bf16 777x1333x555),
# one without TMA, and a persistent one.
PRODUCER_BUILD = {"WG_M": 2, "WG_N": 1, "M_TILES": 1, "WN": 64, "BK": 64, "STAGES": 8, "WAIT_DEPTH": 1,
                  "SMEM_OPT_IN": 1, "GROUP_M": 1, "SMEM_EPILOGUE": 1, "SPLIT_K": 1, "PRODUCER": 1, "TMA": 1,
                  "CLUSTER_M": 1, "CLUSTER_N": 1, "PERSISTENT": 0, "SETMAXNREG": 0}
PRODUCER_VARIANTS = [{}, {"TMA": 0}, {"PERSISTENT": 1, "WN": 128, "STAGES": 4},
                     {"PERSISTENT": 1, "WN": 128, "STAGES": 4, "STREAM_K": 1}]
UNALIGNED = [(777, 1333, 555), (129, 4095, 7), (513, 511, 1025)]
REPEATS = 12


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_a_producer_s_element_wise_copies_reach_the_multiplying_warpgroups(worker, dtype):
    from autotune.gpu.tasks import KernelTask
    from autotune.gpu_specs import GPUS
    from autotune.kernel.compile import CompileFailure, CompilePool
    from autotune.kernel.render import render
    from autotune.problem import GemmProblem
    from autotune.records import Measurement

    gpu = GPUS[worker.environment().gpu_key]
    if gpu.arch != 90:
        pytest.skip(f"wgmma needs sm_90a ({gpu.key} is sm_{gpu.arch})")
    space = load_space("hgemm_wgmma", dtype)
    configs = [space.config({**PRODUCER_BUILD, **change}) for change in PRODUCER_VARIANTS]
    with CompilePool() as pool:
        compiled = list(pool.map(render(space, config, gpu) for config in configs))
    wrong = []
    for config, kernel in zip(configs, compiled):
        assert space.check(config, gpu).feasible and not isinstance(kernel, CompileFailure), config.name
        for shape in UNALIGNED:
            problem = GemmProblem(*shape, dtype)
            launch = space.launch(config, gpu, problem)
            for seed in range(REPEATS):  # fresh operands each time, C poisoned with NaN
                outcome = worker.run(KernelTask(cubin=kernel.cubin, entry=kernel.entry, grid=launch.grid,
                                                block=launch.block, dynamic_smem=launch.dynamic_smem, problem=problem,
                                                seed=seed, warmup=0, repeats=1, resources=kernel.resources,
                                                tensor_maps=launch.tensor_maps, workspace=launch.workspace),
                                     timeout_s=30)
                if not isinstance(outcome, Measurement):
                    wrong.append(f"{config.name} {shape} seed {seed}: {outcome.message}")
    assert not wrong, f"{len(wrong)} of {len(configs) * len(UNALIGNED) * REPEATS} runs wrong:\n" + "\n".join(wrong[:10])
