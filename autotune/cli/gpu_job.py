"""What the commands that measure recorded configs again (``cross-dtype``, ``retime``) start before their work:
one GPU worker, one compile pool, the attached GPU checked for the dtype, and the results database."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
from typing import Any

from autotune.cli.arguments import open_store, requested_gpu
from autotune.problem import dtype_runs_on


@dataclasses.dataclass(frozen=True)
class GpuJob:
    worker: Any  # autotune.gpu.worker.GpuWorker
    pool: Any  # autotune.kernel.compile.CompilePool
    env: Any  # autotune.records.Environment of the worker's GPU
    gpu: Any  # autotune.gpu_specs.GpuSpec of the attached GPU
    store: Any  # autotune.results.ResultStore of --db


def check_requested_gpu(args: argparse.Namespace, dtype: str) -> None:
    """Where --gpu names a model, that ``dtype`` runs on it (before anything starts)."""
    requested = requested_gpu(args.gpu)
    if requested is not None:
        dtype_runs_on(dtype, requested.arch, requested.key)


def start_gpu_job(args: argparse.Namespace, dtype: str, stack: contextlib.ExitStack) -> GpuJob:
    """Start ``args``' GPU worker (--gpu, --device, --backend) and compile pool (--jobs) and open --db, all
    closed with ``stack``; InputError where the attached GPU does not run ``dtype``."""
    from autotune.search.start import GpuRequest, attached_gpu_spec, start_processes

    requested = requested_gpu(args.gpu)
    (worker,), pool = start_processes(GpuRequest(requested, args.gpu, args.device, args.backend), 1, args.jobs, stack)
    env = worker.environment()
    gpu = attached_gpu_spec(requested, env, args.gpu, worker.device_properties())
    dtype_runs_on(dtype, gpu.arch, gpu.key)
    return GpuJob(worker, pool, env, gpu, stack.enter_context(open_store(args.db)))
