"""Evaluating a candidate on a GPU worker: the one way a search, a sweep and the ladder do it.

    built kernel (autotune.kernel.build) -> GPU task -> worker (verify, time) -> record

cuBLAS, run the same way, is the reference: its time sets each candidate's timeout, and
without it nothing can be compared, so a cuBLAS failure stops the caller with one
:class:`~autotune.errors.SearchError`. A candidate's own failure is no error: it is recorded
with its class, like a measurement.
"""

from __future__ import annotations

import dataclasses
import functools
import operator

from autotune.errors import SearchError
from autotune.gpu.tasks import CublasTask, EnergyTask, KernelTask
from autotune.gpu.worker import GpuWorker
from autotune.gpu_specs import GpuSpec
from autotune.kernel.build import BuiltKernel, finish_build
from autotune.kernel.compile import CompiledKernel, CompileFailure
from autotune.problem import GemmProblem
from autotune.records import EnergyWindow, Environment, Failure, Measurement, Timing
from autotune.results import ResultStore
from autotune.space.family import Config, Launch, SearchSpace

CUBLAS_TIMEOUT_S = 300.0
TIMEOUT_BASE_S = 15.0  # a candidate's timeout: this...
TIMEOUT_SLOWDOWN = 50.0  # ...plus its launches taking this many times cuBLAS's time
UNTIMED_LAUNCHES = 4  # launches of a candidate beside its warm-up and timed ones: verification, and a margin
ENERGY_TIMEOUT_BASE_S = 60.0  # an energy window's timeout: this, plus...
ENERGY_TIMEOUT_PER_S = 10.0  # ...this per second of the window


@dataclasses.dataclass(frozen=True)
class Measuring:
    """How kernels and cuBLAS are run on one problem: the operands' seed, the launches, the energy window."""

    problem: GemmProblem
    seed: int = 0
    warmup: int = 5
    repeats: int = 20
    energy_seconds: float = 1.0
    back_to_back: int = 0  # launches per timed sample back to back, no L2 flush (0: each launch flushed, alone)

    @classmethod
    def of(cls, problem: GemmProblem, settings) -> Measuring:
        """The measuring of a search's (or a sweep's) :class:`~autotune.search.settings.SearchSettings`."""
        return cls(problem, settings.seed, settings.warmup, settings.repeats, settings.energy_seconds)

    def task(self, built: BuiltKernel) -> KernelTask:
        """The GPU task that verifies and times ``built`` on the problem."""
        launch, problem = built.launch, self.problem
        grid = launch.grid if isinstance(launch, Launch) else launch.grid_for(problem.m, problem.n, problem.k)
        return KernelTask(cubin=built.cubin, entry=built.entry, grid=grid, block=launch.block,
                          dynamic_smem=launch.dynamic_smem, problem=problem, seed=self.seed, warmup=self.warmup,
                          repeats=self.repeats, resources=built.resources, tensor_maps=launch.tensor_maps,
                          workspace=launch.workspace,
                          back_to_back=self.back_to_back)

    def cublas_task(self) -> CublasTask:
        return CublasTask(self.problem, self.seed, self.warmup, self.repeats, self.back_to_back)

    def timeout_s(self, cublas_ms: float) -> float:
        """A candidate's timeout: generous for a kernel 50x slower than cuBLAS, short enough to catch a hang."""
        launches = self.warmup + self.repeats * max(1, self.back_to_back) + UNTIMED_LAUNCHES
        return TIMEOUT_BASE_S + TIMEOUT_SLOWDOWN * launches * cublas_ms / 1e3

    def energy_task(self, kernel: KernelTask | None) -> EnergyTask:
        """An energy window of ``kernel`` (None: cuBLAS)."""
        return EnergyTask(kernel, self.problem, self.seed, self.energy_seconds)


