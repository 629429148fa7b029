"""Energy windows on a real GPU with the real NVML: cuBLAS and a tuned-family seed kernel."""

import pytest

from autotune.kernel.compile import compile_kernel
from autotune.kernel.render import render
from autotune.problem import GemmProblem
from autotune.records import EnergyWindow, Measurement
from autotune.space.family import families_for_dtype, load_space

pytestmark = pytest.mark.gpu


def _assert_physical(window: EnergyWindow, time_ms: float, power_limit_w: float) -> None:
    """A window of back-to-back GEMMs must look like a busy GPU, and its two energy sources must agree."""
    assert isinstance(window, EnergyWindow), window
    assert window.samples >= 20 and window.launches >= 5, window
    assert window.idle_power_w is not None and 20 < window.idle_power_w < window.mean_power_w, window
    assert window.mean_power_w <= power_limit_w * 1.15, window
    # Energy per GEMM is power x time per GEMM: the window's own pace must match the timed run.
    per_gemm_ms = window.seconds * 1e3 / window.launches
    assert per_gemm_ms == pytest.approx(time_ms, rel=0.5), (per_gemm_ms, time_ms)
    assert window.energy_per_gemm_j == pytest.approx(window.mean_power_w * per_gemm_ms / 1e3, rel=1e-6)
    if window.energy_per_gemm_counter_j is not None:
        # The counter ticks about every 100 ms, so over a 1 s window its delta is good to about +-10%
        # (one tick); a unit or launch-count slip would be off by far more.
        tick = 0.1 / window.seconds
        assert window.energy_per_gemm_counter_j == pytest.approx(window.energy_per_gemm_j, rel=tick + 0.05), window
    assert window.sm_clock_mhz_min is not None and window.sm_clock_mhz_min > 0, window
    assert window.temperature_c_max is not None and 15 < window.temperature_c_max < 100, window


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_energy_windows_of_cublas_and_a_seed_kernel(worker, dtype):
    import pynvml

    from autotune.gpu.tasks import CublasTask, EnergyTask
    from autotune.gpu_specs import GPUS
    from autotune.search.evaluate import kernel_task

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        power_limit_w = pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000
    finally:
        pynvml.nvmlShutdown()
    gpu = GPUS[worker.environment().gpu_key]
    problem = GemmProblem(2048, 2048, 2048, dtype)

    cublas_time = worker.run(CublasTask(problem, seed=0, warmup=3, repeats=10), timeout_s=120)
    assert isinstance(cublas_time, Measurement), cublas_time
    cublas = worker.run(EnergyTask(None, problem, seed=0, seconds=1.0), timeout_s=120)
    _assert_physical(cublas, cublas_time.timing.median_ms, power_limit_w)

    space = load_space(families_for_dtype(dtype)[0])
    config = space.seeds[0]
    task = kernel_task(space, config, compile_kernel(render(space, config, gpu)), gpu, problem,
                       seed=0, warmup=3, repeats=10)  # fmt: skip
    timed = worker.run(task, timeout_s=120)
    assert isinstance(timed, Measurement), timed
    window = worker.run(EnergyTask(task, problem, seed=0, seconds=1.0), timeout_s=120)
    _assert_physical(window, timed.timing.median_ms, power_limit_w)
