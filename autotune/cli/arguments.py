"""Arguments and checks shared by the ``autotune`` commands."""

from __future__ import annotations

import argparse

from autotune.errors import InputError
from autotune.gpu_specs import AUTO, GPUS, GpuSpec, gpu_spec
from autotune.problem import DTYPES
from autotune.results.opening import open_store  # noqa: F401 (the commands open --db through here)

EXIT_USAGE = 2


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad argument as one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"autotune: error: {message}\n")


def add_problem_arguments(parser: argparse.ArgumentParser, family: bool = True, gpu_required: bool = True) -> None:
    """--gpu, --shape, --dtype (and --family)."""
    parser.add_argument("--gpu", required=gpu_required,
                        help=f"GPU model: {', '.join(GPUS)} or {AUTO} (the attached GPU)")
    parser.add_argument("--shape", required=True, help="problem size: 4096 (square) or MxNxK")
    parser.add_argument("--dtype", default="f32", help=f"element type: {', '.join(DTYPES)} (default f32)")
    if family:
        parser.add_argument("--family", help="kernel family: a shipped one's name, or the path of your own "
                                             "space file, e.g. ./my_space.toml (default: the one for --dtype)")


def add_db_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", help="SQLAlchemy URL of the results database (default: see README)")


def add_backend_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", default="cupy", choices=["cupy", "fake"],
                        help="GPU backend: cupy (default), or fake to exercise the pipeline with no GPU")


def requested_gpu(name: str) -> GpuSpec | None:
    """The GPU named by ``--gpu`` for a GPU command; None for ``auto`` (the attached one)."""
    return None if name.lower() == AUTO else gpu_spec(name)


def offline_gpu(name: str) -> GpuSpec:
    """``--gpu`` for offline commands: a named model, or ``auto`` through NVML."""
    if name.lower() != AUTO:
        return gpu_spec(name)
    from autotune.gpu.detect import attached_gpu

    return attached_gpu()


def require_positive(what: str, value: int | float | None) -> None:
    if value is not None and value <= 0:
        raise InputError(what, value, "a number > 0")
