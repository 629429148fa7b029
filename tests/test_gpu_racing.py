"""Racing on a real GPU: a kernel slower than a stage's limit stops timing there, and is verified all the same."""

import dataclasses
from pathlib import Path

import pytest

from autotune.problem import GemmProblem

pytestmark = pytest.mark.gpu

PLANTED = Path(__file__).parent / "data" / "planted.toml"


def test_time_launches_stops_a_kernel_at_the_first_stage_it_loses():
    import cupy

    from autotune.gpu import measure
    from autotune.gpu.race import RaceStage

    a = cupy.ones((1024, 1024), dtype=cupy.float32)
    out = cupy.empty_like(a)

    def launch():
        cupy.matmul(a, a, out=out)

    plain = measure.time_launches(launch, warmup=2, repeats=20)
    assert len(plain.samples_ms) == 20
    slow, fast = 1e-6, 1e6  # limits every launch is above, and below
    raced = measure.time_launches(launch, warmup=2, repeats=20, race=(RaceStage(3, slow),))
    assert len(raced.samples_ms) == 3
    assert raced.median_ms == pytest.approx(plain.median_ms, rel=0.5)  # the same kernel, fewer launches
    # Without a warm-up (the kernel has just run): stops after one launch, or at the stage it loses.
    one = measure.time_launches(launch, warmup=0, repeats=20, race=(RaceStage(1, slow), RaceStage(3, slow)))
    assert len(one.samples_ms) == 1
    later = measure.time_launches(launch, warmup=0, repeats=20, race=(RaceStage(10, slow), RaceStage(1, fast)))
    assert len(later.samples_ms) == 10
    contender = measure.time_launches(launch, warmup=0, repeats=20, race=(RaceStage(1, fast), RaceStage(10, fast)))
    assert len(contender.samples_ms) == 20


def test_time_back_to_back_gives_one_sample_per_group_of_launches_per_launch():
    """Each sample is a group of launches between one pair of events, divided by the launches: about one launch's
    time (a 4096^2 product takes well over the events' resolution, so a per-group time would be 10x)."""
    import cupy

    from autotune.gpu import measure

    a = cupy.ones((4096, 4096), dtype=cupy.float32)
    out = cupy.empty_like(a)

    def launch():
        cupy.matmul(a, a, out=out)

    flushed = measure.time_launches(launch, warmup=2, repeats=10)
    warm = measure.time_back_to_back(launch, calls=10, warmup=2, repeats=7)
    assert len(warm.samples_ms) == 7
    assert warm.median_ms == pytest.approx(flushed.median_ms, rel=0.3)
    with pytest.raises(ValueError):
        measure.time_back_to_back(launch, calls=0)


@pytest.mark.parametrize("mode, verified", [(0, True), (3, False)])  # 3 ignores beta: a wrong answer
def test_a_racing_kernel_is_verified_before_it_is_timed(mode, verified):
    from autotune.gpu.race import RaceStage
    from autotune.gpu.worker import GpuWorker
    from autotune.gpu_specs import GPUS
    from autotune.kernel.compile import compile_kernel
    from autotune.kernel.render import render
    from autotune.records import Failure, Measurement
    from autotune.search.evaluate import kernel_task
    from autotune.space.family import SearchSpace

    space = SearchSpace(PLANTED)
    problem = GemmProblem(512, 256, 128, "f32", beta=0.5)
    with GpuWorker() as worker:
        gpu = GPUS[worker.environment().gpu_key]
        config = space.config({"MODE": mode})
        task = kernel_task(space, config, compile_kernel(render(space, config, gpu)), gpu, problem, seed=0,
                           warmup=3, repeats=20)
        result = worker.run(dataclasses.replace(task, race=(RaceStage(1, 1e-6),), warmup=0), timeout_s=60)
    if verified:
        assert isinstance(result, Measurement) and result.max_error <= 1.0
        assert len(result.timing.samples_ms) == 1
    else:
        assert isinstance(result, Failure) and result.failure_class == "wrong_answer"
