"""Tuned results as text: JSON lines that ship in ``tuned_db/`` and load into any database.

One JSON object per line. Version 2 (what :func:`export` writes) says so in
``"schema_version": 2`` and is one of two kinds:

* ``"kind": "measurement"``: ``environment`` (gpu_key, gpu_name, arch, driver,
  cuda_runtime, nvrtc, cupy), ``problem`` (m, n, k, dtype, layout, alpha, beta),
  the kernel (``family``, ``params``, ``template_hash``; all null for the cuBLAS
  reference), ``timing_ms`` (median, min, max, q25, q75, samples), ``tflops``,
  ``max_error``, ``sm_clock_mhz``, ``throttle_reasons``, ``temperature_c``,
  ``resources`` (the ptxas report, or null), ``study``, ``measured_at`` (ISO 8601)
  and ``energy_windows`` (a list of the NVML windows taken for it, each with its
  own ``measured_at``);
* ``"kind": "failure"``: environment, problem and kernel as above, ``failure_class``,
  ``message``, ``study`` and ``failed_at``.

A line without ``schema_version`` is version 1, the format before versions: a
measurement without ``kind`` or ``energy_windows``, whose null fields may be left
out. A newer version is refused. Every value is checked before anything is
written (a known GPU key must come with its GPU's arch; JSON nested deeper than
Python parses is refused too); a bad one stops the import with one line naming
the file, the line, the field and the value. An import is one transaction: all of its lines or none.
Lines already in the database (same result, same time) are skipped, so a file
can be imported again, or by several processes at once, and adds each result once.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn, TextIO

from autotune.errors import FailureClass, InputError
from autotune.gpu_specs import expected_archs
from autotune.problem import DTYPES, LAYOUTS, GemmProblem
from autotune.progress import ProgressCallback, no_progress
from autotune.records import EnergyWindow, Environment, Failure, Measurement, Resources, Timing
from autotune.results import Export, FailureEntry, KernelRef, MeasurementEntry, ResultStore
from autotune.results.entries import EnergyEntry
from autotune.results.models import Environment as EnvironmentRow
from autotune.results.models import Kernel as KernelRow
from autotune.results.models import Measurement as MeasurementRow
from autotune.space.family import load_space

SCHEMA_VERSION = 2  # what export writes; import reads 1 and 2
CHECKING = "checking results"  # what read reports its progress as, every PROGRESS_LINES lines
PROGRESS_LINES = 100
MEASUREMENT, FAILURE = "measurement", "failure"
INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1
ENVIRONMENT_FIELDS = tuple(field.name for field in dataclasses.fields(Environment))
RESOURCE_FIELDS = tuple(field.name for field in dataclasses.fields(Resources))
TIMING_FIELDS = ("median", "min", "max", "q25", "q75")  # in the order they must not decrease: see _timing
_KERNEL_FIELDS = ("family", "params", "template_hash")
_MEASUREMENT_FIELDS = ("environment", "problem", *_KERNEL_FIELDS, "timing_ms", "tflops", "max_error",
                       "sm_clock_mhz", "throttle_reasons", "temperature_c", "resources", "study", "measured_at")
_V1_OPTIONAL = frozenset({"family", "params", "template_hash", "sm_clock_mhz", "throttle_reasons",
                          "temperature_c", "resources", "study"})
_FAILURE_FIELDS = ("schema_version", "kind", "environment", "problem", *_KERNEL_FIELDS, "failure_class", "message",
                   "study", "failed_at")
_WINDOW_FIELDS = tuple(field.name for field in dataclasses.fields(EnergyWindow)) + ("measured_at",)
_MISSING = object()


class ResultsFileError(InputError):
    """A value in a tuned-results file that cannot be imported: one line naming file, line, field and value."""

    def __init__(self, path: Path, line: int, field: str, value: object, valid: str):
        self.path, self.line, self.field = path, line, field
        self.what, self.value, self.valid = field, value, valid
        if value is _MISSING:
            problem = f"missing {field}"
        else:
            shown = repr(value)
            problem = f"invalid {field} {shown if len(shown) <= 60 else shown[:57] + '...'}"
        Exception.__init__(self, f"{path} line {line}: {problem}: expected {valid}")


@dataclasses.dataclass(frozen=True)
class FileImport:
    """What importing one file added, and how many of its results were already there."""

    path: Path
    measurements_added: int
    measurements_present: int
    energy_windows_added: int
    failures_added: int
    failures_present: int


def export(store: ResultStore, gpu_key: str, stream: TextIO, per_problem: int | None = None) -> Export:
    """Write the results of ``gpu_key`` as version-2 lines; returns what was written and left out.

    Without ``per_problem`` every measurement (energy windows included) and
    every failure is written: importing the file elsewhere reproduces them all.
    With it, see :meth:`ResultStore.export_entries`.
    """
    result = store.export_entries(gpu_key, per_problem)
    for entry in result.entries:
        stream.write(json.dumps(line_of(entry), sort_keys=True) + "\n")
    return result


def import_files(store: ResultStore, paths: Sequence[Path],
                 progress: ProgressCallback = no_progress) -> list[FileImport]:
    """Check every line of every file, then add them all in one transaction (all or nothing); ``progress``
    hears of the lines checked (``checking results``), then of the rows added.

    Raises:
        ResultsFileError: a line that cannot be imported (nothing was written).
        InputError: a file that cannot be read.
        DatabaseError: the write failed (nothing was written).
    """
    files = [(Path(path), read(path, progress)) for path in paths]
    added = store.add_entries([entry for _, entries in files for entry in entries], progress)
    reports, start = [], 0
    for path, entries in files:
        own = list(zip(entries, added[start:start + len(entries)]))
        start += len(entries)
        measurements = [result for entry, result in own if isinstance(entry, MeasurementEntry)]
        failures = [result for entry, result in own if isinstance(entry, FailureEntry)]
        reports.append(FileImport(
            path, sum(result.row for result in measurements), sum(not result.row for result in measurements),
            sum(result.energy_windows for result in measurements),
            sum(result.row for result in failures), sum(not result.row for result in failures)))
    return reports


def import_file(store: ResultStore, path: Path, progress: ProgressCallback = no_progress) -> tuple[int, int]:
    """Import one file (see :func:`import_files`); returns (measurements added, measurements already present)."""
    report, = import_files(store, [path], progress)
    return report.measurements_added, report.measurements_present


def read(path: Path, progress: ProgressCallback = no_progress) -> list[MeasurementEntry | FailureEntry]:
    """Every entry of a tuned-results file, each line checked (``progress`` hears of them as they are).

    Raises:
        ResultsFileError: the first line that cannot be imported.
        InputError: the file cannot be read.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or type(error).__name__
        raise InputError("results file", str(path), f"a readable UTF-8 file ({reason})") from None
    lines = text.splitlines()
    entries = []
    progress(CHECKING, 0, len(lines))
    for number, line in enumerate(lines, 1):
        if line.strip():
            entries.append(_Line(path, number).entry(line))
        if number % PROGRESS_LINES == 0:
            progress(CHECKING, number, len(lines))
    progress(CHECKING, len(lines), len(lines))
    return entries


