"""A kernel table's kernels compiled: each one's cubin and ptxas resources, checked against its GPU.

Compiling is a step of its own (the table model only holds cubins): ``autotune
export`` compiles a table before writing a format that embeds cubins, and the
runtime compiles a kernel the first time it launches one that has none.
"""

from __future__ import annotations

import dataclasses

from autotune.kernel.compile import CompiledKernel, compile_kernel
from autotune.kernel.render import render
from autotune.kernel.resources import resource_violation
from autotune.select.kernel_table import KernelTable, TableError, TableKernel, spec_for_arch
from autotune.space.family import load_space


def compile_table_kernel(kernel: TableKernel, arch: str) -> TableKernel:
    """``kernel`` with its cubin and ptxas resources; TableError if it does not compile or fit the GPU."""
    if kernel.cubin is not None:
        return kernel
    gpu = spec_for_arch(arch)
    space = load_space(kernel.family)
    if space.template_hash != kernel.template_hash:
        raise TableError(f"{kernel.name} was built from template {kernel.template_hash}, but this autotune's "
                         f"{kernel.family} template is {space.template_hash}; export the table again")
    compiled = compile_kernel(render(space, space.config(kernel.params), gpu))
    if not isinstance(compiled, CompiledKernel):
        raise TableError(f"{kernel.name} does not compile for {kernel.launch.target}: {compiled.message}")
    resources = dataclasses.replace(compiled.resources, smem_dynamic=kernel.launch.dynamic_smem)
    violation = resource_violation(resources, kernel.launch.block[0], gpu, kernel.launch.opt_in)
    if violation:
        raise TableError(f"{kernel.name} does not fit {gpu.key}: {violation}")
    return dataclasses.replace(kernel, cubin=compiled.cubin, resources=resources)


def compile_table(table: KernelTable) -> KernelTable:
    """``table`` with every kernel compiled (NVRTC, offline; cubins come from the disk cache when there)."""
    dtypes = {dtype: dataclasses.replace(t, kernels=tuple(compile_table_kernel(k, table.arch) for k in t.kernels))
              for dtype, t in table.dtypes.items()}
    return dataclasses.replace(table, dtypes=dtypes)
