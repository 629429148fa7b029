"""Which GPU is attached, through NVML (no CUDA context is created)."""

from __future__ import annotations

from autotune.errors import InputError, NoGpuError
from autotune.gpu_specs import GPUS, GpuSpec, spec_for_device


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
    """The built-in spec of the attached GPU, for ``--gpu auto`` in offline commands (NVML gives the
    name, not the limits a spec needs: see :func:`autotune.gpu_specs.spec_from_properties` for GPU commands)."""
    name = attached_device_name(index)
    spec = spec_for_device(name)
    if spec is None:
        raise InputError("--gpu auto", name, f"for offline commands, a GPU with a built-in spec ({', '.join(GPUS)}): "
                         "name the closest one (search and ladder read any other GPU's limits from the device)")
    return spec
