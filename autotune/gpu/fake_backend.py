"""Backends that need no GPU: :class:`FakeBackend`, a made-up H200 running at fixed rates (the whole path
tested on a CPU machine), and :class:`UnavailableBackend`, which finds no GPU at all."""

from __future__ import annotations

import dataclasses
import hashlib

from autotune.errors import FailureClass
from autotune.gpu.backend import GpuUnavailable
from autotune.gpu.launch import SMEM_DEFAULT_LIMIT
from autotune.gpu.tasks import CublasTask, EnergyTask, KernelTask, Result, Task
from autotune.problem import GemmProblem
from autotune.records import EnergyWindow, Measurement, Resources, Timing


class FakeBackend:
    """No GPU: a made-up H200 answers hello; kernels and cuBLAS "run" at fixed rates.

    Each kernel's rate is fixed by its name, between 30% and 100% of KERNEL_TFLOPS,
    so a search has something to find and racing has slower kernels to stop.
    """

    KERNEL_TFLOPS = 10.0
    CUBLAS_TFLOPS = 40.0
    BACK_TO_BACK_SLOWDOWN = 1.1  # a kernel timed back to back is this much slower; cuBLAS is not (a power-hungry kernel)
    POWER_W = 600.0
    IDLE_POWER_W = 120.0

    def __init__(self, device: int = 0):
        self.device = device

    def hello(self) -> dict:
        """A made-up H200, marked ``simulated`` so its results are stored apart from a real one's."""
        return {
            "simulated": True,
            "name": "NVIDIA H200 (fake)",
            "arch": "sm_90",
            "driver": "0.0 (fake)",
            "cuda_runtime": "0.0",
            "nvrtc": "0.0",
            "cupy": "none",
            "properties": {
                "l2_bytes": 60 * 1024 * 1024,
                "sms": 132,
                "smem_per_block": SMEM_DEFAULT_LIMIT,
                "smem_per_block_optin": 232448,
                "smem_per_sm": 233472,
                "regs_per_block": 65536,
                "regs_per_sm": 65536,
                "max_threads_per_block": 1024,
                "max_threads_per_sm": 2048,
                "total_memory_bytes": 141 * 1024**3,
                "pci_bus_id": "fake",
            },
        }

    def run(self, task: Task) -> Result:
        if isinstance(task, KernelTask):
            tflops = self.kernel_tflops(task.entry) / (self.BACK_TO_BACK_SLOWDOWN if task.back_to_back else 1.0)
            measurement = _fixed_rate_measurement(task.problem, tflops, task.resources)
            ms = measurement.timing.median_ms
            lost = [stage.launches for stage in task.race if ms > stage.limit_ms and stage.launches < task.repeats]
            samples = (ms,) * min(lost, default=task.repeats)  # as on the GPU: the first stage it loses
            return dataclasses.replace(measurement, timing=Timing(ms, ms, ms, ms, ms, samples))
        if isinstance(task, CublasTask):
            return _fixed_rate_measurement(task.problem, self.CUBLAS_TFLOPS, None)
        if isinstance(task, EnergyTask):
            return self._energy_window(task)
        raise TypeError(f"FakeBackend cannot run {type(task).__name__}")

    @classmethod
    def kernel_tflops(cls, entry: str) -> float:
        """The made-up rate of the kernel called ``entry``."""
        fraction = int.from_bytes(hashlib.sha256(entry.encode()).digest()[:4], "little") / 2**32
        return cls.KERNEL_TFLOPS * (0.3 + 0.7 * fraction)

    def classify(self, exc: Exception) -> tuple[str, bool]:
        return FailureClass.CRASH.value, True

    def _energy_window(self, task: EnergyTask) -> EnergyWindow:
        """A made-up window at POWER_W: fixed rate, 10 ms samples, no waiting."""
        tflops = self.CUBLAS_TFLOPS if task.kernel is None else self.kernel_tflops(task.kernel.entry)
        launches = max(1, round(task.seconds * tflops * 1e12 / task.problem.flops))
        joules = self.POWER_W * task.seconds
        return EnergyWindow(
            seconds=task.seconds, launches=launches, mean_power_w=self.POWER_W, energy_counter_j=joules,
            energy_per_gemm_j=joules / launches, energy_per_gemm_counter_j=joules / launches,
            idle_power_w=self.IDLE_POWER_W, sm_clock_mhz_mean=1980.0, sm_clock_mhz_min=1980,
            temperature_c_max=50, throttle_reasons=0, throttled=False, samples=max(1, round(task.seconds / 0.01)),
        )  # fmt: skip


class UnavailableBackend:
    """A backend that always finds no GPU (tests the no-GPU path anywhere)."""

    def __init__(self, device: int = 0):
        raise GpuUnavailable(f"the 'none' backend has no device {device}")


def _fixed_rate_measurement(problem: GemmProblem, tflops: float, resources: Resources | None) -> Measurement:
    ms = problem.flops / (tflops * 1e12) * 1e3
    timing = Timing(ms, ms, ms, ms, ms, (ms,))
    return Measurement(timing=timing, tflops=problem.tflops(ms), max_error=0.0, resources=resources)
