"""A kernel table's kernels compiled: each one's cubin and ptxas resources, checked against its GPU.

Compiling is a step of its own (the table model only holds cubins): ``autotune
export`` compiles a table before writing a format that embeds cubins, and the
runtime compiles a kernel the first time it launches one that has none.
:func:`compile_table` compiles the kernels that have no cubin in parallel (a
compile pool); a kernel the disk cache holds is read from there, and one that
has its cubin (a prebuilt table's, say) is kept as it is.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses

from autotune.errors import FailureClass
from autotune.gpu_specs import GpuSpec
from autotune.kernel.build import build_kernel, compile_result, finish_build
from autotune.kernel.compile import CompiledKernel, CompileFailure, CompilePool, compile_kernel
from autotune.kernel.render import render
from autotune.progress import ProgressCallback, no_progress
from autotune.records import Failure
from autotune.select.kernel_table import DtypeTable, KernelTable, TableError, TableKernel, spec_for_arch
from autotune.space.family import SearchSpace, load_space

COMPILING = "compiling kernels"  # what compile_table reports its progress as


def compile_table_kernel(kernel: TableKernel, arch: str) -> TableKernel:
    """``kernel`` with its cubin and ptxas resources; TableError if it does not compile or fit the GPU."""
    if kernel.cubin is not None:
        return kernel
    gpu = spec_for_arch(arch)
    space = _space(kernel)
    built = build_kernel(space, space.config(kernel.params), gpu, launch=kernel.launch)
    return _compiled(kernel, built, gpu)


def compile_table(table: KernelTable, progress: ProgressCallback = no_progress, jobs: int | None = None) -> KernelTable:
    """``table`` with every kernel compiled (NVRTC, offline): those without a cubin compiled in parallel in a
    pool of ``jobs`` processes (by default one per core, at most 16), from the disk cache where it holds them.

    Raises TableError for the first kernel (in the table's order) that does not compile or fit the GPU."""
    gpu = spec_for_arch(table.arch)
    missing = list({kernel.name: kernel for _, _, dtype in table.dtype_tables() for kernel in dtype.kernels
                    if kernel.cubin is None}.values())
    built = _compile_all(missing, gpu, progress, jobs)
    compiled = {kernel.name: _compiled(kernel, built[kernel.name], gpu) for kernel in missing}

    def with_cubins(tables: dict[str, DtypeTable]) -> dict[str, DtypeTable]:
        return {dtype: dataclasses.replace(t, kernels=tuple(compiled.get(k.name, k) for k in t.kernels))
                for dtype, t in tables.items()}

    return dataclasses.replace(table, dtypes=with_cubins(table.dtypes),
                               other_layouts={layout: with_cubins(t) for layout, t in table.other_layouts.items()})


def _compile_all(kernels: list[TableKernel], gpu: GpuSpec, progress: ProgressCallback, jobs: int | None) -> dict:
    """Each kernel's build (a BuiltKernel or a Failure) by name: in a compile pool where there are several."""
    spaces = {kernel.name: _space(kernel) for kernel in kernels}  # template mismatches refused before compiling
    sources = {kernel.name: render(spaces[kernel.name], spaces[kernel.name].config(kernel.params), gpu)
               for kernel in kernels}

    def finish(kernel: TableKernel, compiled: CompiledKernel | CompileFailure):
        space = spaces[kernel.name]
        return finish_build(space, space.config(kernel.params), compiled, gpu, launch=kernel.launch)

    built: dict = {}
    progress(COMPILING, 0, len(kernels))
    if len(kernels) < 2 or jobs == 1:
        for kernel in kernels:
            built[kernel.name] = finish(kernel, compile_kernel(sources[kernel.name]))
            progress(COMPILING, len(built), len(kernels))
        return built
    with CompilePool(jobs) as pool:  # its processes start as work comes: at most one per kernel
        futures = {pool.submit(sources[kernel.name]): kernel for kernel in kernels}
        for future in concurrent.futures.as_completed(futures):
            kernel = futures[future]
            built[kernel.name] = finish(kernel, compile_result(future))
            progress(COMPILING, len(built), len(kernels))
    return built


def _space(kernel: TableKernel) -> SearchSpace:
    """The family ``kernel`` is built from; TableError where its template is not the one it was built from."""
    space = load_space(kernel.family, kernel.dtype, kernel.layout)
    if space.template_hash != kernel.template_hash:
        raise TableError(f"{kernel.name} was built from template {kernel.template_hash}, but this autotune's "
                         f"{kernel.family} template is {space.template_hash}; export the table again")
    return space


def _compiled(kernel: TableKernel, built, gpu: GpuSpec) -> TableKernel:
    """``kernel`` with the cubin and resources of its build; TableError naming where a failed build stopped."""
    if isinstance(built, Failure):
        if built.failure_class == FailureClass.COMPILE_ERROR.value:
            raise TableError(f"{kernel.name} does not compile for {kernel.launch.target}: {built.message}")
        if built.failure_class == FailureClass.RESOURCE.value:
            raise TableError(f"{kernel.name} does not fit {gpu.key}: {built.message}")
        raise TableError(f"{kernel.name} cannot be launched as the table says: {built.message}")
    return dataclasses.replace(kernel, cubin=built.cubin, resources=built.resources)