def kernel_task(space: SearchSpace, config: Config, compiled: CompiledKernel | CompileFailure, gpu: GpuSpec,
                problem: GemmProblem, seed: int, warmup: int, repeats: int) -> KernelTask | Failure:
    """The GPU task that verifies and times a compiled config, or why it cannot run
    (:func:`autotune.kernel.build.finish_build`)."""
    built = finish_build(space, config, compiled, gpu, problem)
    if isinstance(built, Failure):
        return built
    return Measuring(problem, seed, warmup, repeats).task(built)


def run_cublas(worker: GpuWorker, measuring: Measuring) -> Measurement:
    """cuBLAS verified and timed on ``worker``: the reference. SearchError if it fails."""
    result = worker.run(measuring.cublas_task(), timeout_s=CUBLAS_TIMEOUT_S)
    if isinstance(result, Failure):
        raise SearchError(f"cuBLAS reference failed: {result.failure_class}: {result.message}")
    return result


def run_candidate(worker: GpuWorker, task: KernelTask, measuring: Measuring,
                  cublas_ms: float) -> Measurement | Failure:
    """``task`` verified and timed on ``worker``, within the candidate timeout that cuBLAS's time sets."""
    return worker.run(task, timeout_s=measuring.timeout_s(cublas_ms))


def energy_window(worker: GpuWorker, measuring: Measuring, kernel: KernelTask | None) -> EnergyWindow | Failure:
    """Power and energy per GEMM of ``kernel`` (None: cuBLAS) over a window of back-to-back runs."""
    return worker.run(measuring.energy_task(kernel),
                      timeout_s=ENERGY_TIMEOUT_BASE_S + ENERGY_TIMEOUT_PER_S * measuring.energy_seconds)


def pooled(problem: GemmProblem, runs: list[Measurement]) -> Measurement:
    """One measurement from several runs of the same kernel: every timed launch pooled."""
    timing = Timing.from_samples([ms for run in runs for ms in run.timing.samples_ms])
    clocks = [run.sm_clock_mhz for run in runs if run.sm_clock_mhz is not None]
    temperatures = [run.temperature_c for run in runs if run.temperature_c is not None]
    reasons = [run.throttle_reasons for run in runs if run.throttle_reasons is not None]
    return Measurement(
        timing=timing,
        tflops=problem.tflops(timing.median_ms),
        max_error=max(run.max_error for run in runs),
        sm_clock_mhz=min(clocks) if clocks else None,
        throttle_reasons=functools.reduce(operator.or_, reasons) if reasons else None,
        temperature_c=max(temperatures) if temperatures else None,
        resources=runs[0].resources,
    )


@dataclasses.dataclass(frozen=True)
class Recorder:
    """Where evaluations are stored: one results database, machine, problem and study label."""

    store: ResultStore
    env: Environment
    problem: GemmProblem
    study: str

    def cublas(self, measurement: Measurement) -> int:
        """Store a cuBLAS measurement; its id."""
        return self.store.add_measurement(self.env, self.problem, None, None, measurement, self.study)

    def measurement(self, space: SearchSpace, config: Config, measurement: Measurement) -> int:
        """Store a config's measurement; its id."""
        return self.store.add_measurement(self.env, self.problem, config, space.template_hash, measurement,
                                          self.study)

    def failure(self, space: SearchSpace, config: Config, failure: Failure) -> None:
        """Store why a config produced no measurement."""
        self.store.add_failure(self.env, self.problem, config, space.template_hash, failure, self.study)

    def outcome(self, space: SearchSpace, config: Config, outcome: Measurement | Failure) -> int | None:
        """Store a config's measurement (its id) or its failure (None)."""
        if isinstance(outcome, Failure):
            self.failure(space, config, outcome)
            return None
        return self.measurement(space, config, outcome)

    def energy(self, measurement_id: int, window: EnergyWindow) -> None:
        """Store the energy window of a stored measurement."""
        self.store.add_energy(measurement_id, window)
