"""What the GPU worker is asked to do: its tasks (frozen dataclasses) and what they return.

:class:`KernelTask` verifies and times a compiled kernel, :class:`CublasTask` verifies and times cuBLAS on
the same operands, :class:`EnergyTask` measures power and energy per GEMM over a window of about 1 s, and
:class:`ProbeTask` simulates a hang, a crash or a fault (for tests). A task returns a
:class:`~autotune.records.Measurement`, an :class:`~autotune.records.EnergyWindow` or a
:class:`~autotune.records.Failure`.
"""

from __future__ import annotations

import dataclasses

from autotune.gpu.race import RaceStage
from autotune.kernel_abi import TensorMapSpec
from autotune.problem import GemmProblem
from autotune.records import EnergyWindow, Failure, Measurement, Resources


@dataclasses.dataclass(frozen=True)
class KernelTask:
    """Verify and time one compiled kernel.

    The kernel's signature is ``(const T* A, const T* B, T* C, int M, int N,
    int K, float alpha, float beta)``, row-major, launched as given, followed
    by its workspace pointer (if it takes one) and its TMA tensor maps (if any), encoded for the launch's operands.
    """

    cubin: bytes
    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_smem: int
    problem: GemmProblem
    seed: int
    warmup: int
    repeats: int
    resources: Resources | None = None
    tensor_maps: tuple[TensorMapSpec, ...] = ()
    workspace: int = 0  # bytes of zeroed global memory passed after beta (0: none)
    race: tuple[RaceStage, ...] = ()  # stages at which timing stops for a clearly slower kernel
    back_to_back: int = 0  # launches per timed sample, back to back with no L2 flush (0: one flushed launch)


@dataclasses.dataclass(frozen=True)
class CublasTask:
    """Verify and time cuBLAS on the problem's operands, the same way as kernels."""

    problem: GemmProblem
    seed: int
    warmup: int
    repeats: int
    back_to_back: int = 0  # as KernelTask's


@dataclasses.dataclass(frozen=True)
class EnergyTask:
    """Power and energy per GEMM over a window of back-to-back runs (not verified again).

    ``kernel`` None means cuBLAS; otherwise the kernel's cubin, entry and launch
    shape are used on this task's problem and seed (its warmup and repeats are not).
    """

    kernel: KernelTask | None
    problem: GemmProblem
    seed: int
    seconds: float = 1.0


PROBE_ACTIONS = ("ok", "sleep", "exit", "fault", "raise")


@dataclasses.dataclass(frozen=True)
class ProbeTask:
    """A test task on every backend: "ok", "sleep" (a hang), "exit" (a crash),
    "fault" (a poisoned context: answers, then the child exits) or "raise"."""

    action: str
    seconds: float = 0.0

    def __post_init__(self):
        if self.action not in PROBE_ACTIONS:
            raise ValueError(f"ProbeTask action {self.action!r}: expected one of {', '.join(PROBE_ACTIONS)}")


Task = KernelTask | CublasTask | EnergyTask | ProbeTask
Result = Measurement | EnergyWindow | Failure


def verification_problems(problem: GemmProblem) -> tuple[GemmProblem, GemmProblem]:
    """The problem as given, then with the other kind of beta.

    beta 0 is checked again with beta 0.5 (C must be read), and any other beta
    again with beta 0 (C must not be read: it is NaN-poisoned).
    """
    other_beta = 0.5 if problem.beta == 0 else 0.0
    return problem, dataclasses.replace(problem, beta=other_beta)
