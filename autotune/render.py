"""Render a Config of a kernel family into CUDA source through its Jinja template."""

from __future__ import annotations

import dataclasses
import functools

import jinja2

from autotune.errors import SpaceError
from autotune.gpus import GpuSpec
from autotune.space import Config, SearchSpace


@dataclasses.dataclass(frozen=True)
class KernelSource:
    """CUDA source for one config; ``entry`` is its ``extern "C"`` symbol, ``target`` the NVRTC
    target it is meant for (``sm_90``, ``sm_90a``; empty when the compiler is told)."""

    entry: str
    code: str
    template_hash: str
    target: str = ""


@functools.cache
def _environment(template_dir: str) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(template_dir),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def render(space: SearchSpace, config: Config, gpu: GpuSpec) -> KernelSource:
    """Render ``config``; every template variable must be a knob or derived integer.

    Raises:
        SpaceError: a value is missing, not an integer, or the template names an
            undefined variable.
    """
    values = space.values(config, gpu)
    variables: dict[str, int | str] = {"NAME": config.name}
    for name, value in values.items():
        if name in ("gpu", "problem"):
            continue
        if isinstance(value, bool):
            value = int(value)
        if not isinstance(value, int):
            raise SpaceError(f"{config.name}: {name} = {value!r} is not an integer")
        variables[name] = value
    try:
        code = _environment(str(space.template_dir)).get_template(space.template).render(**variables)
    except jinja2.UndefinedError as error:
        raise SpaceError(f"{space.template}: {error.message}") from None
    return KernelSource(entry=config.name, code=code, template_hash=space.template_hash, target=space.target(gpu))
