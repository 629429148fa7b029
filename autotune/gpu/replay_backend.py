"""A backend that replays a measured table: every config of a sub-space timed once on a GPU
(``bench/brute_force.py``), answered again without one, so that whole searches can be run over it
on a CPU (``bench/replay.py``).

The table is a JSON-lines file, one object a line, each with a ``kind``:

* ``problem``: what was measured: ``family``, ``gpu``, ``m``, ``n``, ``k``, ``dtype``, ``alpha``, ``beta``
  (and, for the reader, the sub-space's knob values, the launches and the machine);
* ``cublas``: ``ms``, cuBLAS's median time (one line per run; the table's is their median);
* ``config``: ``config`` (its name), ``knobs``, and either ``ms`` (its median time) or ``failure`` (a
  :class:`~autotune.errors.FailureClass` value) with ``message`` and ``stage``: ``build`` (it never
  reached the GPU: NVRTC, ptxas's resources, its launch) or ``gpu``; ``resources`` (ptxas's report, where
  it compiled) and ``compile_s`` (NVRTC's seconds, 0 from the disk cache). A config measured twice is
  read as its last line.
"""

from __future__ import annotations

import dataclasses
import json
import lzma
import statistics
import time
from pathlib import Path

from autotune.errors import AutotuneError, FailureClass
from autotune.gpu.fake_backend import FakeBackend
from autotune.gpu.tasks import CublasTask, KernelTask, Result, Task
from autotune.problem import GemmProblem
from autotune.records import Failure, Measurement, Resources, Timing

STAGES = ("build", "gpu")
VERIFICATION_LAUNCHES = 2  # a kernel task's launches before its warm-up: beta 0 and beta not 0


class ReplayTableError(AutotuneError):
    """A replay table that cannot be read: one line naming the file, the line and what is wrong."""


@dataclasses.dataclass(frozen=True)
class ReplayRow:
    """One config of the table: its time, or its failure and where it stopped."""

    config: str
    knobs: dict[str, int]
    ms: float | None
    failure: str | None = None
    message: str = ""
    stage: str | None = None
    resources: Resources | None = None
    compile_s: float = 0.0

    @property
    def outcome(self) -> Measurement | Failure:
        """What a GPU answers for this config: its time, or its failure."""
        if self.ms is None:
            return Failure(self.failure, self.message)
        timing = Timing(self.ms, self.ms, self.ms, self.ms, self.ms, (self.ms,))
        return Measurement(timing=timing, tflops=0.0, max_error=0.0, resources=self.resources)


@dataclasses.dataclass(frozen=True)
class ReplayTable:
    """A measured table: the problem, cuBLAS's time and each config's row (by config name)."""

    problem: GemmProblem
    family: str
    gpu: str
    cublas_ms: float
    rows: dict[str, ReplayRow]
    header: dict

    @property
    def measured(self) -> dict[str, float]:
        """Each measured config's median time, by name."""
        return {name: row.ms for name, row in self.rows.items() if row.ms is not None}

    @property
    def best(self) -> tuple[str, float]:
        """The fastest measured config and its time."""
        measured = self.measured
        name = min(measured, key=lambda n: (measured[n], n))
        return name, measured[name]

    @classmethod
    def load(cls, path: str | Path) -> ReplayTable:
        """Read a table file; ReplayTableError where it is malformed, has no problem line, no cuBLAS
        time or no measured config."""
        path = Path(path)
        try:
            if path.suffix == ".xz":  # as committed: xz -9 shrinks a 2740-config table from 1.9 MB to 77 kB
                lines = lzma.decompress(path.read_bytes()).decode().splitlines()
            else:
                lines = path.read_text().splitlines()
        except (OSError, UnicodeDecodeError, lzma.LZMAError) as error:
            raise ReplayTableError(f"cannot read replay table {path}: {error}") from None
        header, cublas, rows = None, [], {}
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"replay table {path} line {number}"
            try:
                data = json.loads(line)
                kind = data["kind"]
                if kind == "problem":
                    header = data
                    problem = GemmProblem(int(data["m"]), int(data["n"]), int(data["k"]), data["dtype"],
                                          alpha=float(data.get("alpha", 1.0)), beta=float(data.get("beta", 0.0)))
                elif kind == "cublas":
                    cublas.append(_positive(data["ms"]))
                elif kind == "config":
                    row = _row(data)
                    rows[row.config] = row
                else:
                    raise ValueError(f"kind {kind!r}: expected problem, cublas or config")
            except (ValueError, TypeError, KeyError, AutotuneError) as error:
                what = f"missing {error}" if isinstance(error, KeyError) else str(error)
                raise ReplayTableError(f"{where}: {what}") from None
        for missing, absent in (("problem line", header is None), ("cuBLAS time", not cublas),
                                ("measured config", not any(row.ms is not None for row in rows.values()))):
            if absent:
                raise ReplayTableError(f"replay table {path}: no {missing}")
        return cls(problem, str(header["family"]), str(header["gpu"]), statistics.median(cublas), rows, header)


