"""Post-compile checks: what ptxas reported against the GPU's limits."""

from __future__ import annotations

from autotune.gpu_specs import GpuSpec
from autotune.records import Resources

KB = 1024


def resource_violation(resources: Resources, threads: int, gpu: GpuSpec, opt_in: bool) -> str | None:
    """Why a compiled kernel cannot run well (or at all) on ``gpu``; None if it fits.

    Spilling kernels are rejected too: a GEMM that spills its accumulators to
    local memory is never the one to keep.
    """
    registers = resources.registers * threads
    if registers > gpu.regs_per_block:
        return f"registers {resources.registers} x {threads} threads = {registers} > {gpu.regs_per_block} ({gpu.key})"
    limit = gpu.smem_per_block_optin if opt_in else gpu.smem_per_block
    if resources.smem_total > limit:
        return f"ptxas smem {resources.smem_total / KB:.1f} KB > {limit // KB} KB ({gpu.key})"
    if resources.spill_stores or resources.spill_loads:
        return f"spills {resources.spill_stores} B stored, {resources.spill_loads} B loaded"
    return None
