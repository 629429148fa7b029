"""Energy windows: NVML readings through a fake NVML module, the worker's EnergyTask,
and (marked ``gpu``) real windows of cuBLAS and a naive kernel."""

from __future__ import annotations

import statistics
import time
import types

import pytest

from autotune.gpu import power as power_module
from autotune.gpu.energy import launches_per_batch
from autotune.gpu.power import NvmlPower, PowerUnavailable, idle_power, measure_window, throttle_mask
from autotune.gpu.tasks import EnergyTask, KernelTask
from autotune.gpu.worker import GpuWorker
from autotune.problem import GemmProblem
from autotune.records import EnergyWindow

REFRESH_S = 0.1  # the fake, like the H200, refreshes its power reading every 100 ms
SW_POWER_CAP, GPU_IDLE, APP_CLOCKS = 0x4, 0x1, 0x2


class FakeClock:
    """The time that :mod:`autotune.gpu.power` reads in a test: it passes only when a fake says so (a poll of
    the fake NVML, a fake GPU batch), never with the machine's load. Whole microseconds, so sums are exact."""

    def __init__(self):
        self.microseconds = 0

    def __call__(self) -> float:
        return self.microseconds / 1e6

    def advance(self, seconds: float) -> None:
        self.microseconds += round(seconds * 1e6)

    def sleep(self, seconds: float) -> None:
        """``time.sleep`` for the code under test: the machine's time, and then, where polls move the clock,
        until they have moved it by ``seconds`` (however slow the sampling thread is under load)."""
        start = self()
        time.sleep(seconds)
        deadline = time.monotonic() + 60
        while start < self() < start + seconds and time.monotonic() < deadline:
            time.sleep(0.005)


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    """A :class:`FakeClock` that ``autotune.gpu.power`` reads instead of ``time.perf_counter``."""
    fake = FakeClock()
    monkeypatch.setattr(power_module, "time", types.SimpleNamespace(perf_counter=fake, sleep=fake.sleep))
    return fake


class FakeNvmlError(Exception):
    pass


