"""GPU specifications by short name, usable with no GPU and no CUDA import.

Numbers are from NVIDIA's CUDA programming guide (compute capability tables)
and the product data sheets.
"""

from __future__ import annotations

import dataclasses
import re

from autotune.errors import InputError

KB = 1024
MIN_ARCH = 75  # Turing: the oldest GPUs the kernel families are written for
FAKE_SUFFIX = "-fake"  # the fake backend's GPU: "h200-fake" keeps its made-up results apart from an H200's


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
    fp32_tflops: float = 0.0  # peak fp32 FMA throughput (dense), from the vendor's data sheet; 0: unknown
    tensor_tflops: float = 0.0  # peak fp16/bf16 tensor-core throughput with fp32 accumulation (dense); 0: unknown
    memory_tbs: float = 0.0  # DRAM bandwidth, TB/s; 0: unknown

    def flops_per_element(self, dtype: str) -> float:
        """The roofline's ridge for ``dtype``: peak flops per element of ``dtype`` read or written per second
        (its peak throughput over its bandwidth in elements); 0 where a figure is unknown."""
        from autotune.problem import ELEMENTS

        peak = self.fp32_tflops if dtype == "f32" else self.tensor_tflops
        if not peak or not self.memory_tbs:
            return 0.0
        return peak * ELEMENTS[dtype].itemsize / self.memory_tbs

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
        # the last three: data-sheet peaks (fp32, fp16 tensor cores dense, TFLOP/s) and DRAM bandwidth (TB/s)
        GpuSpec("t4", "T4", 75, 40, 48 * KB, 64 * KB, 64 * KB, 65536, 65536, 1024, 1024, 4 * 1024 * KB, 8.1, 65.0, 0.32),
        GpuSpec("a100", "A100", 80, 108, 48 * KB, 163 * KB, 164 * KB, 65536, 65536, 1024, 2048, 40 * 1024 * KB,
                19.5, 312.0, 1.555),  # the 40 GB SXM part
        GpuSpec("rtx3090", "RTX 3090", 86, 82, 48 * KB, 99 * KB, 100 * KB, 65536, 65536, 1024, 1536, 6 * 1024 * KB,
                35.6, 71.0, 0.936),
        GpuSpec("l4", "L4", 89, 58, 48 * KB, 99 * KB, 100 * KB, 65536, 65536, 1024, 1536, 48 * 1024 * KB,
                30.3, 121.0, 0.3),
        GpuSpec("h100", "H100", 90, 132, 48 * KB, 227 * KB, 228 * KB, 65536, 65536, 1024, 2048, 50 * 1024 * KB,
                67.0, 989.0, 3.35),  # SXM
        GpuSpec("h200", "H200", 90, 132, 48 * KB, 227 * KB, 228 * KB, 65536, 65536, 1024, 2048, 60 * 1024 * KB,
                67.0, 989.0, 4.8),
    )
}

AUTO = "auto"


def gpu_spec(key: str) -> GpuSpec:
    """Look up a GPU by CLI name; unknown names raise InputError listing the choices.

    ``h200-fake`` (any known key with ``-fake``) is that GPU as the fake backend plays it:
    the same limits under the key its results are stored with.
    """
    wanted = key.lower()
    real = wanted.removesuffix(FAKE_SUFFIX)
    if real not in GPUS:
        raise InputError("--gpu", key, ", ".join([*GPUS, AUTO]))
    return GPUS[real] if real == wanted else dataclasses.replace(GPUS[real], key=wanted)


def expected_archs(gpu_key: str) -> tuple[str, ...] | None:
    """The archs that results under a known GPU key may carry: ``sm_90`` for ``h200``; ``sm_90-fake`` (what
    the fake backend records) or ``sm_90`` for ``h200-fake``. None for a key with no built-in spec (a GPU
    described by its own properties)."""
    real = gpu_key.removesuffix(FAKE_SUFFIX)
    spec = GPUS.get(real)
    if spec is None:
        return None
    return (spec.sm,) if real == gpu_key else (spec.sm + FAKE_SUFFIX, spec.sm)


def device_key(device_name: str) -> str:
    """A key for a device name: ``"NVIDIA RTX A6000"`` -> ``"rtx-a6000"`` (lower case, words joined
    by ``-``, the vendor dropped); ``"gpu"`` when nothing is left."""
    words = re.findall(r"[a-z0-9]+", device_name.lower())
    if words[:1] == ["nvidia"]:
        words = words[1:]
    return "-".join(words)[:48].strip("-") or "gpu"


def arch_number(arch: str) -> int:
    """``"sm_86"`` -> 86, ``"sm_90a"`` -> 90; InputError for anything else."""
    match = re.fullmatch(r"sm_(\d{2,3})[a-z]?", arch)
    if not match:
        raise InputError("GPU architecture", arch, "sm_XY as a CUDA device reports it")
    return int(match.group(1))


def spec_from_properties(device_name: str, arch: str, properties: dict) -> GpuSpec:
    """A spec for a GPU with no built-in one, from the properties its CUDA device reports
    (``GpuWorker.device_properties()``: shared memory per block, opt-in and per SM, registers,
    SM count, threads, L2), keyed by :func:`device_key`.

    Raises:
        InputError: the GPU is older than sm_75, or a property is missing or not a positive integer.
    """
    number = arch_number(arch)
    if number < MIN_ARCH:
        raise InputError("--gpu", device_name, f"an NVIDIA GPU of sm_{MIN_ARCH} or newer (this one is {arch})")
    fields = ("sms", "smem_per_block", "smem_per_block_optin", "smem_per_sm", "regs_per_sm", "regs_per_block",
              "max_threads_per_block", "max_threads_per_sm", "l2_bytes")
    values = {}
    for field in fields:
        value = properties.get(field)
        if type(value) is not int or value < 1:
            raise InputError(f"device property {field} of {device_name!r}", value, "a positive integer")
        values[field] = value
    return GpuSpec(key=device_key(device_name), marketing_name=device_name, arch=number, **values)


def spec_for_device(device_name: str) -> GpuSpec | None:
    """Match a device name such as ``"NVIDIA H200"`` to a known spec, or None."""
    words = device_name.upper().replace("-", " ").split()
    for spec in GPUS.values():
        wanted = spec.marketing_name.upper().split()
        for start in range(len(words) - len(wanted) + 1):
            if words[start : start + len(wanted)] == wanted:
                return spec
    return None
