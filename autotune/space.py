"""Search spaces: knobs and their values, derived values, static rules, Config values.

A space file (``search_spaces/<family>.toml``) declares a kernel family as data:

* ``[knobs]``: each knob's candidate values, in a fixed order;
* ``[defaults]``: for knobs added after results were recorded, the value that
  renders the kernel those results measured (filled in where a config lacks it);
* ``[derived]``: named integer expressions over the knobs (threads, warp tile,
  shared-memory bytes, ...), evaluated in order;
* ``[[rules]]``: ``require`` expressions that must hold, each with a ``reason``
  format string naming the values that broke it;
* ``[launch]``: block size, grid and dynamic shared memory as expressions, and
  ``[[launch.tensor_maps]]``: the TMA tensor maps a kernel takes after the GEMM
  arguments (``when`` an expression holds), see :mod:`autotune.tensor_map`;
* ``[[seeds]]``: known-good configs a search tries first.

Expressions are a small safe subset of Python (arithmetic, comparisons,
``and``/``or``/``not``, conditional expressions, ``min``/``max``/``cdiv``) over
the knob and derived names, ``gpu`` (a :class:`~autotune.gpus.GpuSpec`) and
``problem`` (a :class:`~autotune.problem.GemmProblem`).

The shared-memory rule is built in: a config may use more than the GPU's
default per-block limit (48 KB) only when it opts in to dynamic shared memory
(``launch.opt_in``), and never more than the opt-in maximum.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import itertools
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta

from autotune.data_files import data_dir
from autotune.errors import InputError, SpaceError
from autotune.gpus import GpuSpec
from autotune.problem import GemmProblem
from autotune.tensor_map import TensorMapSpec

KB = 1024


@dataclasses.dataclass(frozen=True)
class Config:
    """One point of a search space: a frozen, hashable value with a deterministic name.

    The name is the kernel symbol, the database key and the dedup key at once.
    """

    family: str
    params: tuple[tuple[str, int], ...]  # (knob, value) in the space file's knob order

    @property
    def name(self) -> str:
        return self.family + "_" + "_".join(f"{knob.lower()}{value}" for knob, value in self.params)

    def as_dict(self) -> dict[str, int]:
        return dict(self.params)

    def __getitem__(self, knob: str) -> int:
        return self.as_dict()[knob]


@dataclasses.dataclass(frozen=True)
class Launch:
    """How to launch one config on one problem."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_smem: int  # bytes passed at launch (0 for static shared memory)
    opt_in: bool  # whether the kernel raises its dynamic shared-memory limit
    tensor_maps: tuple[TensorMapSpec, ...] = ()  # passed after the GEMM arguments, encoded for each launch


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The static check of one config: its derived values, and why it is rejected (or None)."""

    config: Config
    values: dict[str, int]  # knobs and derived values
    reason: str | None

    @property
    def feasible(self) -> bool:
        return self.reason is None


class _Expression:
    """A whitelisted Python expression compiled once, evaluated many times."""

    _ALLOWED = (
        ast.Expression, ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.Compare, ast.IfExp, ast.Call,
        ast.Name, ast.Load, ast.Attribute, ast.Constant,
        ast.And, ast.Or, ast.Not, ast.USub, ast.UAdd,
        ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow,
        ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE,
    )
    FUNCTIONS = {"min": min, "max": max, "cdiv": lambda a, b: -(-a // b)}

    def __init__(self, text: str, where: str):
        try:
            tree = ast.parse(str(text), mode="eval")
        except SyntaxError as error:
            raise SpaceError(f"{where}: cannot parse {text!r}: {error.msg}") from None
        for node in ast.walk(tree):
            if not isinstance(node, self._ALLOWED):
                raise SpaceError(f"{where}: {type(node).__name__} is not allowed in {text!r}")
            if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
                raise SpaceError(f"{where}: private attribute in {text!r}")
            if isinstance(node, ast.Call) and not (
                isinstance(node.func, ast.Name) and node.func.id in self.FUNCTIONS
            ):
                raise SpaceError(f"{where}: only {', '.join(self.FUNCTIONS)} may be called in {text!r}")
        self.text = text
        self.where = where
        self.names = frozenset(node.id for node in ast.walk(tree) if isinstance(node, ast.Name)) - set(self.FUNCTIONS)
        self._code = compile(tree, where, "eval")

    def __call__(self, names: dict[str, Any]) -> Any:
        try:
            return eval(self._code, {"__builtins__": {}, **self.FUNCTIONS}, names)  # noqa: S307 - whitelisted AST
        except ZeroDivisionError:
            return None
        except (NameError, AttributeError, TypeError) as error:
            raise SpaceError(f"{self.where}: {self.text!r}: {error}") from None


@dataclasses.dataclass(frozen=True)
class Rule:
    require: _Expression
    reason: str


@dataclasses.dataclass(frozen=True)
class _TensorMapEntry:
    """A ``[[launch.tensor_maps]]`` entry: a TensorMapSpec whose box and swizzle are expressions."""

    when: _Expression
    name: str
    operand: str
    box: tuple[_Expression, _Expression]
    swizzle: _Expression

    @classmethod
    def parse(cls, data: dict, where: str) -> _TensorMapEntry:
        box = data["box"]
        if not isinstance(box, list) or len(box) != 2:
            raise SpaceError(f"{where}: box must be [columns, rows], got {box!r}")
        return cls(_Expression(data.get("when", "True"), f"{where} when"), str(data["name"]), str(data["operand"]),
                   (_Expression(box[0], f"{where} box"), _Expression(box[1], f"{where} box")),
                   _Expression(data["swizzle"], f"{where} swizzle"))

    def spec(self, names: dict[str, Any]) -> TensorMapSpec | None:
        if not self.when(names):
            return None
        try:
            return TensorMapSpec(self.name, self.operand, (int(self.box[0](names)), int(self.box[1](names))),
                                 int(self.swizzle(names)))
        except ValueError as error:
            raise SpaceError(f"tensor map {self.name}: {error}") from None


class SearchSpace:
    """A kernel family's knobs, rules and launch geometry, loaded from a TOML file."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            text = self.path.read_text()
            data = tomllib.loads(text)
        except (OSError, tomllib.TOMLDecodeError) as error:
            raise SpaceError(f"cannot read search space {self.path}: {error}") from None
        self.source_text = text
        where = self.path.name
        try:
            self.family: str = data["family"]
            self.dtype: str = data["dtype"]
            self.template: str = data["template"]
            # Templates live in the project's templates/ unless the file names a folder beside it.
            self.template_dir = (self.path.parent / data["template_dir"]).resolve() if "template_dir" in data \
                else data_dir("templates")
            self.description: str = data.get("description", "")
            self.priority: int = int(data.get("priority", 0))  # higher: the default family for its dtype
            # Appended to the NVRTC target: "a" builds for sm_90a, whose instructions (wgmma) only sm_90 runs.
            self.arch_suffix: str = str(data.get("arch_suffix", ""))
            self.knobs: dict[str, tuple[int, ...]] = {
                name: tuple(int(v) for v in values) for name, values in data["knobs"].items()
            }
            self.defaults: dict[str, int] = {name: int(v) for name, v in data.get("defaults", {}).items()}
            unknown = set(self.defaults) - set(self.knobs)
            if unknown:
                raise SpaceError(f"{where}: [defaults] names {sorted(unknown)[0]!r}, which is not a knob")
            self.derived = {
                name: _Expression(expr, f"{where} [derived] {name}") for name, expr in data.get("derived", {}).items()
            }
            self.rules = [
                Rule(_Expression(rule["require"], f"{where} rule"), rule["reason"]) for rule in data.get("rules", [])
            ]
            launch = data["launch"]
            self._launch = {key: _Expression(launch[key], f"{where} [launch] {key}") for key in
                            ("block", "grid_x", "grid_y", "dynamic_smem", "opt_in", "smem_bytes")}
            self._tensor_maps = [_TensorMapEntry.parse(entry, f"{where} [[launch.tensor_maps]] {i}")
                                 for i, entry in enumerate(launch.get("tensor_maps", []))]
            self.seeds = [self.config(seed) for seed in data.get("seeds", [])]
        except KeyError as error:
            raise SpaceError(f"{where}: missing {error}") from None

    # -- configs ---------------------------------------------------------------

    def config(self, values: dict[str, int]) -> Config:
        """The Config for knob values (every knob, each one of its listed values; knobs
        with a ``[defaults]`` entry may be left out)."""
        unknown = set(values) - set(self.knobs)
        if unknown:
            raise InputError("knob", sorted(unknown)[0], ", ".join(self.knobs))
        values = {**self.defaults, **values}
        params = []
        for knob, choices in self.knobs.items():
            if knob not in values:
                raise InputError(f"{self.family} config", values, f"a value for every knob ({', '.join(self.knobs)})")
            value = int(values[knob])
            if value not in choices:
                raise InputError(knob, value, ", ".join(map(str, choices)))
            params.append((knob, value))
        return Config(self.family, tuple(params))

    def __iter__(self) -> Iterator[Config]:
        """Every combination of knob values, in a deterministic order."""
        names = list(self.knobs)
        for combo in itertools.product(*self.knobs.values()):
            yield Config(self.family, tuple(zip(names, combo)))

    @property
    def size(self) -> int:
        return functools.reduce(lambda a, b: a * len(b), self.knobs.values(), 1)

    @functools.cached_property
    def template_hash(self) -> str:
        """Hash of the template, the templates it imports and this space file: part of every result's key."""
        texts = [(self.template_dir / name).read_text() for name in _template_files(self.template_dir, self.template)]
        return hashlib.sha256("\0".join([*texts, self.source_text]).encode()).hexdigest()[:16]

    def target(self, gpu: GpuSpec) -> str:
        """The NVRTC target for ``gpu``: ``sm_90``, or ``sm_90a`` for a family with ``arch_suffix = "a"``
        (arch-specific targets exist from sm_90 on; older GPUs get the plain one)."""
        return gpu.sm + (self.arch_suffix if gpu.arch >= 90 else "")

    # -- rules -----------------------------------------------------------------

    def values(self, config: Config, gpu: GpuSpec, problem: GemmProblem | None = None) -> dict[str, Any]:
        """Knob values plus derived values (None where a derivation divides by zero)."""
        names: dict[str, Any] = {"gpu": gpu, "problem": problem, **config.as_dict()}
        for name, expression in self.derived.items():
            names[name] = expression(names)
        return names

    def check(self, config: Config, gpu: GpuSpec, problem: GemmProblem | None = None) -> Verdict:
        """Apply the static rules and the shared-memory rule; say why a config is rejected."""
        names = self.values(config, gpu, problem)
        plain = {k: v for k, v in names.items() if k not in ("gpu", "problem")}
        for rule in self.rules:
            reason = self.rule_violation(rule, names)
            if reason is not None:
                return Verdict(config, plain, reason)
        return Verdict(config, plain, self.smem_violation(names, gpu))

    def rule_violation(self, rule: Rule, names: dict[str, Any]) -> str | None:
        """The rule's reason, filled in, if ``names`` break it."""
        return None if rule.require(names) else self._format(rule.reason, names)

    def smem_violation(self, names: dict[str, Any], gpu: GpuSpec) -> str | None:
        """Why the config's shared memory does not fit a block on ``gpu`` (48 KB unless it opts in), or None."""
        smem = self._launch["smem_bytes"](names)
        opt_in = bool(self._launch["opt_in"](names))
        if not opt_in and smem > gpu.smem_per_block:
            return f"smem {smem / KB:.1f} KB > {gpu.smem_per_block // KB} KB ({gpu.key})"
        if opt_in and smem > gpu.smem_per_block_optin:
            return f"smem {smem / KB:.1f} KB > {gpu.smem_per_block_optin // KB} KB opt-in maximum ({gpu.key})"
        return None

    @property
    def smem_names(self) -> frozenset[str]:
        """The names the shared-memory rule reads."""
        return self._launch["smem_bytes"].names | self._launch["opt_in"].names

    def launch(self, config: Config, gpu: GpuSpec, problem: GemmProblem) -> Launch:
        """Grid, block and dynamic shared memory for ``config`` on ``problem``."""
        names = self.values(config, gpu, problem)
        get = lambda key: self._launch[key](names)  # noqa: E731
        return Launch(
            grid=(int(get("grid_x")), int(get("grid_y")), 1),
            block=(int(get("block")), 1, 1),
            dynamic_smem=int(get("dynamic_smem")),
            opt_in=bool(get("opt_in")),
            tensor_maps=tuple(spec for entry in self._tensor_maps if (spec := entry.spec(names)) is not None),
        )

    def verdicts(self, gpu: GpuSpec, problem: GemmProblem | None = None) -> Iterator[Verdict]:
        """The check of every config, one by one (:mod:`autotune.survey` checks the whole space faster)."""
        return (self.check(config, gpu, problem) for config in self)

    @staticmethod
    def _format(reason: str, names: dict[str, Any]) -> str:
        try:
            return reason.format_map(names)
        except (KeyError, AttributeError, IndexError, ValueError):
            return reason


_PARSER = jinja2.Environment()


def _template_files(template_dir: Path, name: str) -> list[str]:
    """``name`` and every template it imports or includes, each once."""
    found: list[str] = []
    pending = [name]
    while pending:
        current = pending.pop(0)
        if current in found:
            continue
        found.append(current)
        source = (template_dir / current).read_text()
        pending += [ref for ref in jinja2.meta.find_referenced_templates(_PARSER.parse(source)) if ref]
    return found


def space_path(family: str) -> Path:
    return data_dir("search_spaces") / f"{family}.toml"


@functools.cache
def load_space(family: str) -> SearchSpace:
    """The space of a kernel family, e.g. ``"sgemm"``."""
    path = space_path(family)
    if not path.exists():
        choices = ", ".join(sorted(p.stem for p in data_dir("search_spaces").glob("*.toml")))
        raise InputError("family", family, choices)
    return SearchSpace(path)


def families_for_dtype(dtype: str) -> list[str]:
    """Kernel families whose space file declares ``dtype``, highest priority first."""
    names = [p.stem for p in data_dir("search_spaces").glob("*.toml") if load_space(p.stem).dtype == dtype]
    return sorted(names, key=lambda name: (-load_space(name).priority, name))
