"""Results as they travel between databases: plain values, no row ids.

:meth:`autotune.results.ResultStore.export_entries` reads them out of a database,
:meth:`~autotune.results.ResultStore.add_entries` writes them into one, and
:mod:`autotune.results.files` turns them into JSON lines and back.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

from autotune import records
from autotune.problem import GemmProblem
from autotune.space.family import Config


@dataclasses.dataclass(frozen=True)
class KernelRef:
    """A kernel as stored: its family, config name, knob values and template hash."""

    family: str
    name: str
    params: tuple[tuple[str, int], ...]  # sorted by knob
    template_hash: str | None

    @classmethod
    def of(cls, config: Config, template_hash: str | None) -> KernelRef:
        """The kernel of ``config`` built from the template ``template_hash`` identifies."""
        return cls(config.family, config.name, tuple(sorted(config.as_dict().items())), template_hash)

    @property
    def identity(self) -> tuple[str, str, str | None]:
        """(family, name, template hash): the kernels table's unique key."""
        return self.family, self.name, self.template_hash

    @property
    def params_json(self) -> str:
        return json.dumps(dict(self.params), sort_keys=True)


@dataclasses.dataclass(frozen=True)
class EnergyEntry:
    """An energy window and when it was taken."""

    window: records.EnergyWindow
    measured_at: dt.datetime


@dataclasses.dataclass(frozen=True)
class MeasurementEntry:
    """A measurement with everything it belongs to (``kernel`` None for the cuBLAS reference)."""

    environment: records.Environment
    problem: GemmProblem
    kernel: KernelRef | None
    measurement: records.Measurement
    study: str | None
    measured_at: dt.datetime
    energy_windows: tuple[EnergyEntry, ...] = ()


@dataclasses.dataclass(frozen=True)
class FailureEntry:
    """A failure with everything it belongs to."""

    environment: records.Environment
    problem: GemmProblem
    kernel: KernelRef | None
    failure: records.Failure
    study: str | None
    failed_at: dt.datetime


@dataclasses.dataclass(frozen=True)
class Added:
    """What writing one entry added: the row itself (False: it was there), and energy windows."""

    row: bool
    energy_windows: int = 0


@dataclasses.dataclass(frozen=True)
class Export:
    """The entries an export wrote, and what it left out (always 0 for a full export)."""

    entries: list[MeasurementEntry | FailureEntry]
    left_out_measurements: int = 0
    left_out_energy_windows: int = 0
    left_out_failures: int = 0
