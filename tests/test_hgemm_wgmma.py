"""hgemm_wgmma's persistent kernel and setmaxnreg split, offline: rules, launches, register budgets, compiles."""

import random

import pytest

from autotune.gpu_specs import gpu_spec
from autotune.kernel.compile import CompileFailure, compile_kernel
from autotune.kernel.contract import contract_for
from autotune.kernel.render import render
from autotune.problem import GemmProblem
from autotune.space.family import load_space
from autotune.space.survey import feasible_configs


@pytest.fixture(scope="module")
def wgmma():
    return load_space("hgemm_wgmma")


@pytest.fixture(scope="module")
def h200():
    return gpu_spec("h200")


def _persistent_seeds(space):
    return [seed for seed in space.seeds if seed["PERSISTENT"]]


def _cdiv(a, b):
    return -(-a // b)


def test_new_knobs_default_to_the_kernels_recorded_before_them(wgmma):
    old = {knob: value for knob, value in wgmma.seeds[0].as_dict().items() if knob not in ("PERSISTENT", "SETMAXNREG")}
    config = wgmma.config(old)
    assert config["PERSISTENT"] == 0 and config["SETMAXNREG"] == 0


def test_rules_name_what_the_persistent_kernel_and_setmaxnreg_need(wgmma, h200):
    seed = _persistent_seeds(wgmma)[0].as_dict()
    assert wgmma.check(wgmma.config({**seed, "TMA": 0, "SETMAXNREG": 0}), h200).reason == \
        "the persistent kernel is built for the TMA producer (TMA is 0)"
    split = wgmma.config({**seed, "TMA": 0, "PRODUCER": 0, "SETMAXNREG": 0, "PERSISTENT": 0, "SPLIT_K": 2})
    assert wgmma.check(split, h200).feasible  # split-K stays where it was built
    assert wgmma.check(wgmma.config({**seed, "SPLIT_K": 2}), h200).reason is not None
    one = wgmma.config({**seed, "WG_M": 1, "M_TILES": 2, "WN": 128})
    assert wgmma.check(one, h200).reason == \
        "setmaxnreg moves registers from the producer to 2 or more multiplying warpgroups (1 with PRODUCER 1)"


def test_setmaxnreg_split_fits_the_registers_the_block_is_launched_with(wgmma, h200):
    """dec/inc counts are multiples of 8 in setmaxnreg's range, and the producer's and consumers' registers
    together never exceed what the block holds at launch (an increase past it would wait for ever)."""
    seen = set()
    for config in feasible_configs(wgmma, h200):
        if not config["SETMAXNREG"]:
            continue
        values = wgmma.values(config, h200)
        producer, consumer, consumers = values["PRODUCER_REGS"], values["CONSUMER_REGS"], values["CONSUMERS"]
        assert producer % 8 == 0 and consumer % 8 == 0 and 24 <= producer <= consumer <= 256
        assert producer * 128 + consumer * consumers * 128 <= values["REGISTER_CAP"] * values["THREADS"]
        assert values["ACCUMULATORS"] + 40 <= consumer
        seen.add((consumers, consumer))
    assert (2, 232) in seen  # 40 x 128 + 232 x 256 = 168 x 384: the whole file at 384 threads


def test_persistent_launch_is_at_most_one_block_per_sm_and_walks_every_tile(wgmma, h200):
    for seed in _persistent_seeds(wgmma):
        values = wgmma.values(seed, h200)
        cluster_m, cluster_n = seed["CLUSTER_M"], seed["CLUSTER_N"]
        for m, n, k in [(1, 1, 1), (200, 264, 72), (2049, 2056, 136), (4096, 4096, 4096), (8192, 8192, 8192)]:
            launch = wgmma.launch(seed, h200, GemmProblem(m, n, k, "f16"))
            gx, gy, gz = launch.grid
            units = _cdiv(_cdiv(n, values["BN"]), cluster_n) * _cdiv(_cdiv(m, values["BM"]), cluster_m)
            assert gy == cluster_m and gz == 1 and gx % cluster_n == 0
            assert gx * gy <= h200.sms
            assert gx // cluster_n == min(units, h200.sms // (cluster_m * cluster_n))
        # the selection table's work: the busiest block's tiles times k-tiles, as for the one-tile-per-block twin
        contract = contract_for(wgmma, seed, h200)
        twin = contract_for(wgmma, wgmma.config({**seed.as_dict(), "PERSISTENT": 0}), h200)
        for shape in [(4096, 4096, 4096), (8192, 8192, 8192), (2048, 2048, 2048)]:
            assert contract.work(*shape, h200.sms) == twin.work(*shape, h200.sms)
        assert contract.work(1, 1, 4096, h200.sms) == 4096 // seed["BK"]


def test_persistent_epilogue_ring_sits_beside_the_stages(wgmma, h200):
    seed = _persistent_seeds(wgmma)[0]
    values = wgmma.values(seed, h200)
    ring = values["CONSUMERS"] * 4 * 4096  # two 2 KB boxes per multiplying warp
    assert values["SMEM_BYTES"] == values["PIPELINE_BYTES"] + ring + 1024 + values["BARRIER_BYTES"]
    assert values["SMEM_BYTES"] <= h200.smem_per_block_optin
    plain = wgmma.values(wgmma.config({**seed.as_dict(), "SMEM_EPILOGUE": 0}), h200)
    assert plain["SMEM_BYTES"] == values["PIPELINE_BYTES"] + 1024 + values["BARRIER_BYTES"]


def _compiled(space, config, gpu):
    compiled = compile_kernel(render(space, config, gpu))
    assert not isinstance(compiled, CompileFailure), compiled.message
    return compiled


def test_persistent_seeds_compile_with_the_whole_register_budget_and_no_spills(wgmma, h200):
    """With setmaxnreg ptxas launches the block with every register its launch bounds allow (REGISTER_CAP),
    the pool the producer's decrease and the consumers' increase are counted against."""
    for seed in _persistent_seeds(wgmma):
        code = render(wgmma, seed, h200).code
        assert "setmaxnreg.dec.sync.aligned.u32 40;" in code and "setmaxnreg.inc.sync.aligned.u32 232;" in code
        resources = _compiled(wgmma, seed, h200).resources
        assert resources.registers == wgmma.values(seed, h200)["REGISTER_CAP"] == 168
        assert resources.spill_stores == resources.spill_loads == resources.stack_frame == 0


def test_setmaxnreg_configs_of_other_shapes_compile_at_the_register_cap():
    """A few random setmaxnreg configs (2, 3 and 4 multiplying warpgroups, persistent or not): ptxas gives
    the kernel the launch bound's registers even where its code needs fewer, and nothing spills."""
    space, h200 = load_space("hgemm_wgmma"), gpu_spec("h200")
    rng = random.Random(3)
    chosen = []
    for consumers in (2, 3, 4):
        group = [c for c in feasible_configs(space, h200)
                 if c["SETMAXNREG"] and space.values(c, h200)["CONSUMERS"] == consumers]
        chosen += rng.sample(group, min(1, len(group)))
    assert len(chosen) >= 2
    for config in chosen:
        values = space.values(config, h200)
        resources = _compiled(space, config, h200).resources
        assert resources.registers == values["REGISTER_CAP"], config.name
        assert resources.spill_stores == resources.spill_loads == 0, config.name
