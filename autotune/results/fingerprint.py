"""Fingerprints: what makes a stored result the same result, as a SHA-256 hex digest.

Every measurement, failure and energy window carries one in a unique column, so a
row written twice (a retried write whose first commit did get through, a file
imported twice or by two processes at once) is stored once. A fingerprint covers
what identifies the result and the moment it was taken, never a row id, so the
same result has the same fingerprint in every database.

Migration 0003 computed the fingerprints of rows stored before it with these
functions: changing what they digest needs a migration that recomputes them.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Sequence

ENVIRONMENT_FIELDS = ("gpu_key", "gpu_name", "arch", "driver", "cuda_runtime", "nvrtc", "cupy")
PROBLEM_FIELDS = ("m", "n", "k", "dtype", "layout", "alpha", "beta")
KernelIdentity = tuple[str, str, "str | None"]  # (family, name, template_hash)


def utc_text(moment: dt.datetime) -> str:
    """``moment`` in UTC to the microsecond; a naive time is taken as UTC (SQLite drops the zone)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return moment.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")


def measurement(environment: dict, problem: dict, kernel: KernelIdentity | None, study: str | None,
                measured_at: dt.datetime, median_ms: float, samples_ms: Sequence[float]) -> str:
    """A measurement: where, what and when it was measured, and its times (``kernel`` None for cuBLAS)."""
    return _digest("measurement", _environment(environment), _problem(problem), _kernel(kernel), study,
                   utc_text(measured_at), float(median_ms), [float(sample) for sample in samples_ms])


def failure(environment: dict | None, problem: dict, kernel: KernelIdentity | None, study: str | None,
            failure_class: str, message: str, failed_at: dt.datetime) -> str:
    """A failure: where, what and when, and why."""
    return _digest("failure", None if environment is None else _environment(environment), _problem(problem),
                   _kernel(kernel), study, str(failure_class), str(message), utc_text(failed_at))


def energy_window(measurement_fingerprint: str, measured_at: dt.datetime, seconds: float, launches: int,
                  mean_power_w: float, energy_per_gemm_j: float) -> str:
    """An energy window: the measurement it belongs to, when it was taken and what it read."""
    return _digest("energy_window", measurement_fingerprint, utc_text(measured_at), float(seconds), int(launches),
                   float(mean_power_w), float(energy_per_gemm_j))


def _environment(fields: dict) -> list[str]:
    return [str(fields[name]) for name in ENVIRONMENT_FIELDS]


def _problem(fields: dict) -> list:
    return [int(fields["m"]), int(fields["n"]), int(fields["k"]), str(fields["dtype"]), str(fields["layout"]),
            float(fields["alpha"]), float(fields["beta"])]


def _kernel(kernel: KernelIdentity | None) -> list | None:
    return None if kernel is None else [str(kernel[0]), str(kernel[1]), kernel[2]]


def _digest(*parts) -> str:
    text = json.dumps(parts, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()
