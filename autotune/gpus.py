"""GPU specifications by short name, usable with no GPU and no CUDA import.

Numbers are from NVIDIA's CUDA programming guide (compute capability tables)
and the product data sheets.
"""

from __future__ import annotations

import dataclasses

from autotune.errors import InputError

KB = 1024


@dataclasses.dataclass(frozen=True)
class GpuSpec:
    """What the search needs to know about one GPU model."""

    key: str  # the CLI name, e.g. "h200"
    marketing_name: str  # substring of the device name NVML/CUDA report
    arch: int  # compute capability as an int: 75, 80, 86, 89, 90
    sms: int
    smem_per_block: int  # bytes available without opting in
    smem_per_block_optin: int  # bytes with cudaFuncAttributeMaxDynamicSharedMemorySize
    smem_per_sm: int
    regs_per_sm: int
    regs_per_block: int
    max_threads_per_block: int
    max_threads_per_sm: int
    l2_bytes: int

    @property
    def sm(self) -> str:
        """The NVRTC target, e.g. ``sm_90``."""
        return f"sm_{self.arch}"

    @property
    def has_cp_async(self) -> bool:
        """``cp.async`` exists from sm_80 (Ampere) on."""
        return self.arch >= 80


GPUS: dict[str, GpuSpec] = {
    spec.key: spec
    for spec in (
        GpuSpec("t4", "T4", 75, 40, 48 * KB, 64 * KB, 64 * KB, 65536, 65536, 1024, 1024, 4 * 1024 * KB),
        GpuSpec("a100", "A100", 80, 108, 48 * KB, 163 * KB, 164 * KB, 65536, 65536, 1024, 2048, 40 * 1024 * KB),
        GpuSpec("rtx3090", "RTX 3090", 86, 82, 48 * KB, 99 * KB, 100 * KB, 65536, 65536, 1024, 1536, 6 * 1024 * KB),
        GpuSpec("l4", "L4", 89, 58, 48 * KB, 99 * KB, 100 * KB, 65536, 65536, 1024, 1536, 48 * 1024 * KB),
        GpuSpec("h100", "H100", 90, 132, 48 * KB, 227 * KB, 228 * KB, 65536, 65536, 1024, 2048, 50 * 1024 * KB),
        GpuSpec("h200", "H200", 90, 132, 48 * KB, 227 * KB, 228 * KB, 65536, 65536, 1024, 2048, 60 * 1024 * KB),
    )
}

AUTO = "auto"


def gpu_spec(key: str) -> GpuSpec:
    """Look up a GPU by CLI name; unknown names raise InputError listing the choices."""
    try:
        return GPUS[key.lower()]
    except KeyError:
        raise InputError("--gpu", key, ", ".join([*GPUS, AUTO])) from None


def spec_for_device(device_name: str) -> GpuSpec | None:
    """Match a device name such as ``"NVIDIA H200"`` to a known spec, or None."""
    words = device_name.upper().replace("-", " ").split()
    for spec in GPUS.values():
        wanted = spec.marketing_name.upper().split()
        for start in range(len(words) - len(wanted) + 1):
            if words[start : start + len(wanted)] == wanted:
                return spec
    return None
