"""hgemm_gemv (M <= 16, fp16 and bf16, B stored N x K or K x N) verified on a GPU against cuBLAS by the search's
own measurement: its seeds and a few sampled configs at few-row shapes with N and K of no whole block or 16-byte
vector, beta 0 (C poisoned with NaN, never read) and 0.5. Rows past a kernel's MAX_M are refused by its rules,
which decide the shapes a table sends it."""

import random

import pytest
from test_gpu_kernels import _assert_verified

from autotune.kernel.contract import contract_for
from autotune.problem import GemmProblem
from autotune.space.family import load_space
from autotune.space.survey import feasible_configs

pytestmark = pytest.mark.gpu

SHAPES = [(1, 14336, 4096), (3, 4096, 14336), (8, 4097, 1000), (16, 1000, 4095)]


def _configs(space, gpu, seed: int):
    """The seeds the GPU runs and a random feasible config of every MAX_M."""
    rng = random.Random(seed)
    configs = [s for s in space.seeds if space.check(s, gpu).feasible]
    feasible = feasible_configs(space, gpu, GemmProblem(1, 4096, 4096, space.dtype, layout=space.layout))
    for rows in space.knobs["MAX_M"]:
        configs.append(rng.choice([c for c in feasible if c["MAX_M"] == rows]))
    return list(dict.fromkeys(configs))


def _verify(worker, space, gpu, configs, problems):
    """Each config at each problem its rules admit, compiled once, run problem by problem (the operands made
    once for each); the outcomes as (config name, shape, beta, outcome)."""
    from autotune.gpu.tasks import KernelTask
    from autotune.kernel.compile import CompileFailure, CompilePool
    from autotune.kernel.render import render

    with CompilePool() as pool:
        kernels = dict(zip(configs, pool.map(render(space, c, gpu) for c in configs)))
    outcomes = []
    for problem in problems:
        admitted = [c for c in configs if space.check(c, gpu, problem).feasible]
        assert admitted, problem
        for config in admitted:
            kernel = kernels[config]
            assert not isinstance(kernel, CompileFailure), kernel
            launch = space.launch(config, gpu, problem)
            task = KernelTask(cubin=kernel.cubin, entry=kernel.entry, grid=launch.grid, block=launch.block,
                              dynamic_smem=launch.dynamic_smem, problem=problem, seed=1, warmup=1, repeats=3,
                              resources=kernel.resources)
            outcomes.append((config.name, problem.shape, problem.beta, worker.run(task, timeout_s=30)))
    return outcomes


@pytest.mark.parametrize("layout", ["nt", "row"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_hgemm_gemv_verifies_at_few_rows(worker, gpu, layout, dtype):
    if gpu.arch < 80:
        pytest.skip("hgemm_gemv needs sm_80 (cp.async, mma.sync m16n8k16, bf16)")
    space = load_space("hgemm_gemv", dtype, layout)
    configs = _configs(space, gpu, seed=len(dtype))
    problems = [GemmProblem(m, n, k, dtype, layout=layout, alpha=alpha, beta=beta) for m, n, k in SHAPES
                for alpha, beta in ((1.0, 0.0), (-1.5, 0.5))]
    outcomes = _verify(worker, space, gpu, configs, problems)
    _assert_verified(outcomes)
    assert {name for name, *_ in outcomes} == {c.name for c in configs}  # none turned away for its resources
    for config in configs:  # rows past MAX_M: refused, and outside what the kernel serves
        contract = contract_for(space, config, gpu)
        for m, n, k in SHAPES:
            verdict = space.check(config, gpu, GemmProblem(m, n, k, dtype, layout=layout))
            assert verdict.feasible == (m <= config["MAX_M"]) == contract.serves_shape(m, n, k), (config.name, m)
            assert verdict.feasible or "M above MAX_M" in verdict.reason
