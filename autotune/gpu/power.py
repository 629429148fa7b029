"""GPU power and energy over a window of back-to-back GEMMs, read through NVML.

Imported only inside the GPU worker process. :class:`NvmlPower` reads one
device; :func:`measure_window` runs GEMM batches for about a second while a
thread polls power, SM clock, temperature and clock-event reasons, and reads
the energy counter before and after; :func:`idle_power` is the baseline.

NVML refreshes power and the energy counter only about every 100 ms on the
H200, so a 1 s window gives about 10 distinct readings: every poll is kept
(repeats included) and averaged. A plain counter delta over 1 s would be
uncertain by a whole refresh (10%), so the sampler also notes when the counter
changes, and the counter's energy is its increase between the first and last
change seen in the window over the time between them (uncertain by one poll,
10 ms, at each end), scaled to the window. The NVML module is a parameter so
tests can pass a fake.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from autotune.records import EnergyWindow

# Clock-event reasons that mean the GPU was slowed by power or heat (not idle
# or an application clock setting). Newer pynvml names first, then the old ones.
THROTTLE_REASONS = ("SwPowerCap", "HwSlowdown", "SwThermalSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown")
# nvmlFieldValue_t valueType -> the member of its value union.
_FIELD_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


class PowerUnavailable(RuntimeError):
    """NVML is missing or cannot read this device's power."""


def throttle_mask(nvml) -> int:
    """The OR of the power-cap, thermal and hardware-slowdown reason bits."""
    mask = 0
    for name in THROTTLE_REASONS:
        bit = getattr(nvml, f"nvmlClocksEventReason{name}", None)
        mask |= bit if bit is not None else getattr(nvml, f"nvmlClocksThrottleReason{name}", 0)
    return mask


class NvmlPower:
    """Power, energy, SM clock, temperature and clock-event reasons of one GPU.

    Args:
        pci_bus_id: the device's PCI bus id (as CuPy reports it); None: index 0.
        nvml: the pynvml module, or a fake with the same names; None imports pynvml.

    Raises:
        PowerUnavailable: pynvml is missing or NVML cannot open the device.
    """

    def __init__(self, pci_bus_id: str | None = None, nvml=None):
        if nvml is None:
            try:
                import pynvml as nvml
            except ImportError as exc:
                raise PowerUnavailable("pynvml (nvidia-ml-py) is not installed") from exc
        self.nvml = nvml
        try:
            nvml.nvmlInit()
            if pci_bus_id:
                self.handle = nvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
            else:
                self.handle = nvml.nvmlDeviceGetHandleByIndex(0)
        except nvml.NVMLError as exc:
            raise PowerUnavailable(f"NVML cannot open the device: {exc}") from exc
        self.throttle_mask = throttle_mask(nvml)
        self._reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        self._instant_field = getattr(nvml, "NVML_FI_DEV_POWER_INSTANT", None)

    def close(self) -> None:
        """Release this NVML reference (nvmlInit/nvmlShutdown are counted)."""
        self.nvml.nvmlShutdown()

    def instant_w(self) -> float:
        """Instantaneous power in W; the averaged power reading where that field is missing.

        Raises:
            PowerUnavailable: neither reading works on this device.
        """
        watts = self._field_w()
        if watts is not None:
            return watts
        try:
            return self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0
        except self.nvml.NVMLError as exc:
            raise PowerUnavailable(f"NVML cannot read power: {exc}") from exc

    def energy_mj(self) -> int | None:
        """The total-energy counter in mJ since the driver loaded, or None."""
        return self._read(self.nvml.nvmlDeviceGetTotalEnergyConsumption, self.handle)

    def sm_clock_mhz(self) -> int | None:
        return self._read(self.nvml.nvmlDeviceGetClockInfo, self.handle, self.nvml.NVML_CLOCK_SM)

    def temperature_c(self) -> int | None:
        return self._read(self.nvml.nvmlDeviceGetTemperature, self.handle, self.nvml.NVML_TEMPERATURE_GPU)

    def clock_event_reasons(self) -> int | None:
        """Bit mask of why clocks are below maximum now (idle, power cap, thermal...)."""
        return self._read(self._reasons, self.handle) if self._reasons else None

    def _field_w(self) -> float | None:
        if self._instant_field is None:
            return None
        try:
            field = self.nvml.nvmlDeviceGetFieldValues(self.handle, [self._instant_field])[0]
        except self.nvml.NVMLError:
            return None
        if field.nvmlReturn != 0:
            return None
        return getattr(field.value, _FIELD_MEMBERS.get(field.valueType, "uiVal")) / 1000.0  # mW

    def _read(self, query, *args) -> int | None:
        try:
            return int(query(*args))
        except self.nvml.NVMLError:
            return None


