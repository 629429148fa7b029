"""Arguments and checks shared by the ``autotune`` commands."""

from __future__ import annotations

import argparse
import dataclasses

from autotune.errors import DatabaseError, GpuMismatchError, InputError
from autotune.gpu_specs import AUTO, FAKE_SUFFIX, GPUS, GpuSpec, gpu_spec, spec_from_properties
from autotune.problem import DTYPES
from autotune.records import Environment
from autotune.results.urls import without_secrets
from autotune.space.family import SearchSpace, families_for_dtype, load_space, resolve_family, shipped_families
from autotune.space.survey import survey

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


def attached_gpu_spec(requested: GpuSpec | None, env: Environment, name: str,
                      properties: dict | None = None) -> GpuSpec:
    """The spec of the GPU the worker found; an error if it is not the one asked for.

    A GPU without a built-in spec gets one from its device ``properties``
    (``GpuWorker.device_properties()``); without them it is refused. The fake backend's
    GPU (``env.gpu_key`` ``h200-fake``) answers to ``--gpu h200`` and comes back under
    its own key, so its results are kept apart from the real GPU's.
    """
    simulated = env.gpu_key.endswith(FAKE_SUFFIX)
    real_key = env.gpu_key.removesuffix(FAKE_SUFFIX)
    if requested is not None and requested.key not in (env.gpu_key, real_key):
        raise GpuMismatchError(requested.key, env.gpu_key, env.gpu_name)
    gpu = requested or GPUS.get(real_key)
    if gpu is None and properties is not None:
        gpu = spec_from_properties(env.gpu_name, env.arch.removesuffix(FAKE_SUFFIX), properties)
    if gpu is None:
        raise InputError("--gpu", name, f"one of {', '.join(GPUS)} (the attached {env.gpu_name!r} is unknown)")
    return dataclasses.replace(gpu, key=env.gpu_key) if simulated else gpu


def family_space(args: argparse.Namespace, gpu: GpuSpec) -> SearchSpace:
    """``--family`` (a shipped family's name or the path of a space file, see
    :func:`~autotune.space.family.resolve_family`), or the highest-priority family for ``--dtype``
    that can run on ``gpu``."""
    if args.family:
        space = resolve_family(args.family)
        if space.dtype != args.dtype:
            raise InputError("--family", args.family, f"a family for {args.dtype} ({space.family} is {space.dtype}): "
                             + ", ".join(families_for_dtype(args.dtype)))
        return space
    families = families_for_dtype(args.dtype)
    if not families:
        raise InputError("--dtype", args.dtype, "a dtype with a search space: "
                         + ", ".join(sorted({load_space(f).dtype for f in all_families()})))
    for family in families:
        space = load_space(family)
        if survey(space, gpu, limit=1).feasible:
            return space
    return load_space(families[0])


def all_families() -> list[str]:
    return list(shipped_families())


def offline_gpu(name: str) -> GpuSpec:
    """``--gpu`` for offline commands: a named model, or ``auto`` through NVML."""
    if name.lower() != AUTO:
        return gpu_spec(name)
    from autotune.gpu.detect import attached_gpu

    return attached_gpu()


def require_positive(what: str, value: int | float | None) -> None:
    if value is not None and value <= 0:
        raise InputError(what, value, "a number > 0")




def open_store(url: str | None):
    """The result store at ``url`` (by default :func:`autotune.results.default_url`); its errors never
    show the URL's password."""
    from autotune.results import ResultStore, default_url

    url = url or default_url()
    try:
        return ResultStore(url)
    except DatabaseError as error:
        raise DatabaseError(without_secrets(str(error), url)) from None