class FakeNvml:
    """The part of pynvml that NvmlPower uses, with power scripted over time.

    Power follows ``watts`` (cycled), one value per 100 ms refresh from creation;
    the energy counter (mJ) is the exact integral of that power. Its time is the machine's,
    or ``clock`` (a :class:`FakeClock`); with ``poll_s`` each power reading (a poll of the
    sampling thread) first moves that clock on by ``poll_s``, so every refresh gets the same
    number of polls and a change of the counter is seen at the very poll it happens.
    """

    NVMLError = FakeNvmlError
    NVML_FI_DEV_POWER_INSTANT = 186
    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0
    nvmlClocksEventReasonGpuIdle = GPU_IDLE
    nvmlClocksEventReasonApplicationsClocksSetting = APP_CLOCKS
    nvmlClocksEventReasonSwPowerCap = SW_POWER_CAP
    nvmlClocksEventReasonHwSlowdown = 0x8
    nvmlClocksEventReasonSwThermalSlowdown = 0x20
    nvmlClocksEventReasonHwThermalSlowdown = 0x40
    nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x80

    def __init__(self, watts=(550.0, 650.0), reasons=0, clocks=(1980, 1755), energy=True, counter_ticks=False,
                 clock=None, poll_s=None):
        self.watts, self.reasons, self.clocks, self.energy = tuple(watts), reasons, tuple(clocks), energy
        self.counter_ticks = counter_ticks  # the counter moves only at each 100 ms refresh, as on the H200
        self.clock, self.poll_s = clock or time.perf_counter, poll_s
        self.start = self.clock()
        self.opened = None
        self.clock_calls = 0

    def _elapsed_s(self) -> float:
        return self.clock() - self.start

    def _refreshes(self, elapsed: float) -> int:
        return int(round(elapsed * 1e6) // round(REFRESH_S * 1e6))  # whole microseconds: no 0.3 / 0.1 = 2.9999

    def _power_w(self) -> float:
        if self.poll_s is not None:
            self.clock.advance(self.poll_s)
        return self.watts[self._refreshes(self._elapsed_s()) % len(self.watts)]

    def _energy_j(self) -> float:
        elapsed = self._elapsed_s()
        steps = self._refreshes(elapsed)
        rest = elapsed - steps * REFRESH_S
        if self.counter_ticks:
            rest = 0.0
        done = sum(self.watts[i % len(self.watts)] for i in range(steps)) * REFRESH_S
        return done + self.watts[steps % len(self.watts)] * rest

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetHandleByPciBusId(self, bus_id):
        self.opened = ("pci", bus_id)
        return "handle"

    def nvmlDeviceGetHandleByIndex(self, index):
        self.opened = ("index", index)
        return "handle"

    def nvmlDeviceGetFieldValues(self, handle, field_ids):
        assert field_ids == [self.NVML_FI_DEV_POWER_INSTANT]
        value = types.SimpleNamespace(uiVal=int(self._power_w() * 1000))
        return [types.SimpleNamespace(nvmlReturn=0, valueType=1, value=value)]

    def nvmlDeviceGetPowerUsage(self, handle):
        return int(self._power_w() * 1000)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        if not self.energy:
            raise FakeNvmlError("not supported")
        return int(self._energy_j() * 1000)

    def nvmlDeviceGetClockInfo(self, handle, clock):
        self.clock_calls += 1
        return self.clocks[self.clock_calls % len(self.clocks)]

    def nvmlDeviceGetTemperature(self, handle, sensor):
        return 40 + self.clock_calls % 5

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return self.reasons


class OldNamesNvml(FakeNvml):
    """An older pynvml: no power field, throttle-reason names and function only."""

    NVML_FI_DEV_POWER_INSTANT = None
    nvmlClocksEventReasonSwPowerCap = None
    nvmlClocksEventReasonHwSlowdown = None
    nvmlClocksEventReasonSwThermalSlowdown = None
    nvmlClocksEventReasonHwThermalSlowdown = None
    nvmlClocksEventReasonHwPowerBrakeSlowdown = None
    nvmlClocksThrottleReasonSwPowerCap = SW_POWER_CAP
    nvmlClocksThrottleReasonHwSlowdown = 0x8
    nvmlClocksThrottleReasonSwThermalSlowdown = 0x20
    nvmlClocksThrottleReasonHwThermalSlowdown = 0x40
    nvmlClocksThrottleReasonHwPowerBrakeSlowdown = 0x80
    nvmlDeviceGetCurrentClocksEventReasons = None

    def nvmlDeviceGetFieldValues(self, handle, field_ids):
        raise AssertionError("the field is not defined here")

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        return self.reasons


class Batches:
    """``run_batch``: a 20 ms GPU batch of ``per_batch`` GEMMs, counted; it sleeps that long, or with ``clock``
    moves that clock on by as much."""

    def __init__(self, per_batch=5, batch_s=0.02, clock=None):
        self.per_batch, self.batch_s, self.clock = per_batch, batch_s, clock
        self.counts: list[int] = []
        self.synchronized = 0

    def __call__(self) -> int:
        if self.clock is None:
            time.sleep(self.batch_s)
        else:
            self.clock.advance(self.batch_s)
        self.counts.append(self.per_batch)
        return self.per_batch

    def synchronize(self) -> None:
        self.synchronized += 1


def _window(nvml, seconds=0.5, batches=None, **kwargs) -> tuple[EnergyWindow, Batches, float]:
    """The window, its batches, and the time it took on the clock the code under test reads."""
    batches = batches or Batches()
    power = NvmlPower("0000:19:00.0", nvml=nvml)
    started = power_module.time.perf_counter()
    window = measure_window(batches, power, seconds=seconds, synchronize=batches.synchronize, **kwargs)
    return window, batches, power_module.time.perf_counter() - started


def polled(clock, **kwargs) -> FakeNvml:
    """A fake NVML whose time passes 10 ms per poll of the sampling thread (its period)."""
    return FakeNvml(clock=clock, poll_s=0.01, **kwargs)


# -- NvmlPower ---------------------------------------------------------------------------


def test_power_reads_the_instant_field_and_opens_by_bus_id():
    nvml = FakeNvml(watts=(432.5,))
    power = NvmlPower("0000:19:00.0", nvml=nvml)
    assert nvml.opened == ("pci", "0000:19:00.0")
    assert power.instant_w() == pytest.approx(432.5)
    assert power.sm_clock_mhz() in (1980, 1755) and power.clock_event_reasons() == 0
    assert power.energy_mj() >= 0


def test_power_without_bus_id_opens_index_0():
    nvml = FakeNvml()
    NvmlPower(nvml=nvml)
    assert nvml.opened == ("index", 0)


def test_old_pynvml_names_fall_back():
    nvml = OldNamesNvml(watts=(300.0,), reasons=SW_POWER_CAP)
    power = NvmlPower(nvml=nvml)
    assert power.instant_w() == pytest.approx(300.0)  # from nvmlDeviceGetPowerUsage
    assert power.clock_event_reasons() == SW_POWER_CAP
    assert throttle_mask(nvml) == throttle_mask(FakeNvml()) == 0x4 | 0x8 | 0x20 | 0x40 | 0x80


def test_installed_pynvml_has_the_reason_names():
    pynvml = pytest.importorskip("pynvml")
    mask = throttle_mask(pynvml)
    assert mask & SW_POWER_CAP and not mask & (GPU_IDLE | APP_CLOCKS)
    assert hasattr(pynvml, "NVML_FI_DEV_POWER_INSTANT")


def test_unreadable_power_is_power_unavailable():
    nvml = OldNamesNvml()

    def broken(handle):
        raise FakeNvmlError("not supported")

    nvml.nvmlDeviceGetPowerUsage = broken
    power = NvmlPower(nvml=nvml)
    with pytest.raises(PowerUnavailable):
        power.instant_w()
    with pytest.raises(PowerUnavailable):  # raised in the sampling thread, re-raised here
        measure_window(Batches(), power, seconds=0.05)


def test_unopenable_device_is_power_unavailable():
    nvml = FakeNvml()

    def missing(bus_id):
        raise FakeNvmlError("not found")

    nvml.nvmlDeviceGetHandleByPciBusId = missing
    with pytest.raises(PowerUnavailable, match="cannot open"):
        NvmlPower("0000:00:00.0", nvml=nvml)


# -- measure_window ------------------------------------------------------------------------


def test_window_mean_power_and_counter_energy_per_gemm(clock):
    window, batches, wall = _window(polled(clock, watts=(550.0, 650.0)), seconds=0.5)
    assert window.mean_power_w == pytest.approx(600.0, rel=0.03)  # 5 refreshes of 550/650 in 0.5 s
    assert window.launches == sum(batches.counts) and batches.synchronized == len(batches.counts)
    assert window.seconds >= 0.5 and wall >= window.seconds
    assert window.energy_counter_j == pytest.approx(600.0 * window.seconds, rel=0.03)
    assert window.energy_per_gemm_counter_j == pytest.approx(window.energy_counter_j / window.launches)
    assert window.energy_per_gemm_j == pytest.approx(window.mean_power_w * window.seconds / window.launches)
    assert window.samples >= 20  # polled every 10 ms; repeats of one reading are all kept
    assert window.sm_clock_mhz_min == 1755 and 1755 <= window.sm_clock_mhz_mean <= 1980
    assert 40 <= window.temperature_c_max <= 44
    assert window.gflop_per_joule(2e9) == pytest.approx(2.0 / window.energy_per_gemm_j)


def test_counter_energy_is_taken_between_its_ticks(clock):
    """A counter that moves every 100 ms makes a 0.35 s delta up to 30% off; between ticks it is not."""
    window, _, _ = _window(polled(clock, watts=(600.0,), counter_ticks=True), seconds=0.35)
    assert window.energy_counter_j == pytest.approx(600.0 * window.seconds, rel=0.08)


def test_short_window_falls_back_to_the_counter_delta(clock):
    window, _, _ = _window(polled(clock, watts=(600.0,)), seconds=0.05)
    assert window.energy_counter_j == pytest.approx(600.0 * window.seconds, rel=0.2)


def test_power_cap_reason_sets_throttled(clock):
    window, _, _ = _window(polled(clock, reasons=SW_POWER_CAP | GPU_IDLE), seconds=0.1)
    assert window.throttled and window.throttle_reasons == SW_POWER_CAP | GPU_IDLE


@pytest.mark.parametrize("reasons", [0, GPU_IDLE, GPU_IDLE | APP_CLOCKS])
def test_idle_or_clock_setting_reasons_are_not_throttling(clock, reasons):
    window, _, _ = _window(polled(clock, reasons=reasons), seconds=0.1)
    assert not window.throttled and window.throttle_reasons == reasons


def test_window_lasts_at_least_seconds_even_with_long_batches(clock):
    batches = Batches(per_batch=3, batch_s=0.1, clock=clock)  # the batches are what takes time
    window, batches, wall = _window(FakeNvml(clock=clock), seconds=0.25, batches=batches)
    assert window.seconds >= 0.25 and len(batches.counts) == 3 and window.launches == 9


def test_warmup_batches_are_not_counted(clock):
    batches = Batches(per_batch=2, clock=clock)
    window, _, wall = _window(FakeNvml(clock=clock), seconds=0.2, batches=batches, warmup_s=0.1)
    assert window.launches < sum(batches.counts) and wall >= 0.3
    assert window.seconds < wall


def test_missing_energy_counter_gives_none(clock):
    window, _, _ = _window(polled(clock, energy=False), seconds=0.1)
    assert window.energy_counter_j is None and window.energy_per_gemm_counter_j is None
    assert window.energy_per_gemm_j > 0
    with pytest.raises(ValueError, match="energy-counter"):
        window.gflop_per_joule(1e9, counter=True)


def test_a_window_needs_launches_and_time():
    power = NvmlPower(nvml=FakeNvml())
    with pytest.raises(ValueError, match="0 launches"):
        measure_window(lambda: 0, power, seconds=0.05)
    with pytest.raises(ValueError, match="seconds"):
        measure_window(Batches(), power, seconds=0)


def test_idle_power_is_the_mean_of_idle_readings(clock):
    power = NvmlPower(nvml=polled(clock, watts=(120.0, 130.0)))
    started = time.perf_counter()
    assert idle_power(power, seconds=0.4, settle_s=0.05) == pytest.approx(125.0, rel=0.02)
    assert time.perf_counter() - started >= 0.45


def test_idle_baseline_is_recorded_with_the_window(clock):
    window, _, _ = _window(polled(clock), seconds=0.05, idle_w=123.0)
    assert window.idle_power_w == 123.0


def test_launches_per_batch_aims_at_20_ms():
    assert launches_per_batch(2.0) == 10
    assert launches_per_batch(0.215) == 93
    assert launches_per_batch(50.0) == 1
    assert launches_per_batch(1e-6) == 10_000 and launches_per_batch(0.0) == 10_000


# -- through the worker (fake backend) -----------------------------------------------------


def test_fake_backend_answers_energy_tasks():
    problem = GemmProblem(4096, 4096, 4096)
    kernel = KernelTask(b"\0cubin", "k", (1, 1, 1), (128, 1, 1), 0, problem, seed=1, warmup=1, repeats=3)
    with GpuWorker(backend="fake", start_timeout_s=60) as worker:
        cublas = worker.run(EnergyTask(None, problem, seed=1), timeout_s=10)
        custom = worker.run(EnergyTask(kernel, problem, seed=1, seconds=2.0), timeout_s=10)
    for window in (cublas, custom):
        assert isinstance(window, EnergyWindow), window
        assert window.launches > 0 and window.mean_power_w > window.idle_power_w and not window.throttled
        assert window.energy_per_gemm_j == pytest.approx(window.mean_power_w * window.seconds / window.launches)
    assert custom.seconds == 2.0 and custom.energy_per_gemm_j > cublas.energy_per_gemm_j  # slower, same power
    assert cublas.gflop_per_joule(problem.flops) == pytest.approx(40e12 / 600.0 / 1e9, rel=0.01)


# -- real GPU ------------------------------------------------------------------------------

NAIVE = r"""
extern "C" __global__ void naive(const float* A, const float* B, float* C, int M, int N, int K,
                                 float alpha, float beta) {
    int r = blockIdx.y * blockDim.y + threadIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M || c >= N) return;
    float s = 0.f;
    for (int k = 0; k < K; ++k) s += A[r * K + k] * B[k * N + c];
    C[r * N + c] = beta == 0.f ? alpha * s : alpha * s + beta * C[r * N + c];
}
"""


@pytest.fixture(scope="module")
def gpu():
    with GpuWorker(backend="cupy") as worker:
        yield worker


@pytest.mark.gpu
def test_gpu_cublas_sgemm_4096_energy_repeats_within_5_percent(gpu):
    problem = GemmProblem(4096, 4096, 4096)
    windows = [gpu.run(EnergyTask(None, problem, seed=1), timeout_s=120) for _ in range(3)]
    assert all(isinstance(w, EnergyWindow) for w in windows), windows
    energies = [w.energy_per_gemm_j for w in windows]
    spread = (max(energies) - min(energies)) / statistics.median(energies)
    assert spread < 0.05, (energies, windows)
    for w in windows:
        assert w.seconds >= 1.0 and w.samples >= 50 and w.mean_power_w > w.idle_power_w, w
        assert 0.1 < w.energy_per_gemm_j < 20.0, w  # about 1.8 J measured on the H200


@pytest.mark.gpu
def test_gpu_naive_kernel_window_draws_more_than_idle(gpu):
    from cupy.cuda import nvrtc

    program = nvrtc.createProgram(NAIVE, "power_test.cu", [], [])
    try:
        nvrtc.compileProgram(program, [f"--gpu-architecture={gpu.environment().arch}"])
        cubin = nvrtc.getCUBIN(program)
    finally:
        nvrtc.destroyProgram(program)
    problem = GemmProblem(1024, 1024, 1024)
    kernel = KernelTask(cubin, "naive", (64, 64, 1), (16, 16, 1), 0, problem, seed=2, warmup=1, repeats=3)
    window = gpu.run(EnergyTask(kernel, problem, seed=2), timeout_s=120)
    assert isinstance(window, EnergyWindow), window
    assert window.launches > 0 and window.mean_power_w > window.idle_power_w, window
    assert window.seconds >= 1.0 and window.energy_per_gemm_j > 0


# -- CupyBackend's energy wiring, on fakes of CuPy (no GPU) --------------------------------


class FakeStream:
    ptr = 0x57

    def __init__(self):
        self.capturing, self.captured, self.replays, self.syncs = False, 0, 0, 0

    def begin_capture(self):
        self.capturing = True
        self.captured = 0

    def end_capture(self):
        self.capturing = False
        stream = self

        class Graph:
            nodes = self.captured

            def upload(self, s):
                assert s is stream

            def launch(self, s):
                assert s is stream
                stream.replays += 1

        return Graph()

    def synchronize(self):
        self.syncs += 1


def _fake_backend(monkeypatch, launch_ms: float):
    from autotune.gpu import cupy_backend, energy

    monkeypatch.setattr(energy, "ENERGY_SETTLE_S", 0.0)
    monkeypatch.setattr(energy, "ENERGY_WARMUP_S", 0.0)
    backend = object.__new__(cupy_backend.CupyBackend)
    stream = backend.stream = FakeStream()
    event = types.SimpleNamespace(record=lambda s: None, synchronize=lambda: None)
    calls = {"kernel": 0, "cublas": 0}

    def launch_kernel(function, gx, gy, gz, bx, by, bz, shared_mem, stream_ptr, parameters, extra):
        assert stream_ptr == stream.ptr
        calls["kernel"] += 1
        stream.captured += stream.capturing

    driver = types.SimpleNamespace(launchKernel=launch_kernel)
    cuda = types.SimpleNamespace(Event=lambda: event, get_elapsed_time=lambda a, b: 3 * launch_ms, driver=driver)
    backend.cupy = types.SimpleNamespace(cuda=cuda)
    backend.device = 0
    pointer = types.SimpleNamespace(ptr=0x1000)
    array = types.SimpleNamespace(data=pointer, itemsize=4)
    operands = types.SimpleNamespace(a=array, b=array, out=array)
    backend.cache = types.SimpleNamespace(operands=lambda problem, seed: operands)

    def cublas_gemm(a, b, out, alpha, beta, element=None, transpose_b=False):
        def gemm():
            calls["cublas"] += 1
            assert not stream.capturing

        return gemm

    backend._load = lambda task: types.SimpleNamespace(ptr=0xF00)
    backend.measure = types.SimpleNamespace(CublasGemm=cublas_gemm)
    backend.energy = energy.EnergyMeter(backend.cupy, stream, device=0)
    backend.energy._power = NvmlPower(nvml=FakeNvml())
    return backend, stream, calls


def test_cupy_backend_kernel_energy_replays_a_graph_of_about_20_ms(monkeypatch):
    backend, stream, calls = _fake_backend(monkeypatch, launch_ms=2.0)
    problem = GemmProblem(256, 256, 256)
    kernel = KernelTask(b"", "k", (16, 16, 1), (16, 16, 1), 0, problem, seed=1, warmup=1, repeats=3)
    window = backend.run(EnergyTask(kernel, problem, seed=1, seconds=0.1))
    assert isinstance(window, EnergyWindow)
    assert calls["kernel"] == 4 + 10  # 1 warm-up + 3 timed, then 10 captured
    assert window.launches == 10 * (stream.replays - 1)  # one replay warms the graph
    assert window.idle_power_w is not None


def test_cupy_backend_reuses_a_recent_idle_baseline(monkeypatch):
    from autotune.gpu import energy, power

    backend, _, _ = _fake_backend(monkeypatch, launch_ms=2.0)
    baselines = []
    monkeypatch.setattr(power, "idle_power", lambda meter, **kw: baselines.append(1) or 100.0 + len(baselines))
    problem = GemmProblem(256, 256, 256)
    first = backend.run(EnergyTask(None, problem, seed=1, seconds=0.02))
    second = backend.run(EnergyTask(None, problem, seed=1, seconds=0.02))
    assert len(baselines) == 1 and first.idle_power_w == second.idle_power_w == 101.0
    monkeypatch.setattr(energy, "IDLE_BASELINE_MAX_AGE_S", 0.0)
    third = backend.run(EnergyTask(None, problem, seed=1, seconds=0.02))
    assert len(baselines) == 2 and third.idle_power_w == 102.0


def test_cupy_backend_cublas_energy_loops_plain_calls(monkeypatch):
    backend, stream, calls = _fake_backend(monkeypatch, launch_ms=0.5)
    window = backend.run(EnergyTask(None, GemmProblem(256, 256, 256), seed=1, seconds=0.05))
    assert isinstance(window, EnergyWindow) and stream.replays == 0
    assert window.launches % 40 == 0 and calls["cublas"] == 4 + window.launches
