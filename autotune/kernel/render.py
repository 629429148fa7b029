"""Render a Config of a kernel family into CUDA source through its Jinja template.

Templates may come from a colleague's folder, so they render in Jinja's sandbox
(no attribute walks to Python internals, no calls to anything unsafe), only
from files inside their family's template folder, and with ``**`` and repetition
of strings and lists bounded. What the sandbox cannot bound (loops nested deep,
``lipsum(10**8)``, an integer squared again and again) is bounded by where a
user's template renders: a process of its own, with a deadline and a memory limit.
"""

from __future__ import annotations

import functools
import operator
from pathlib import Path

import jinja2
import jinja2.sandbox

from autotune.errors import SpaceError
from autotune.gpu_specs import GpuSpec
from autotune.kernel.compile import include_dirs
from autotune.kernel.includes import IncludeError, family_headers
from autotune.kernel.render_process import RenderProcess
from autotune.kernel.source import KernelSource
from autotune.space.family import Config, SearchSpace, inside_folder, read_template

MAX_SOURCE_CHARS = 1_000_000  # the longest source a template may render
MAX_POWER_BITS = 4096  # the largest result of ** in a template
MAX_REPEAT = 1 << 20  # the longest string or list ``*`` may make


class _FolderLoader(jinja2.BaseLoader):
    """Templates that are files inside one folder (no ``..``, no links leading out)."""

    def __init__(self, folder: str):
        self.folder = Path(folder)

    def get_source(self, environment, template):
        path = inside_folder(self.folder, template)
        mtime = path.stat().st_mtime
        return read_template(path), str(path), lambda: path.exists() and path.stat().st_mtime == mtime


class _BoundedSandbox(jinja2.sandbox.SandboxedEnvironment):
    """The sandbox, with ``**`` and ``*`` refused where their result would be huge."""

    intercepted_binops = frozenset({"**", "*"})

    def call_binop(self, context, operator_name, left, right):
        if operator_name == "**":
            _check_power(left, right)
            return operator.pow(left, right)
        if operator_name == "*":
            _check_repeat(left, right)
            return operator.mul(left, right)
        return super().call_binop(context, operator_name, left, right)


def _check_power(base, exponent) -> None:
    if isinstance(base, int) and isinstance(exponent, int) and abs(base) > 1:
        if exponent > MAX_POWER_BITS or abs(base).bit_length() * exponent > MAX_POWER_BITS:
            raise jinja2.sandbox.SecurityError(f"{base} ** {exponent} is too large")


def _check_repeat(left, right) -> None:
    for sequence, count in ((left, right), (right, left)):
        if isinstance(sequence, (str, list, tuple)) and isinstance(count, int) and len(sequence) * count > MAX_REPEAT:
            raise jinja2.sandbox.SecurityError(f"a sequence repeated {count} times is too long")


@functools.cache
def _environment(template_dir: str) -> jinja2.Environment:
    return _BoundedSandbox(
        loader=_FolderLoader(template_dir),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def render(space: SearchSpace, config: Config, gpu: GpuSpec) -> KernelSource:
    """Render ``config`` for the dtype of ``space`` (:meth:`~autotune.space.family.SearchSpace.for_dtype`);
    every template variable must be a knob or derived integer, or one of the strings naming the element
    type (:meth:`~autotune.space.family.SearchSpace.element_variables`: ``ELEMENT``, ``ELEMENT_PTX``, ...).

    A shipped family renders here; a user's family in the render process, under its deadline and
    memory limit (:mod:`autotune.kernel.render_process`). Either way the source is at most
    MAX_SOURCE_CHARS long, and includes only CUDA headers and files of the family's template
    folder, which it carries (:mod:`autotune.kernel.includes`).

    Raises:
        SpaceError: the config's name is not an identifier, a value is missing or not an
            integer, the template is missing, malformed, names an undefined variable, tries
            something the sandbox forbids or renders past a bound, or the source includes
            something it may not.
    """
    if not config.name.isidentifier():
        raise SpaceError(f"{config.name!r} is not a kernel name (family and knob names are identifiers)")
    values = space.values(config, gpu)
    variables: dict[str, int | str] = {**space.element_variables(), "NAME": config.name}
    for name, value in values.items():
        if name in ("gpu", "problem"):
            continue
        if isinstance(value, bool):
            value = int(value)
        if not isinstance(value, int):
            raise SpaceError(f"{config.name}: {name} = {value!r} is not an integer")
        variables[name] = value
    template_dir = str(space.template_dir)
    if space.shipped:
        code = render_template(template_dir, space.template, variables)
    else:
        code = _RENDER_PROCESS.render(template_dir, space.template, variables)
    try:
        headers = family_headers(code, space.template_dir, include_dirs())
    except IncludeError as error:
        raise IncludeError(f"{space.template}: {error}") from None
    return KernelSource(entry=config.name, code=code, template_hash=space.template_hash, target=space.target(gpu),
                        headers=headers)


def render_template(template_dir: str, template: str, variables: dict[str, int | str]) -> str:
    """``template`` of ``template_dir`` rendered with ``variables``, at most MAX_SOURCE_CHARS long.

    Raises:
        SpaceError: the template is missing or malformed, names an undefined variable, tries something
            the sandbox forbids, renders more than MAX_SOURCE_CHARS, nests too deeply or runs out of memory.
    """
    try:
        pieces, length = [], 0
        for piece in _environment(template_dir).get_template(template).generate(**variables):
            length += len(piece)
            if length > MAX_SOURCE_CHARS:
                raise SpaceError(f"{template}: renders more than {MAX_SOURCE_CHARS} characters")
            pieces.append(piece)
        return "".join(pieces)
    except jinja2.UndefinedError as error:
        raise SpaceError(f"{template}: {error.message}") from None
    except jinja2.sandbox.SecurityError as error:
        raise SpaceError(f"{template}: refused by the template sandbox: {error}") from None
    except jinja2.TemplateSyntaxError as error:
        raise SpaceError(f"{template} line {error.lineno}: {error.message}") from None
    except jinja2.TemplateNotFound as error:
        raise SpaceError(f"{template}: template {error.name!r} is not a file in {template_dir}") from None
    except RecursionError:
        raise SpaceError(f"{template}: nests too deeply (includes, macros or blocks calling themselves?)") from None
    except MemoryError:
        raise SpaceError(f"{template}: rendering ran out of memory") from None
    except (jinja2.TemplateError, TypeError, ValueError, ArithmeticError) as error:
        raise SpaceError(f"{template}: {type(error).__name__}: {' '.join(str(error).split())}") from None


_RENDER_PROCESS = RenderProcess(render_template)
