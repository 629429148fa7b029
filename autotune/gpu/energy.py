"""How the CuPy backend measures an EnergyTask: an idle baseline, then GEMMs in batches of about 20 ms.

A kernel's batch is one replay of a CUDA graph of its launches; cuBLAS's is plain calls (it cannot be
graph-captured here). :func:`autotune.gpu.power.measure_window` runs the batches for the window and reads
NVML. The idle baseline is measured again only when the last one is over a minute old: each baseline lets
the GPU cool, and the windows that follow would start from a different state.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from autotune.records import EnergyWindow

ENERGY_BATCH_MS = 20.0  # GPU time of one batch (one graph replay) in an energy window
MAX_BATCH_LAUNCHES = 10_000  # launches in one batch at most, however short a launch
ENERGY_SETTLE_S = 0.2  # wait before the idle baseline: NVML still shows earlier work for ~100 ms
ENERGY_WARMUP_S = 1.0  # unmeasured batches before an energy window, so power, clocks and heat settle
IDLE_BASELINE_MAX_AGE_S = 60.0  # the idle baseline is measured again when older than this


class EnergyMeter:
    """Energy windows of GEMMs launched on one device's stream (opens NVML on the first window)."""

    def __init__(self, cupy, stream, device: int):
        self.cupy, self.stream, self.device = cupy, stream, device
        self._power = None  # autotune.gpu.power.NvmlPower, opened by the first window
        self._idle: tuple[float, float] | None = None  # (time.monotonic(), idle watts) of the last baseline

    def window(self, launch: Callable[[], None], seconds: float, graph: bool) -> EnergyWindow:
        """Idle baseline, then a window of ``seconds`` of ``launch()`` in ~20 ms batches: replays of a
        CUDA graph of launches with ``graph``, plain calls without."""
        from autotune.gpu import power

        meter = self._power_meter()
        self.stream.synchronize()
        idle_w = self._idle_baseline(meter)
        count = launches_per_batch(self._launch_ms(launch))
        run_batch = self._graph_batch(launch, count) if graph else loop_batch(launch, count)
        return power.measure_window(run_batch, meter, seconds, synchronize=self.stream.synchronize,
                                    idle_w=idle_w, warmup_s=ENERGY_WARMUP_S)  # fmt: skip

    def _idle_baseline(self, meter) -> float:
        """Idle watts, measured again only when the last baseline is over IDLE_BASELINE_MAX_AGE_S old."""
        from autotune.gpu import power

        now = time.monotonic()
        if self._idle is None or now - self._idle[0] > IDLE_BASELINE_MAX_AGE_S:
            self._idle = (now, power.idle_power(meter, settle_s=ENERGY_SETTLE_S))
        return self._idle[1]

    def _launch_ms(self, launch: Callable[[], None], repeats: int = 3) -> float:
        """Mean time of one launch after a warm-up launch, in ms."""
        start, end = self.cupy.cuda.Event(), self.cupy.cuda.Event()
        launch()
        start.record(self.stream)
        for _ in range(repeats):
            launch()
        end.record(self.stream)
        end.synchronize()
        return self.cupy.cuda.get_elapsed_time(start, end) / repeats

    def _graph_batch(self, launch: Callable[[], None], count: int) -> Callable[[], int]:
        """``run_batch`` replaying a CUDA graph of ``count`` launches; replayed once here to warm it."""
        graph = capture_graph(self.stream, launch, count)
        graph.upload(self.stream)
        graph.launch(self.stream)

        def run_batch() -> int:
            graph.launch(self.stream)
            return count

        return run_batch

    def _power_meter(self):
        if self._power is None:
            from autotune.gpu.power import NvmlPower

            self._power = NvmlPower(self.cupy.cuda.Device(self.device).pci_bus_id)
        return self._power


def launches_per_batch(launch_ms: float, batch_ms: float = ENERGY_BATCH_MS) -> int:
    """How many launches take about ``batch_ms``: at least 1, at most MAX_BATCH_LAUNCHES."""
    if launch_ms <= 0:
        return MAX_BATCH_LAUNCHES
    return max(1, min(MAX_BATCH_LAUNCHES, round(batch_ms / launch_ms)))


def capture_graph(stream, launch: Callable[[], None], count: int):
    """A CUDA graph of ``count`` calls of ``launch()`` captured on ``stream`` (the current stream)."""
    stream.begin_capture()
    try:
        for _ in range(count):
            launch()
    except BaseException:
        try:
            stream.end_capture()  # leave capture mode; the launch's error is the one to report
        except Exception:
            pass
        raise
    return stream.end_capture()


def loop_batch(launch: Callable[[], None], count: int) -> Callable[[], int]:
    """``run_batch`` enqueuing ``count`` plain calls (cuBLAS cannot be graph-captured here)."""

    def run_batch() -> int:
        for _ in range(count):
            launch()
        return count

    return run_batch
