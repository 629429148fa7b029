"""Plain values that flow from the GPU worker to the database and reports."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Environment:
    """Everything about the machine that can change a measurement."""

    gpu_key: str  # "h200"; "unknown" when the device matches no spec
    gpu_name: str  # as the device reports it, "NVIDIA H200"
    arch: str  # "sm_90"
    driver: str  # "580.159.04"
    cuda_runtime: str  # "13.0"
    nvrtc: str  # "13.0"
    cupy: str  # "14.2.0"


@dataclasses.dataclass(frozen=True)
class Timing:
    """Kernel times of repeated launches, each bracketed by its own events."""

    median_ms: float
    min_ms: float
    max_ms: float
    q25_ms: float
    q75_ms: float
    samples_ms: tuple[float, ...]

    @classmethod
    def from_samples(cls, samples_ms: list[float]) -> Timing:
        """Median, extremes and quartiles of per-launch times in milliseconds."""
        import numpy  # here, not at the top: compile processes load this module and need no numpy

        q25, median, q75 = (float(x) for x in numpy.percentile(samples_ms, [25, 50, 75]))
        return cls(median, float(min(samples_ms)), float(max(samples_ms)), q25, q75,
                   tuple(float(x) for x in samples_ms))

    @property
    def spread(self) -> float:
        """Inter-quartile range over the median."""
        return (self.q75_ms - self.q25_ms) / self.median_ms if self.median_ms > 0 else float("inf")


@dataclasses.dataclass(frozen=True)
class Resources:
    """What ptxas reported for a compiled kernel."""

    registers: int
    smem_static: int  # bytes of static shared memory
    smem_dynamic: int  # bytes requested at launch
    spill_stores: int
    spill_loads: int
    stack_frame: int

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"resources: {field.name} {value!r} is not a count (an integer >= 0)")

    @property
    def smem_total(self) -> int:
        return self.smem_static + self.smem_dynamic


@dataclasses.dataclass(frozen=True)
class Measurement:
    """One verified, timed run of a kernel (a candidate or the cuBLAS reference)."""

    timing: Timing
    tflops: float
    max_error: float  # worst |out - ref| / tolerance bound over all elements (<= 1 passes)
    sm_clock_mhz: int | None = None
    throttle_reasons: int | None = None  # NVML clock-event reasons bit mask
    temperature_c: int | None = None
    resources: Resources | None = None


@dataclasses.dataclass(frozen=True)
class Failure:
    """A candidate that produced no valid measurement, and why."""

    failure_class: str  # a FailureClass value
    message: str


@dataclasses.dataclass(frozen=True)
class EnergyWindow:
    """Power and energy of one window of back-to-back GEMMs (about 1 s).

    NVML refreshes power and the energy counter about every 100 ms on the H200,
    so a 1 s window holds about 10 distinct readings; ``mean_power_w`` averages
    every poll (repeats included), which weights each reading by how long it held.
    """

    seconds: float  # wall time from the first enqueue to the final synchronize
    launches: int  # GEMMs run in the window
    mean_power_w: float  # mean of the instantaneous power samples
    energy_counter_j: float | None  # delta of the total-energy counter; None if unavailable
    energy_per_gemm_j: float  # mean_power_w * seconds / launches
    energy_per_gemm_counter_j: float | None  # energy_counter_j / launches
    idle_power_w: float | None  # mean power with the GPU idle, sampled before the window
    sm_clock_mhz_mean: float | None
    sm_clock_mhz_min: int | None
    temperature_c_max: int | None
    throttle_reasons: int  # NVML clock-event reason bits seen in the window, OR-ed
    throttled: bool  # a power-cap, thermal or hardware-slowdown reason was seen
    samples: int  # power samples taken

    def gflop_per_joule(self, flops: float, counter: bool = False) -> float:
        """GFLOP per joule for GEMMs of ``flops`` each (from the energy counter if ``counter``)."""
        joules = self.energy_per_gemm_counter_j if counter else self.energy_per_gemm_j
        if joules is None:
            raise ValueError("this window has no energy-counter reading")
        return flops / 1e9 / joules if joules > 0 else float("inf")