class _Sampler:
    """A thread that polls ``power`` every ``period_s`` until stopped."""

    def __init__(self, power: NvmlPower, period_s: float):
        self.power, self.period_s = power, period_s
        self.watts: list[float] = []
        self.clocks: list[int] = []
        self.temperatures: list[int] = []
        self.reasons = 0
        self.counter_changes: list[tuple[float, int]] = []  # (perf_counter s, mJ) when the counter moved
        self._last_counter: int | None = None
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="power-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop and join; re-raise what the thread raised."""
        self._stop.set()
        self._thread.join()
        if self.error is not None:
            raise self.error

    def _loop(self) -> None:
        try:
            while True:
                self._sample()
                if self._stop.wait(self.period_s):
                    return
        except BaseException as exc:  # handed to the caller by stop()
            self.error = exc

    def _sample(self) -> None:
        self.watts.append(self.power.instant_w())
        clock, temperature = self.power.sm_clock_mhz(), self.power.temperature_c()
        if clock is not None:
            self.clocks.append(clock)
        if temperature is not None:
            self.temperatures.append(temperature)
        self.reasons |= self.power.clock_event_reasons() or 0
        counter = self.power.energy_mj()
        if counter is not None and self._last_counter is not None and counter != self._last_counter:
            self.counter_changes.append((time.perf_counter(), counter))
        self._last_counter = counter

    def counter_power_w(self, min_span_s: float) -> float | None:
        """Mean power from the counter between its first and last change seen, if they span ``min_span_s``."""
        if len(self.counter_changes) < 2:
            return None
        (t0, e0), (t1, e1) = self.counter_changes[0], self.counter_changes[-1]
        if t1 - t0 < min_span_s:
            return None
        return (e1 - e0) / 1000.0 / (t1 - t0)


def idle_power(power: NvmlPower, seconds: float = 0.5, sample_period_s: float = 0.01, settle_s: float = 0.0) -> float:
    """Mean instantaneous power (W) over ``seconds``; call it with the GPU idle.

    ``settle_s`` is waited first, so readings that still show earlier work (NVML
    lags by up to one refresh, about 100 ms) are left out.
    """
    time.sleep(settle_s)
    sampler = _Sampler(power, sample_period_s)
    sampler.start()
    time.sleep(seconds)
    sampler.stop()
    return sum(sampler.watts) / len(sampler.watts)


def _no_wait() -> None:
    """For a ``run_batch`` that returns only when its work is done."""


def measure_window(
    run_batch: Callable[[], int],
    power: NvmlPower,
    seconds: float = 1.0,
    sample_period_s: float = 0.01,
    synchronize: Callable[[], None] = _no_wait,
    idle_w: float | None = None,
    warmup_s: float = 0.0,
) -> EnergyWindow:
    """Run ``run_batch(); synchronize()`` until ``seconds`` have passed, measuring power.

    Args:
        run_batch: enqueues some GEMMs and returns how many (at least 1).
        power: the device to read.
        seconds: the least wall time of the window; it ends at the first
            synchronize after that, so batches should be short (about 20 ms).
        sample_period_s: how often the sampling thread polls NVML.
        synchronize: waits for the enqueued GEMMs to finish.
        idle_w: the idle baseline to record with the window (see :func:`idle_power`).
        warmup_s: batches run for this long before the window, unmeasured, so
            power, clocks and NVML's lagging readings have settled when it opens.

    Returns:
        The window; its time runs from the first enqueue to the final synchronize.
    """
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    _run_for(run_batch, synchronize, warmup_s)
    sampler = _Sampler(power, sample_period_s)
    energy_before = power.energy_mj()
    sampler.start()
    start = time.perf_counter()
    try:
        launches = _run_for(run_batch, synchronize, seconds)
        elapsed = time.perf_counter() - start
    finally:
        sampler.stop()
    energy_after = power.energy_mj()
    if launches < 1:
        raise ValueError(f"run_batch reported {launches} launches in the window")
    counter_w = sampler.counter_power_w(min_span_s=seconds / 2)
    if counter_w is not None:
        counter_j = counter_w * elapsed
    elif None not in (energy_before, energy_after):
        counter_j = (energy_after - energy_before) / 1000.0
    else:
        counter_j = None
    return _window(sampler, elapsed, launches, counter_j, idle_w, power.throttle_mask)


def _run_for(run_batch: Callable[[], int], synchronize: Callable[[], None], seconds: float) -> int:
    """``run_batch(); synchronize()`` until ``seconds`` have passed (none if 0); the launches run."""
    launches, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        launches += run_batch()
        synchronize()
    return launches


def _window(
    sampler: _Sampler, seconds: float, launches: int, counter_j: float | None, idle_w: float | None, mask: int
) -> EnergyWindow:
    mean_w = sum(sampler.watts) / len(sampler.watts)
    clocks, temperatures = sampler.clocks, sampler.temperatures
    return EnergyWindow(
        seconds=seconds,
        launches=launches,
        mean_power_w=mean_w,
        energy_counter_j=counter_j,
        energy_per_gemm_j=mean_w * seconds / launches,
        energy_per_gemm_counter_j=counter_j / launches if counter_j is not None else None,
        idle_power_w=idle_w,
        sm_clock_mhz_mean=sum(clocks) / len(clocks) if clocks else None,
        sm_clock_mhz_min=min(clocks) if clocks else None,
        temperature_c_max=max(temperatures) if temperatures else None,
        throttle_reasons=sampler.reasons,
        throttled=bool(sampler.reasons & mask),
        samples=len(sampler.watts),
    )
