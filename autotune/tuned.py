"""Tuned results as text: JSON lines that ship in ``tuned_db/`` and load into any database.

One line per measurement: the environment, the problem, the kernel (family,
params, template hash; none for the cuBLAS reference), its timing and what was
read with it. ``autotune results export`` writes them from a database,
``autotune results import`` adds them to one (skipping lines already there).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from autotune.db import ResultStore
from autotune.errors import InputError
from autotune.problem import GemmProblem
from autotune.records import Environment, Measurement, Resources, Timing
from autotune.space import load_space


def export(store: ResultStore, gpu_key: str, stream: TextIO, per_problem: int = 10) -> int:
    """Write the best kernels per problem (and cuBLAS) for ``gpu_key``; returns the line count."""
    rows = store.export_rows(gpu_key, per_problem)
    for row in rows:
        stream.write(json.dumps(row, sort_keys=True) + "\n")
    return len(rows)


def import_file(store: ResultStore, path: Path) -> tuple[int, int]:
    """Add every measurement of a tuned-results file; returns (added, already present)."""
    added = present = 0
    for env, problem, config, template_hash, measurement, study, measured_at in read(path):
        if store.has_measurement(env, problem, config, template_hash, measurement.timing.median_ms):
            present += 1
            continue
        store.add_measurement(env, problem, config, template_hash, measurement, study, measured_at)
        added += 1
    return added, present


def read(path: Path) -> Iterator[tuple]:
    """(environment, problem, config or None, template hash, measurement, study, measured_at) per line."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as error:
        raise InputError("results file", str(path), f"a readable file ({error.strerror})") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield _row(json.loads(line))
        except (ValueError, KeyError, TypeError) as error:
            raise InputError(f"line {number} of {path}", line[:60], f"a tuned-results JSON line ({error})") from None


def _row(data: dict) -> tuple:
    timing = data["timing_ms"]
    measurement = Measurement(
        timing=Timing(timing["median"], timing["min"], timing["max"], timing["q25"], timing["q75"],
                      tuple(timing["samples"])),
        tflops=data["tflops"],
        max_error=data["max_error"],
        sm_clock_mhz=data.get("sm_clock_mhz"),
        throttle_reasons=data.get("throttle_reasons"),
        temperature_c=data.get("temperature_c"),
        resources=Resources(**data["resources"]) if data.get("resources") else None,
    )
    config = load_space(data["family"]).config(data["params"]) if data.get("family") else None
    measured_at = dt.datetime.fromisoformat(data["measured_at"]) if data.get("measured_at") else None
    return (Environment(**data["environment"]), GemmProblem(**data["problem"]), config,
            data.get("template_hash"), measurement, data.get("study"), measured_at)
