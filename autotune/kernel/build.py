"""A config built for a GPU: rendered, compiled, and checked against its launch and the GPU's limits.

    render -> compile (NVRTC) -> [built for the problem] -> the cubin takes the launch's arguments
    -> ptxas's resources fit the GPU

:func:`build_kernel` runs the whole path; :func:`finish_build` runs what follows a compile that
ran elsewhere (a compile pool's process). Either gives a :class:`BuiltKernel` or a
:class:`~autotune.records.Failure` whose class says where the build stopped
(``compile_error``, ``launch_error`` or ``resource``), as a search records it.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from typing import Protocol

from autotune.errors import FailureClass
from autotune.gpu_specs import GpuSpec
from autotune.kernel.compile import CompiledKernel, CompileFailure, compile_kernel
from autotune.kernel.contract import contract_for
from autotune.kernel.cubin import parameter_sizes
from autotune.kernel.render import render
from autotune.kernel.resources import resource_violation
from autotune.kernel_abi import TensorMapSpec, argument_bytes
from autotune.problem import GemmProblem
from autotune.records import Failure, Resources
from autotune.space.family import Config, SearchSpace


class LaunchShape(Protocol):
    """What a build is checked against: a launch on one problem (:class:`~autotune.space.family.Launch`)
    or on any (:class:`~autotune.kernel.contract.LaunchContract`)."""

    block: tuple[int, int, int]
    dynamic_smem: int
    opt_in: bool
    tensor_maps: tuple[TensorMapSpec, ...]
    workspace: int


@dataclasses.dataclass(frozen=True)
class BuiltKernel:
    """A compiled config that can run on the GPU it was built for: its cubin and how to launch it."""

    config: Config
    cubin: bytes
    entry: str
    launch: LaunchShape
    resources: Resources  # ptxas's, with the launch's dynamic shared memory


def build_kernel(space: SearchSpace, config: Config, gpu: GpuSpec, problem: GemmProblem | None = None,
                 launch: LaunchShape | None = None) -> BuiltKernel | Failure:
    """Render ``config`` for ``gpu``, compile it (or take it from the disk cache) and check it
    (:func:`finish_build`)."""
    return finish_build(space, config, compile_kernel(render(space, config, gpu)), gpu, problem, launch)


def finish_build(space: SearchSpace, config: Config, compiled: CompiledKernel | CompileFailure, gpu: GpuSpec,
                 problem: GemmProblem | None = None, launch: LaunchShape | None = None) -> BuiltKernel | Failure:
    """``compiled`` checked: on ``problem`` (if given) the build must be one built for it; the cubin
    must take the arguments its launch passes; ptxas's registers and shared memory must fit ``gpu``.

    ``launch`` is the launch it is checked against: by default its launch on ``problem``, or
    without one its launch contract.
    """
    if isinstance(compiled, CompileFailure):
        return Failure(FailureClass.COMPILE_ERROR.value, compiled.message)
    if problem is not None:
        unbuilt = space.unbuilt_for(config, gpu, problem)
        if unbuilt:
            return Failure(FailureClass.LAUNCH_ERROR.value, unbuilt)
    if launch is None:
        launch = space.launch(config, gpu, problem) if problem is not None else contract_for(space, config, gpu)
    mismatch = argument_mismatch(compiled.cubin, compiled.entry, launch.tensor_maps, launch.workspace > 0)
    if mismatch:
        return Failure(FailureClass.LAUNCH_ERROR.value, mismatch)
    resources = dataclasses.replace(compiled.resources, smem_dynamic=launch.dynamic_smem)
    violation = resource_violation(resources, launch.block[0], gpu, launch.opt_in)
    if violation:
        return Failure(FailureClass.RESOURCE.value, violation)
    return BuiltKernel(config, compiled.cubin, compiled.entry, launch, resources)


def argument_mismatch(cubin: bytes, entry: str, tensor_maps: tuple[TensorMapSpec, ...],
                      workspace: bool = False) -> str | None:
    """Why ``entry`` in ``cubin`` cannot take the arguments of a launch with ``tensor_maps`` (and a workspace
    pointer, or not): their byte sizes differ; or None. A cubin that does not list its parameters passes."""
    expected = argument_bytes(tensor_maps, workspace)
    taken = parameter_sizes(cubin, entry)
    if taken and taken != expected:
        return f"{entry} takes parameters of {list(taken)} bytes; its launch passes {list(expected)}"
    return None


def compile_result(future: concurrent.futures.Future) -> CompiledKernel | CompileFailure:
    """A compile pool's result; an error raised inside the compile process becomes a compile failure."""
    try:
        return future.result()
    except Exception as error:  # raised in the pool process: the candidate fails, the caller goes on
        return CompileFailure("?", f"{type(error).__name__}: {error}", "")