def line_of(entry: MeasurementEntry | FailureEntry) -> dict:
    """The version-2 JSON object of an entry."""
    common = {
        "schema_version": SCHEMA_VERSION,
        "environment": dataclasses.asdict(entry.environment),
        "problem": dataclasses.asdict(entry.problem),
        "family": entry.kernel.family if entry.kernel else None,
        "params": dict(entry.kernel.params) if entry.kernel else None,
        "template_hash": entry.kernel.template_hash if entry.kernel else None,
        "study": entry.study,
    }
    if isinstance(entry, FailureEntry):
        return {**common, "kind": FAILURE, "failure_class": str(getattr(entry.failure.failure_class, "value",
                                                                          entry.failure.failure_class)),
                "message": entry.failure.message, "failed_at": _time_text(entry.failed_at)}
    measurement, timing = entry.measurement, entry.measurement.timing
    return {
        **common,
        "kind": MEASUREMENT,
        "timing_ms": {"median": timing.median_ms, "min": timing.min_ms, "max": timing.max_ms, "q25": timing.q25_ms,
                      "q75": timing.q75_ms, "samples": list(timing.samples_ms)},
        "tflops": measurement.tflops,
        "max_error": measurement.max_error,
        "sm_clock_mhz": measurement.sm_clock_mhz,
        "throttle_reasons": measurement.throttle_reasons,
        "temperature_c": measurement.temperature_c,
        "resources": dataclasses.asdict(measurement.resources) if measurement.resources else None,
        "measured_at": _time_text(entry.measured_at),
        "energy_windows": [{**dataclasses.asdict(energy.window), "measured_at": _time_text(energy.measured_at)}
                           for energy in entry.energy_windows],
    }


