"""Which GPU is attached, through NVML (no CUDA context is created)."""

from __future__ import annotations

from autotune.errors import InputError, NoGpuError
from autotune.gpus import GPUS, GpuSpec, spec_for_device


def attached_device_name(index: int = 0) -> str:
    """The name NVML reports for GPU ``index``; NoGpuError when there is none."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(index))
        finally:
            pynvml.nvmlShutdown()
    except Exception as error:  # NVML raises its own error types, or the library is missing
        raise NoGpuError(f"--gpu auto needs an attached NVIDIA GPU and none was found ({error}); "
                         f"name one of {', '.join(GPUS)}") from None
    return name.decode() if isinstance(name, bytes) else name


def attached_gpu(index: int = 0) -> GpuSpec:
    """The spec of the attached GPU, for ``--gpu auto``."""
    name = attached_device_name(index)
    spec = spec_for_device(name)
    if spec is None:
        raise InputError("--gpu auto", name, f"a known GPU ({', '.join(GPUS)}); name the closest one")
    return spec