def _positive(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"ms {value!r}: expected a positive number")
    return float(value)


def _row(data: dict) -> ReplayRow:
    name = data["config"]
    if not isinstance(name, str) or not name:
        raise ValueError(f"config {name!r}: expected a config name")
    resources = Resources(**data["resources"]) if data.get("resources") else None
    if data.get("ms") is not None:
        return ReplayRow(name, dict(data["knobs"]), _positive(data["ms"]), resources=resources,
                         compile_s=float(data.get("compile_s", 0.0)))
    failure, stage = data["failure"], data["stage"]
    if failure not in {c.value for c in FailureClass}:
        raise ValueError(f"failure {failure!r}: expected one of {', '.join(c.value for c in FailureClass)}")
    if stage not in STAGES:
        raise ValueError(f"stage {stage!r}: expected one of {', '.join(STAGES)}")
    return ReplayRow(name, dict(data["knobs"]), None, failure, str(data.get("message", "")), stage, resources,
                     float(data.get("compile_s", 0.0)))


class ReplayBackend:
    """No GPU: each kernel task is answered with its config's row of a table, cuBLAS with the table's time.

    A config missing from the table answers as a launch error; a failure row as its failure. The
    samples of a timed kernel stop at the first racing stage it loses, as on a GPU. With
    ``gpu_time``, a task takes as long as its launches would have (verification, warm-up and timed
    launches at the table's time) by sleeping; by default it answers at once. Energy is not replayed.
    Build it for a worker with ``functools.partial(ReplayBackend, table=path)``.
    """

    def __init__(self, device: int = 0, table: str = "", gpu_time: bool = False):
        self.device = device
        self.table = ReplayTable.load(table)
        self.gpu_time = gpu_time

    def hello(self) -> dict:
        """The table's GPU, simulated (its results are stored apart from a real GPU's)."""
        info = FakeBackend(self.device).hello()
        return {**info, "name": f"NVIDIA {self.table.gpu.upper()} (replay)", "driver": "0.0 (replay)"}

    def run(self, task: Task) -> Result:
        if isinstance(task, KernelTask):
            row = self.table.rows.get(task.entry)
            if row is None:
                return Failure(FailureClass.LAUNCH_ERROR.value, f"{task.entry} is not in the replay table")
            outcome = row.outcome
            if isinstance(outcome, Failure):
                return outcome
            ms = row.ms
            lost = [stage.launches for stage in task.race if ms > stage.limit_ms and stage.launches < task.repeats]
            samples = (ms,) * min(lost, default=task.repeats)
            self._spend(ms, VERIFICATION_LAUNCHES + task.warmup + len(samples))
            return dataclasses.replace(outcome, timing=Timing(ms, ms, ms, ms, ms, samples),
                                       tflops=task.problem.tflops(ms), resources=task.resources)
        if isinstance(task, CublasTask):
            ms = self.table.cublas_ms
            self._spend(ms, VERIFICATION_LAUNCHES + task.warmup + task.repeats)
            return Measurement(timing=Timing(ms, ms, ms, ms, ms, (ms,) * task.repeats),
                               tflops=task.problem.tflops(ms), max_error=0.0)
        raise TypeError(f"ReplayBackend cannot run {type(task).__name__}: a table holds times only")

    def classify(self, exc: Exception) -> tuple[str, bool]:
        return FailureClass.CRASH.value, True

    def _spend(self, ms: float, launches: int) -> None:
        if self.gpu_time:
            time.sleep(ms * launches / 1e3)
