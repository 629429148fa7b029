"""What the worker's child needs from a backend, and how a backend's errors are classified.

A backend is built in the child by a factory (``factory(device) -> Backend``): it says hello (the device
it found), runs tasks, and classifies what a task raised as a failure class and whether the worker is
still usable. :class:`~autotune.gpu.cupy_backend.CupyBackend` runs kernels on a GPU;
:mod:`autotune.gpu.fake_backend` has the backends that need none.
"""

from __future__ import annotations

from typing import Protocol

from autotune.errors import FailureClass
from autotune.gpu.tasks import Result, Task

MESSAGE_LIMIT = 500  # characters kept of an exception message

# CUDA status codes; the driver's CUresult and the runtime's cudaError_t agree on these.
STICKY_FAULTS = {
    700: "illegal address",
    702: "launch timeout",
    710: "device-side assert",
    714: "hardware stack error",
    715: "illegal instruction",
    716: "misaligned address",
    717: "invalid address space",
    718: "invalid program counter",
    719: "launch failed",
    999: "unknown error",
}
CONTEXT_LOST = {
    3: "not initialized",
    4: "deinitialized",
    46: "device unavailable",
    201: "invalid context",
    709: "context is destroyed",
}


class GpuUnavailable(Exception):
    """Raised in the child by a backend that finds no usable GPU."""


class Backend(Protocol):
    """What :func:`autotune.gpu.child.serve` needs from a backend; built in the child by a factory."""

    def hello(self) -> dict:
        """Device description: name, arch, driver, cuda_runtime, nvrtc, cupy, properties."""

    def run(self, task: Task) -> Result:
        """Run a KernelTask, CublasTask or EnergyTask; may raise, see :meth:`classify`."""

    def classify(self, exc: Exception) -> tuple[str, bool]:
        """``(failure class, worker still usable)`` for an exception from :meth:`run`."""


def classify_cuda_status(status: int) -> tuple[str, bool]:
    """``(failure class, worker still usable)`` for a CUDA driver/runtime status code."""
    if status in STICKY_FAULTS:
        return FailureClass.FAULT.value, False
    if status in CONTEXT_LOST:
        return FailureClass.CRASH.value, False
    return FailureClass.LAUNCH_ERROR.value, True


def describe_exception(exc: BaseException) -> str:
    """``"TypeName: message"`` on one line, at most MESSAGE_LIMIT characters."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."