def _time_text(moment: dt.datetime) -> str:
    return moment.astimezone(dt.timezone.utc).isoformat(timespec="microseconds")


class _Line:
    """One line of a file being read: every check raises a :class:`ResultsFileError` that names it."""

    def __init__(self, path: Path, number: int):
        self.path, self.line_number = path, number

    def fail(self, field: str, value: object, valid: str) -> NoReturn:
        raise ResultsFileError(self.path, self.line_number, field, value, valid)

    def entry(self, text: str) -> MeasurementEntry | FailureEntry:
        try:
            data = json.loads(text)
        except ValueError as error:
            self.fail("JSON", text.strip(), f"one JSON object per line ({error})")
        except RecursionError:
            self.fail("JSON", text.strip(), "one JSON object per line (this one nests too deep to parse)")
        if not isinstance(data, dict):
            self.fail("line", data, "a JSON object")
        version = data.get("schema_version", 1)
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            self.fail("schema_version", version, f"an integer from 1 to {SCHEMA_VERSION}")
        if version > SCHEMA_VERSION:
            self.fail("schema_version", version,
                      f"at most {SCHEMA_VERSION}: the file is from a newer autotune, upgrade to import it")
        kind = data.get("kind", MEASUREMENT) if version > 1 else MEASUREMENT
        if kind == FAILURE:
            return self._failure(data)
        if kind != MEASUREMENT:
            self.fail("kind", kind, f"{MEASUREMENT!r} or {FAILURE!r}")
        return self._measurement(data, version)

    def _measurement(self, data: dict, version: int) -> MeasurementEntry:
        fields = (*_MEASUREMENT_FIELDS, "schema_version", "kind", "energy_windows") if version > 1 \
            else _MEASUREMENT_FIELDS
        optional = _V1_OPTIONAL if version == 1 else frozenset()
        self._fields(data, "", fields, optional)
        environment, problem = self._environment(data), self._problem(data)
        kernel = self._kernel(data, problem)
        measurement = Measurement(
            timing=self._timing(data["timing_ms"]),
            tflops=self.number(data, "tflops", above=0.0),
            max_error=self.number(data, "max_error", least=0.0),
            sm_clock_mhz=self.integer(data, "sm_clock_mhz", least=0, optional=True),
            throttle_reasons=self.integer(data, "throttle_reasons", least=0, most=INT64_MAX, optional=True),
            temperature_c=self.integer(data, "temperature_c", least=-INT32_MAX, optional=True),
            resources=self._resources(data.get("resources")),
        )
        windows = data.get("energy_windows", [])
        if not isinstance(windows, list):
            self.fail("energy_windows", windows, "a list of energy windows")
        return MeasurementEntry(environment, problem, kernel, measurement,
                                self.text(data, "study", MeasurementRow.__table__.c.study, optional=True),
                                self.time(data, "measured_at"),
                                tuple(self._window(window, index) for index, window in enumerate(windows)))

    def _failure(self, data: dict) -> FailureEntry:
        self._fields(data, "", _FAILURE_FIELDS, frozenset())
        classes = [member.value for member in FailureClass]
        failure_class = data["failure_class"]
        if failure_class not in classes:
            self.fail("failure_class", failure_class, "one of " + ", ".join(classes))
        message = data["message"]
        if not isinstance(message, str):
            self.fail("message", message, "a string")
        environment, problem = self._environment(data), self._problem(data)
        return FailureEntry(environment, problem, self._kernel(data, problem),
                            Failure(failure_class, message),
                            self.text(data, "study", MeasurementRow.__table__.c.study, optional=True),
                            self.time(data, "failed_at"))

    def _fields(self, data: dict, prefix: str, fields: Sequence[str], optional: frozenset) -> None:
        unknown = sorted(set(data) - set(fields))
        if unknown:
            self.fail(prefix + unknown[0], data[unknown[0]], f"only the fields {', '.join(fields)}")
        for name in fields:
            if name not in data and name not in optional:
                self.fail(prefix + name, _MISSING, "every field of the format (see autotune.results.files)")

    def _object(self, data: dict, name: str, fields: Sequence[str]) -> dict:
        value = data[name]
        if not isinstance(value, dict):
            self.fail(name, value, "an object with " + ", ".join(fields))
        self._fields(value, name + ".", fields, frozenset())
        return value

    def _environment(self, data: dict) -> Environment:
        value = self._object(data, "environment", ENVIRONMENT_FIELDS)
        columns = EnvironmentRow.__table__.c
        environment = Environment(**{name: self.text(value, name, columns[name], prefix="environment.", empty=False)
                                     for name in ENVIRONMENT_FIELDS})
        archs = expected_archs(environment.gpu_key)
        if archs is not None and environment.arch not in archs:
            self.fail("environment.arch", environment.arch,
                      f"{' or '.join(archs)}, the arch of gpu_key {environment.gpu_key!r}")
        return environment

    def _problem(self, data: dict) -> GemmProblem:
        value = self._object(data, "problem", ("m", "n", "k", "dtype", "layout", "alpha", "beta"))
        sizes = [self.integer(value, axis, least=1, prefix="problem.") for axis in ("m", "n", "k")]
        for name, choices in (("dtype", DTYPES), ("layout", LAYOUTS)):
            if value[name] not in choices:
                self.fail(f"problem.{name}", value[name], ", ".join(choices))
        return GemmProblem(*sizes, dtype=value["dtype"], layout=value["layout"],
                           alpha=self.number(value, "alpha", prefix="problem."),
                           beta=self.number(value, "beta", prefix="problem."))

    def _kernel(self, data: dict, problem: GemmProblem) -> KernelRef | None:
        """The kernel of an entry: its family's config for the problem's dtype and layout (whose names carry
        them), or None for the cuBLAS reference."""
        dtype = problem.dtype
        family, params, template_hash = (data.get(name) for name in _KERNEL_FIELDS)
        if family is None:
            for name in ("params", "template_hash"):
                if data.get(name) is not None:
                    self.fail(name, data[name], "null for the cuBLAS reference (family null)")
            return None
        if not isinstance(family, str):
            self.fail("family", family, "a kernel family name, or null for cuBLAS")
        try:
            space = load_space(family)
        except InputError as error:
            self.fail("family", family, f"a kernel family: {error.valid}")
        if dtype not in space.dtypes:
            self.fail("problem.dtype", dtype, f"a dtype {family} serves: {', '.join(space.dtypes)}")
        if problem.layout not in space.layouts:
            self.fail("problem.layout", problem.layout, f"a layout {family} serves: {', '.join(space.layouts)}")
        space = space.for_dtype(dtype).for_layout(problem.layout)
        if not isinstance(params, dict):
            self.fail("params", params, f"an object of {family} knob values")
        for knob, knob_value in params.items():
            if isinstance(knob_value, bool) or not isinstance(knob_value, int):
                self.fail(f"params.{knob}", knob_value, "an integer")
        try:
            config = space.config(params)
        except InputError as error:
            field = f"params.{error.what}" if error.what in space.knobs else "params"
            self.fail(field, error.value, error.valid)
        if template_hash is not None:
            template_hash = self.text(data, "template_hash", KernelRow.__table__.c.template_hash, empty=False)
        return KernelRef.of(config, template_hash)

    def _timing(self, value: object) -> Timing:
        if not isinstance(value, dict):
            self.fail("timing_ms", value, "an object with " + ", ".join((*TIMING_FIELDS, "samples")))
        self._fields(value, "timing_ms.", (*TIMING_FIELDS, "samples"), frozenset())
        times = {name: self.number(value, name, above=0.0, prefix="timing_ms.") for name in TIMING_FIELDS}
        order = [times["min"], times["q25"], times["median"], times["q75"], times["max"]]
        if order != sorted(order):
            self.fail("timing_ms", value, "min <= q25 <= median <= q75 <= max")
        samples = value["samples"]
        if not isinstance(samples, list) or not samples:
            self.fail("timing_ms.samples", samples, "a non-empty list of times in ms")
        checked = tuple(self.number({f"samples[{index}]": sample}, f"samples[{index}]", above=0.0, prefix="timing_ms.")
                        for index, sample in enumerate(samples))
        return Timing(times["median"], times["min"], times["max"], times["q25"], times["q75"], checked)

    def _resources(self, value: object) -> Resources | None:
        if value is None:
            return None
        if not isinstance(value, dict):
            self.fail("resources", value, "null or an object with " + ", ".join(RESOURCE_FIELDS))
        self._fields(value, "resources.", RESOURCE_FIELDS, frozenset())
        return Resources(**{name: self.integer(value, name, least=0, prefix="resources.") for name in RESOURCE_FIELDS})

    def _window(self, value: object, index: int) -> EnergyEntry:
        prefix = f"energy_windows[{index}]."
        if not isinstance(value, dict):
            self.fail(prefix[:-1], value, "an object with " + ", ".join(_WINDOW_FIELDS))
        self._fields(value, prefix, _WINDOW_FIELDS, frozenset())
        throttled = value["throttled"]
        if not isinstance(throttled, bool):
            self.fail(prefix + "throttled", throttled, "true or false")
        window = EnergyWindow(
            seconds=self.number(value, "seconds", above=0.0, prefix=prefix),
            launches=self.integer(value, "launches", least=1, prefix=prefix),
            mean_power_w=self.number(value, "mean_power_w", least=0.0, prefix=prefix),
            energy_counter_j=self.number(value, "energy_counter_j", least=0.0, prefix=prefix, optional=True),
            energy_per_gemm_j=self.number(value, "energy_per_gemm_j", least=0.0, prefix=prefix),
            energy_per_gemm_counter_j=self.number(value, "energy_per_gemm_counter_j", least=0.0, prefix=prefix,
                                                  optional=True),
            idle_power_w=self.number(value, "idle_power_w", least=0.0, prefix=prefix, optional=True),
            sm_clock_mhz_mean=self.number(value, "sm_clock_mhz_mean", least=0.0, prefix=prefix, optional=True),
            sm_clock_mhz_min=self.integer(value, "sm_clock_mhz_min", least=0, prefix=prefix, optional=True),
            temperature_c_max=self.integer(value, "temperature_c_max", least=-INT32_MAX, prefix=prefix,
                                           optional=True),
            throttle_reasons=self.integer(value, "throttle_reasons", least=0, most=INT64_MAX, prefix=prefix,
                                          optional=True),
            throttled=throttled,
            samples=self.integer(value, "samples", least=0, prefix=prefix),
        )
        return EnergyEntry(window, self.time(value, "measured_at", prefix=prefix))

    def number(self, data: dict, name: str, *, above: float | None = None, least: float | None = None,
               prefix: str = "", optional: bool = False) -> float | None:
        """A finite number (not a boolean or string), ``> above`` and ``>= least`` where given."""
        value = data.get(name)
        if value is None and optional:
            return None
        bounds = "".join((f" > {above:g}" if above is not None else "", f" >= {least:g}" if least is not None else ""))
        valid = f"a finite number{bounds}" + (" or null" if optional else "")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            self.fail(prefix + name, value, valid)
        if (above is not None and not value > above) or (least is not None and not value >= least):
            self.fail(prefix + name, value, valid)
        return float(value)

    def integer(self, data: dict, name: str, *, least: int, most: int = INT32_MAX, prefix: str = "",
                optional: bool = False) -> int | None:
        """An integer (not a boolean or float) from ``least`` to ``most``."""
        value = data.get(name)
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
            self.fail(prefix + name, value, f"an integer from {least} to {most}" + (" or null" if optional else ""))
        return value

    def text(self, data: dict, name: str, column, *, prefix: str = "", optional: bool = False,
             empty: bool = True) -> str | None:
        """A string that fits ``column`` (a table column with a length)."""
        value = data.get(name)
        if value is None and optional:
            return None
        length = column.type.length
        if not isinstance(value, str) or (not empty and not value) or len(value) > length:
            size = f"of 1 to {length}" if not empty else f"of at most {length}"
            self.fail(prefix + name, value, f"a string {size} characters" + (" or null" if optional else ""))
        return value

    def time(self, data: dict, name: str, *, prefix: str = "") -> dt.datetime:
        """An ISO 8601 time; without a zone it is UTC."""
        value = data.get(name)
        try:
            moment = dt.datetime.fromisoformat(value)
        except (TypeError, ValueError):
            self.fail(prefix + name, value if name in data else _MISSING,
                      "an ISO 8601 time such as 2026-11-29T22:33:02.344523+00:00")
        return moment if moment.tzinfo else moment.replace(tzinfo=dt.timezone.utc)
