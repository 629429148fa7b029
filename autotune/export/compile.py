"""A kernel table's kernels compiled: each one's cubin and ptxas resources, checked against its GPU.

Compiling is a step of its own (the table model only holds cubins): ``autotune
export`` compiles a table before writing a format that embeds cubins, and the
runtime compiles a kernel the first time it launches one that has none.
"""

from __future__ import annotations

import dataclasses

from autotune.errors import FailureClass
from autotune.kernel.build import build_kernel
from autotune.records import Failure
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
    built = build_kernel(space, space.config(kernel.params), gpu, launch=kernel.launch)
    if isinstance(built, Failure):
        if built.failure_class == FailureClass.COMPILE_ERROR.value:
            raise TableError(f"{kernel.name} does not compile for {kernel.launch.target}: {built.message}")
        if built.failure_class == FailureClass.RESOURCE.value:
            raise TableError(f"{kernel.name} does not fit {gpu.key}: {built.message}")
        raise TableError(f"{kernel.name} cannot be launched as the table says: {built.message}")
    return dataclasses.replace(kernel, cubin=built.cubin, resources=built.resources)


def compile_table(table: KernelTable) -> KernelTable:
    """``table`` with every kernel compiled (NVRTC, offline; cubins come from the disk cache when there)."""
    dtypes = {dtype: dataclasses.replace(t, kernels=tuple(compile_table_kernel(k, table.arch) for k in t.kernels))
              for dtype, t in table.dtypes.items()}
    return dataclasses.replace(table, dtypes=dtypes)
