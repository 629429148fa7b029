"""Search spaces: knobs and their values, derived values, static rules, Config values.

A space file (``search_spaces/<family>.toml``) declares a kernel family as data:

* ``[knobs]``: each knob's candidate values, in a fixed order;
* ``[defaults]``: for knobs added after results were recorded, the value that
  renders the kernel those results measured (filled in where a config lacks it);
* ``[derived]``: named integer expressions over the knobs (threads, warp tile,
  shared-memory bytes, ...), evaluated in order;
* ``[[rules]]``: ``require`` expressions that must hold, each with a ``reason``
  format string naming the values that broke it;
* ``[launch]``: block size, grid and dynamic shared memory as expressions, the bytes
  of global workspace a kernel takes after the GEMM arguments (``workspace``, 0 if
  none), and ``[[launch.tensor_maps]]``: the TMA tensor maps it takes after those
  (``when`` an expression holds), see :mod:`autotune.kernel_abi`;
* ``[[seeds]]``: known-good configs a search tries first.

Family, knob and derived names are identifiers and knob values are integers.
Expressions are a small safe subset of Python (arithmetic, comparisons,
``and``/``or``/``not``, conditional expressions, ``min``/``max``/``cdiv``) over
the knob and derived names and the numeric fields of ``gpu`` (a
:class:`~autotune.gpu_specs.GpuSpec`) and ``problem`` (a
:class:`~autotune.problem.GemmProblem`), bounded in length and magnitude; a
reason reads only ``{NAME}`` and ``{gpu.FIELD}`` (:mod:`autotune.expression`).

The shipped families are found by name (:func:`load_space`); a user's own
family by the path of its file (:func:`resolve_family`), with its templates
in that file's folder.

The shared-memory rule is built in: a config may use more than the GPU's
default per-block limit (48 KB) only when it opts in to dynamic shared memory
(``launch.opt_in``), and never more than the opt-in maximum.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import itertools
import math
import os
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta
import jinja2.sandbox

from autotune.data_files import data_dir
from autotune.errors import InputError, SpaceError
from autotune.expression import Expression, Reason, check_name
from autotune.gpu_specs import GPUS, GpuSpec
from autotune.kernel_abi import OPERANDS, TensorMapSpec
from autotune.problem import DTYPES, ELEMENTS, LAYOUTS, GemmProblem

KB = 1024


@dataclasses.dataclass(frozen=True)
class Config:
    """One point of a search space: a frozen, hashable value with a deterministic name.

    The name is the kernel symbol, the database key and the dedup key at once.
    """

    family: str
    params: tuple[tuple[str, int], ...]  # (knob, value) in the space file's knob order
    # The dtype it is built for where its family serves several and this is not the first (bf16 of an
    # fp16 family); empty for the first. A kernel of another dtype is another kernel: its name ends in it.
    other_dtype: str = ""
    # The layout it is built for ("nt": B stored transposed); a kernel of another layout is another kernel,
    # whose name ends in it. "row", the layout every family serves, adds nothing.
    layout: str = "row"

    @property
    def name(self) -> str:
        knobs = "_".join(f"{knob.lower()}{value}" for knob, value in self.params)
        return (f"{self.family}_{knobs}" + (f"_{self.other_dtype}" if self.other_dtype else "")
                + (f"_{self.layout}" if self.layout != "row" else ""))

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
    workspace: int = 0  # bytes of global memory passed after the GEMM arguments (0: none), see kernel_abi


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The static check of one config: its derived values, and why it is rejected (or None)."""

    config: Config
    values: dict[str, int]  # knobs and derived values
    reason: str | None

    @property
    def feasible(self) -> bool:
        return self.reason is None


@dataclasses.dataclass(frozen=True)
class Rule:
    require: Expression
    reason: str  # the reason as written; ``reason_format`` fills it in
    reason_format: Reason

    @property
    def reads_problem(self) -> bool:
        """The rule reads ``problem.FIELD``: it applies only where there is a problem."""
        return "problem" in self.require.names


@dataclasses.dataclass(frozen=True)
class _TensorMapEntry:
    """A ``[[launch.tensor_maps]]`` entry: a TensorMapSpec whose box and swizzle are expressions."""

    when: Expression
    name: str
    operand: str
    box: tuple[Expression, Expression]
    swizzle: Expression

    @classmethod
    def parse(cls, data: object, where: str, names: frozenset[str]) -> _TensorMapEntry:
        if not isinstance(data, dict):
            raise SpaceError(f"{where}: expected a table, got {_shown(data)}")
        box = data["box"]
        if not isinstance(box, list) or len(box) != 2:
            raise SpaceError(f"{where}: box must be [columns, rows], got {_shown(box)}")
        operand = data["operand"]
        if operand not in OPERANDS:
            raise SpaceError(f"{where}: operand {_shown(operand)}: expected one of {', '.join(OPERANDS)}")
        return cls(Expression(data.get("when", "True"), f"{where} when", names),
                   check_name("tensor map name", data["name"], where), operand,
                   (Expression(box[0], f"{where} box", names), Expression(box[1], f"{where} box", names)),
                   Expression(data["swizzle"], f"{where} swizzle", names))

    def spec(self, names: dict[str, Any]) -> TensorMapSpec | None:
        if not self.when(names):
            return None
        try:
            return TensorMapSpec(self.name, self.operand, (int(self.box[0](names)), int(self.box[1](names))),
                                 int(self.swizzle(names)))
        except (ValueError, TypeError, OverflowError) as error:
            raise SpaceError(f"tensor map {self.name}: {error}") from None


ARCH_SUFFIXES = ("", "a", "f")
# Names every expression and template of a space may read besides its knobs and derived values: the
# layout of the space's builds (B_TRANSPOSED 1 for "nt", B stored n x k), bound before any knob.
LAYOUT_NAMES = ("B_TRANSPOSED",)
MAX_KNOB_VALUE = 2**31 - 1
_LAUNCH_KEYS = ("block", "grid_x", "grid_y", "dynamic_smem", "opt_in", "smem_bytes")
_OPTIONAL_LAUNCH_KEYS = {"workspace": "0"}  # a kernel without a workspace takes none
_LAUNCH_MINIMA = {"block": 1, "grid_x": 1, "grid_y": 1}  # the others: 0
MAX_LAUNCH_VALUE = 2**31 - 1
MAX_TEMPLATE_BYTES = 1 << 20  # the largest template file
MAX_TEMPLATES = 256  # the most template files one family's template may import or include
_TEMPLATE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


class SearchSpace:
    """A kernel family's knobs, rules and launch geometry, loaded from a TOML file.

    Args:
        path: the space file.
        templates: the folder of the family's templates when the file names no
            ``template_dir`` (:func:`load_space` passes the project's ``templates/``);
            by default the file's own folder. A ``template_dir`` is relative to the
            file and must stay inside its folder.

    Raises:
        SpaceError: the file cannot be read, or any name, value, expression or reason in it
            is malformed (one line naming the file and the bad value).
    """

    def __init__(self, path: Path, templates: Path | None = None):
        self.path = Path(path)
        self._variants: dict[tuple[str, str], SearchSpace] = {}  # this family's spaces per (dtype, layout), made once
        self.pins: dict[str, tuple[int, ...]] = {}  # knobs a search limits to some values (subspace.pin)
        try:
            text = self.path.read_text()
            data = tomllib.loads(text)
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
            raise SpaceError(f"cannot read search space {self.path}: {error}") from None
        self.source_text = text
        where = self.path.name
        try:
            self._read_header(data, where, templates)
            self._variants[(self.dtype, self.layout)] = self
            self.knobs: dict[str, tuple[int, ...]] = {
                check_name("knob", name, f"{where} [knobs]"): _knob_values(name, values, where)
                for name, values in _table(data, "knobs", where).items()
            }
            if not self.knobs:
                raise SpaceError(f"{where}: [knobs] is empty")
            self.defaults: dict[str, int] = self._read_defaults(_table(data, "defaults", where, {}), where)
            self.derived = self._read_derived(_table(data, "derived", where, {}), where)
            names = frozenset(self.knobs) | frozenset(self.derived) | frozenset(LAYOUT_NAMES)
            self.rules = [_rule(entry, f"{where} [[rules]] {i}", names)
                          for i, entry in enumerate(_list(data, "rules", where))]
            self.specialized = self._read_specialized(_table(data, "specialize", where, {}), where, names)
            self.rules += [_specialized_rule(knob, expression, where) for knob, expression in self.specialized.items()]
            launch = _table(data, "launch", where)
            self._launch = {key: Expression(launch[key], f"{where} [launch] {key}", names) for key in _LAUNCH_KEYS}
            self._launch.update({key: Expression(launch.get(key, default), f"{where} [launch] {key}", names)
                                 for key, default in _OPTIONAL_LAUNCH_KEYS.items()})
            self._tensor_maps = [_TensorMapEntry.parse(entry, f"{where} [[launch.tensor_maps]] {i}", names)
                                 for i, entry in enumerate(_list(launch, "tensor_maps", f"{where} [launch]"))]
            self.seeds = [self._seed(entry, f"{where} [[seeds]] {i}")
                          for i, entry in enumerate(_list(data, "seeds", where))]
        except KeyError as error:
            raise SpaceError(f"{where}: missing {error}") from None
        self._check_launch()

    def _check_launch(self) -> None:
        """Check the launch values that can be known at load: those of constant expressions, and each
        seed's on the first known GPU whose rules admit it (on a 4096 problem). Other configs' values
        are checked where they are computed (:meth:`launch`, :meth:`smem_violation`)."""
        for key, expression in self._launch.items():
            if not expression.names:
                self._launch_value(key, {})
        problem = GemmProblem(4096, 4096, 4096, self.dtype)
        for seed in self.seeds:
            gpu = next((gpu for gpu in GPUS.values() if self.check(seed, gpu, problem).feasible), None)
            if gpu is not None:
                self.launch(seed, gpu, problem)

    def _read_header(self, data: dict, where: str, templates: Path | None) -> None:
        self.family: str = check_name("family", data["family"], where)
        self.dtypes: tuple[str, ...] = _read_dtypes(data, where)
        self.dtype: str = self.dtypes[0]  # the dtype this space's configs are built for (:meth:`for_dtype`)
        self.layouts: tuple[str, ...] = _read_layouts(data, where)
        self.layout: str = "row"  # the layout this space's configs are built for (:meth:`for_layout`)
        self.template: str = data["template"]
        if not isinstance(self.template, str) or not _TEMPLATE_NAME.fullmatch(self.template) or ".." in self.template:
            raise SpaceError(f"{where}: template {_shown(self.template)} is not a file name (letters, digits, _ . -)")
        self.template_dir = self._template_folder(data, where, templates)
        self.description: str = _typed(data, "description", str, "", where)
        self.priority: int = _typed(data, "priority", int, 0, where)  # higher: the default family for its dtype
        # Appended to the NVRTC target: "a" builds for sm_90a, whose instructions (wgmma) only sm_90 runs.
        self.arch_suffix: str = _typed(data, "arch_suffix", str, "", where)
        if self.arch_suffix not in ARCH_SUFFIXES:
            raise SpaceError(f"{where}: arch_suffix {self.arch_suffix!r}: expected one of "
                             + ", ".join(map(repr, ARCH_SUFFIXES)))

    def _template_folder(self, data: dict, where: str, templates: Path | None) -> Path:
        """The folder the templates come from: ``template_dir`` inside the file's folder, or the default."""
        folder = self.path.parent.resolve()
        if "template_dir" not in data:
            return Path(templates).resolve() if templates is not None else folder
        name = data["template_dir"]
        if not isinstance(name, str):
            raise SpaceError(f"{where}: template_dir {_shown(name)} is not a string")
        resolved = (folder / name).resolve()
        if not resolved.is_relative_to(folder):
            raise SpaceError(f"{where}: template_dir {name!r} leaves the folder of the space file ({folder})")
        return resolved

    def _read_defaults(self, table: dict, where: str) -> dict[str, int]:
        defaults = {}
        for name, value in table.items():
            if name not in self.knobs:
                raise SpaceError(f"{where}: [defaults] names {name!r}, which is not a knob")
            if type(value) is not int or value not in self.knobs[name]:
                raise SpaceError(f"{where}: [defaults] {name} = {_shown(value)}: expected one of its values "
                                 + ", ".join(map(str, self.knobs[name])))
            defaults[name] = value
        return defaults

    def _read_derived(self, table: dict, where: str) -> dict[str, Expression]:
        derived: dict[str, Expression] = {}
        for name, text in table.items():
            check_name("derived value", name, f"{where} [derived]")
            if name in self.knobs or name in derived:
                raise SpaceError(f"{where}: [derived] {name} is already a knob or a derived value")
            derived[name] = Expression(text, f"{where} [derived] {name}", [*self.knobs, *derived, *LAYOUT_NAMES])
        return derived

    def _read_specialized(self, table: dict, where: str, names: frozenset[str]) -> dict[str, Expression]:
        """``[specialize]``: knobs of values 0 and 1 (default 0) that the problem sets, each to its
        expression's truth on the problem; 1 builds the kernel for just those problems."""
        specialized: dict[str, Expression] = {}
        for name, text in table.items():
            if sorted(self.knobs.get(name, ())) != [0, 1] or self.defaults.get(name) != 0:
                raise SpaceError(f"{where}: [specialize] {name}: expected a knob of values [0, 1] with default 0")
            expression = Expression(text, f"{where} [specialize] {name}", names - {name})
            if "problem" not in expression.names:
                raise SpaceError(f"{where}: [specialize] {name} = {text!r} does not read the problem")
            specialized[name] = expression
        return specialized

    def _seed(self, entry: object, where: str) -> Config:
        if not isinstance(entry, dict):
            raise SpaceError(f"{where}: expected a table of knob values, got {_shown(entry)}")
        try:
            return self.config(entry)
        except InputError as error:
            raise SpaceError(f"{where}: {error}") from None

    def for_dtype(self, dtype: str) -> SearchSpace:
        """This family's space for ``dtype``, one it serves: its configs render for that element type
        and, where it is not the family's first, are named for it (``..._bf16``).

        Raises:
            InputError: the family does not serve ``dtype`` (the error lists the dtypes it does).
        """
        if dtype not in self.dtypes:
            raise InputError("dtype", dtype, f"a dtype {self.family} serves: {', '.join(self.dtypes)}")
        return self._variant(dtype, self.layout)

    def for_layout(self, layout: str) -> SearchSpace:
        """This family's space for ``layout``, one it serves (``layouts = ["row", "nt"]`` in its file): its
        configs render with ``B_TRANSPOSED`` set for that layout and, where it is not "row", are named for it
        (``..._nt``).

        Raises:
            InputError: the family does not serve ``layout`` (the error lists the layouts it does).
        """
        if layout not in self.layouts:
            raise InputError("--layout", layout, f"a layout {self.family} serves: {', '.join(self.layouts)}")
        return self._variant(self.dtype, layout)

    def _variant(self, dtype: str, layout: str) -> SearchSpace:
        if (dtype, layout) == (self.dtype, self.layout):
            return self
        other = self._variants.get((dtype, layout))
        if other is None:
            other = copy.copy(self)  # shares _variants: every variant finds the others
            other.dtype, other.layout = dtype, layout
            other.seeds = [dataclasses.replace(seed, other_dtype=other.other_dtype, layout=layout)
                           for seed in self.seeds]
            self._variants[(dtype, layout)] = other
        return other

    @property
    def other_dtype(self) -> str:
        """:attr:`Config.other_dtype` of this space's configs: its dtype where that is not the family's first."""
        return "" if self.dtype == self.dtypes[0] else self.dtype

    def layout_values(self) -> dict[str, int]:
        """The values of :data:`LAYOUT_NAMES` for this space's layout (``B_TRANSPOSED``)."""
        return {"B_TRANSPOSED": int(self.layout == "nt")}

    def element_variables(self) -> dict[str, str]:
        """The template variables naming the element type of :attr:`dtype` (``ELEMENT``, ``ELEMENT_PTX``,
        ...; :class:`~autotune.problem.ElementType`): one template renders each dtype its family serves."""
        element = ELEMENTS[self.dtype]
        return {"DTYPE": element.name, "ELEMENT": element.c_type, "ELEMENT2": element.c_pair,
                "ELEMENT_PTX": element.ptx, "ELEMENT_HEADER": element.header, "TO_FLOAT": element.to_float,
                "FROM_FLOAT": element.from_float, "TO_FLOAT2": element.pair_to_float2,
                "FROM_FLOATS2": element.floats_to_pair}

    # -- configs ---------------------------------------------------------------

    def config(self, values: dict[str, int]) -> Config:
        """The Config for knob values (every knob, each one of its listed values; knobs
        with a ``[defaults]`` entry may be left out).

        Raises:
            InputError: an unknown knob, a missing one, or a value that is not one of the knob's
                (integers only: ``128.9``, ``"128"`` and ``True`` are refused, not converted).
        """
        unknown = set(values) - set(self.knobs)
        if unknown:
            raise InputError("knob", sorted(map(str, unknown))[0], ", ".join(self.knobs))
        values = {**self.defaults, **values}
        params = []
        for knob, choices in self.knobs.items():
            if knob not in values:
                raise InputError(f"{self.family} config", values, f"a value for every knob ({', '.join(self.knobs)})")
            value = values[knob]
            if type(value) is not int or value not in choices:
                raise InputError(knob, value, ", ".join(map(str, choices)))
            params.append((knob, value))
        return Config(self.family, tuple(params), self.other_dtype, self.layout)

    def __iter__(self) -> Iterator[Config]:
        """Every combination of knob values, in a deterministic order."""
        names = list(self.knobs)
        for combo in itertools.product(*self.knobs.values()):
            yield Config(self.family, tuple(zip(names, combo)), self.other_dtype, self.layout)

    @property
    def size(self) -> int:
        return functools.reduce(lambda a, b: a * len(b), self.knobs.values(), 1)

    @functools.cached_property
    def shipped(self) -> bool:
        """Whether this family ships with autotune (its file is one of ``search_spaces/``): its templates
        are part of autotune, not a user's."""
        return self.path.resolve().parent == data_dir("search_spaces").resolve()

    @functools.cached_property
    def template_hash(self) -> str:
        """Hash of the template, the templates it imports and this space file: part of every result's key."""
        try:
            texts = [(self.template_dir / name).read_text()
                     for name in _template_files(self.template_dir, self.template)]
        except (OSError, UnicodeDecodeError, jinja2.TemplateError) as error:
            raise SpaceError(f"{self.path.name}: template {self.template!r} in {self.template_dir}: "
                             f"{_one_line(error)}") from None
        except RecursionError:
            raise SpaceError(f"{self.path.name}: template {self.template!r} in {self.template_dir} nests too "
                             "deeply to read") from None
        return hashlib.sha256("\0".join([*texts, self.source_text]).encode()).hexdigest()[:16]

    def target(self, gpu: GpuSpec) -> str:
        """The NVRTC target for ``gpu``: ``sm_90``, or ``sm_90a`` for a family with ``arch_suffix = "a"``
        (arch-specific targets exist from sm_90 on; older GPUs get the plain one)."""
        return gpu.sm + (self.arch_suffix if gpu.arch >= 90 else "")

    # -- rules -----------------------------------------------------------------

    def values(self, config: Config, gpu: GpuSpec, problem: GemmProblem | None = None) -> dict[str, Any]:
        """Knob values plus derived values (None where a derivation divides by zero)."""
        names: dict[str, Any] = {"gpu": gpu, "problem": problem, **self.layout_values(), **config.as_dict()}
        for name, expression in self.derived.items():
            names[name] = expression(names)
        return names

    def check(self, config: Config, gpu: GpuSpec, problem: GemmProblem | None = None) -> Verdict:
        """Apply the static rules and the shared-memory rule; say why a config is rejected."""
        names = self.values(config, gpu, problem)
        plain = {k: v for k, v in names.items() if k not in ("gpu", "problem", *LAYOUT_NAMES)}
        element = ELEMENTS[self.dtype]
        if gpu.arch < element.min_arch:
            return Verdict(config, plain, f"{self.dtype} needs sm_{element.min_arch} or newer "
                                          f"({gpu.key} is sm_{gpu.arch})")
        for rule in self.rules_for(problem):
            reason = self.rule_violation(rule, names)
            if reason is not None:
                return Verdict(config, plain, reason)
        return Verdict(config, plain, self.smem_violation(names, gpu))

    def for_problem(self, config: Config, gpu: GpuSpec, problem: GemmProblem) -> Config:
        """``config`` with each ``[specialize]`` knob set as ``problem`` asks (the build a search on
        ``problem`` would try for it)."""
        if not self.specialized:
            return config
        names = self.values(config, gpu, problem)
        values = {knob: int(bool(expression(names))) for knob, expression in self.specialized.items()}
        return self.config({**config.as_dict(), **values})

    def unbuilt_for(self, config: Config, gpu: GpuSpec, problem: GemmProblem) -> str | None:
        """Why ``config`` is not built for ``problem`` (a ``[specialize]`` knob at 1 whose expression
        does not hold there), or None: such a kernel must not run on it."""
        names = self.values(config, gpu, problem)
        for knob, expression in self.specialized.items():
            if names[knob] and not expression(names):
                return f"{config.name} is built for problems where [specialize] {knob} holds, not {problem.shape}"
        return None

    def build_for(self, config: Config, gpu: GpuSpec, problem: GemmProblem) -> Config:
        """The build of ``config`` that runs on ``problem``: itself, or where it is built for other problems
        only (``[specialize]`` knobs at 1), its build for any problem."""
        return config if self.unbuilt_for(config, gpu, problem) is None else self.for_any_problem(config)

    def for_any_problem(self, config: Config) -> Config:
        """``config`` built for any problem: each ``[specialize]`` knob at 0."""
        if not self.specialized:
            return config
        return self.config({**config.as_dict(), **dict.fromkeys(self.specialized, 0)})

    def rules_for(self, problem: GemmProblem | None) -> list[Rule]:
        """The rules that apply: all of them on a problem; without one (what a GPU can run of the
        family at all), those that do not read ``problem``."""
        return self.rules if problem is not None else [rule for rule in self.rules if not rule.reads_problem]

    def rule_violation(self, rule: Rule, names: dict[str, Any]) -> str | None:
        """The rule's reason, filled in, if ``names`` break it."""
        return None if rule.require(names) else rule.reason_format.format(names)

    def smem_violation(self, names: dict[str, Any], gpu: GpuSpec) -> str | None:
        """Why the config's shared memory does not fit a block on ``gpu`` (48 KB unless it opts in), or None.

        Raises:
            SpaceError: ``smem_bytes`` or ``opt_in`` is not a launch value (:meth:`launch`).
        """
        smem = self._launch_value("smem_bytes", names)
        opt_in = self._launch_value("opt_in", names)
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
        """Grid, block and dynamic shared memory for ``config`` on ``problem``.

        Raises:
            SpaceError: a launch value is not a whole number in its range (block, grid >= 1, shared
                memory >= 0, each below 2**31; opt_in a truth value), naming the file, field and value.
        """
        names = self.values(config, gpu, problem)
        get = lambda key: self._launch_value(key, names, config)  # noqa: E731
        return Launch(
            grid=(get("grid_x"), get("grid_y"), 1),
            block=(get("block"), 1, 1),
            dynamic_smem=get("dynamic_smem"),
            opt_in=get("opt_in"),
            tensor_maps=tuple(spec for entry in self._tensor_maps if (spec := entry.spec(names)) is not None),
            workspace=get("workspace"),
        )

    def _launch_value(self, key: str, names: dict[str, Any], config: Config | None = None) -> int | bool:
        """The ``[launch]`` value ``key`` for ``names``, checked (:meth:`launch`)."""
        expression = self._launch[key]
        value = expression(names)
        number = isinstance(value, (int, float)) and math.isfinite(value)
        if key == "opt_in" and number:
            return bool(value)
        low = _LAUNCH_MINIMA.get(key, 0)
        if number and value == int(value) and low <= value <= MAX_LAUNCH_VALUE:
            return int(value)
        at = f" for {config.name}" if config is not None else ""
        expected = "True or False" if key == "opt_in" else f"a whole number {low}..{MAX_LAUNCH_VALUE}"
        shown = "a division by zero" if value is None else repr(value)
        raise SpaceError(f"{self.path.name}: [launch] {key} = {expression.text!r} is {shown}{at}; expected {expected}")

    def verdicts(self, gpu: GpuSpec, problem: GemmProblem | None = None) -> Iterator[Verdict]:
        """The check of every config, one by one (:mod:`autotune.space.survey` checks the whole space faster)."""
        return (self.check(config, gpu, problem) for config in self)

_PARSER = jinja2.sandbox.SandboxedEnvironment()


def _template_files(template_dir: Path, name: str) -> list[str]:
    """``name`` and every template it imports or includes, each once; each a file inside ``template_dir``
    of at most MAX_TEMPLATE_BYTES, and at most MAX_TEMPLATES of them."""
    found: list[str] = []
    pending = [name]
    while pending:
        current = pending.pop(0)
        if current in found:
            continue
        if len(found) >= MAX_TEMPLATES:
            raise jinja2.TemplateError(f"more than {MAX_TEMPLATES} templates")
        found.append(current)
        source = read_template(inside_folder(template_dir, current))
        pending += [ref for ref in jinja2.meta.find_referenced_templates(_PARSER.parse(source)) if ref]
    return found


def read_template(path: Path) -> str:
    """The text of a template file, refused (TemplateError) where it is larger than MAX_TEMPLATE_BYTES."""
    if path.stat().st_size > MAX_TEMPLATE_BYTES:
        raise jinja2.TemplateError(f"{path.name} is larger than {MAX_TEMPLATE_BYTES} bytes")
    return path.read_text()


def inside_folder(folder: Path, name: str) -> Path:
    """The file ``name`` in ``folder``, refused (TemplateNotFound) where it is not a plain name of a
    file inside it, a link leads out of it, or a part of it is hidden (``.ssh/...``: a family kept in a
    home folder does not give its templates the dot files there)."""
    if not isinstance(name, str) or name.startswith("/") or any(part.startswith(".") for part in name.split("/")):
        raise jinja2.TemplateNotFound(str(name))
    folder = Path(folder).resolve()
    path = (folder / name).resolve()
    if not path.is_relative_to(folder) or not path.is_file():
        raise jinja2.TemplateNotFound(name)
    return path


def _shown(value: object, length: int = 60) -> str:
    """``repr(value)``, clipped to one short line."""
    text = repr(value)
    return text if len(text) <= length else text[:length] + "..."


def _one_line(error: BaseException) -> str:
    text = getattr(error, "message", None) or str(error) or type(error).__name__
    return " ".join(str(text).split())


# -- reading a space file -------------------------------------------------------------------


def _table(data: dict, key: str, where: str, default: dict | None = None) -> dict:
    value = data.get(key, default) if default is not None else data[key]
    if not isinstance(value, dict):
        raise SpaceError(f"{where}: [{key}] must be a table, got {_shown(value)}")
    return value


def _list(data: dict, key: str, where: str) -> list:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise SpaceError(f"{where}: {key} must be an array of tables, got {_shown(value)}")
    return value


def _typed(data: dict, key: str, kind: type, default: Any, where: str) -> Any:
    value = data.get(key, default)
    if type(value) is not kind:
        raise SpaceError(f"{where}: {key} {_shown(value)} is not {'an integer' if kind is int else 'a string'}")
    return value


def _read_dtypes(data: dict, where: str) -> tuple[str, ...]:
    """The dtypes a family serves: ``dtypes = ["f16", "bf16"]`` (the first is its own: its configs' names
    carry no dtype), or one ``dtype = "f32"``."""
    if ("dtype" in data) == ("dtypes" in data):
        raise SpaceError(f"{where}: give dtype (one) or dtypes (a list), not {'both' if 'dtype' in data else 'neither'}")
    dtypes = data["dtypes"] if "dtypes" in data else [data["dtype"]]
    if not isinstance(dtypes, list) or not dtypes or len(set(map(str, dtypes))) != len(dtypes):
        raise SpaceError(f"{where}: dtypes {_shown(dtypes)}: expected a list of distinct dtypes, e.g. [\"f16\", \"bf16\"]")
    for dtype in dtypes:
        if dtype not in DTYPES:
            raise SpaceError(f"{where}: dtype {_shown(dtype)}: expected one of {', '.join(DTYPES)}")
    return tuple(dtypes)


def _read_layouts(data: dict, where: str) -> tuple[str, ...]:
    """The layouts a family serves: ``layouts = ["row", "nt"]``; by default "row" alone, which every
    family must serve (its configs' names carry no layout)."""
    layouts = data.get("layouts", ["row"])
    if not isinstance(layouts, list) or "row" not in layouts or len(set(map(str, layouts))) != len(layouts):
        raise SpaceError(f"{where}: layouts {_shown(layouts)}: expected a list of distinct layouts with \"row\", "
                         "e.g. [\"row\", \"nt\"]")
    for layout in layouts:
        if layout not in LAYOUTS:
            raise SpaceError(f"{where}: layout {_shown(layout)}: expected one of {', '.join(LAYOUTS)}")
    return tuple(layouts)


def _knob_values(name: str, values: object, where: str) -> tuple[int, ...]:
    """A knob's values: a non-empty list of distinct integers 0..2**31-1 (they become part of kernel names)."""
    if not isinstance(values, list) or not values:
        raise SpaceError(f"{where} [knobs] {name}: {_shown(values)} is not a list of integer values")
    for value in values:
        if type(value) is not int:
            raise SpaceError(f"{where} [knobs] {name}: {_shown(value)} is not an integer")
        if not 0 <= value <= MAX_KNOB_VALUE:
            raise SpaceError(f"{where} [knobs] {name}: {value} is out of range 0..{MAX_KNOB_VALUE}")
    if len(set(values)) != len(values):
        raise SpaceError(f"{where} [knobs] {name}: {_shown(values)} lists a value twice")
    return tuple(values)


def _specialized_rule(knob: str, expression: Expression, where: str) -> Rule:
    """The rule a ``[specialize]`` knob adds: its value 1 builds for the problems its expression admits."""
    text = f"not {knob} or ({expression.text})"
    reason = f"{knob} 1 builds the kernel for the problems where [specialize] {knob} holds, not this one"
    return Rule(Expression(text, f"{where} [specialize] {knob}", [knob, *expression.names - {"problem", "gpu"}]),
                reason, Reason(reason, f"{where} [specialize] {knob}", [knob]))


def _rule(entry: object, where: str, names: frozenset[str]) -> Rule:
    if not isinstance(entry, dict):
        raise SpaceError(f"{where}: expected a table with require and reason, got {_shown(entry)}")
    reason = entry["reason"]
    return Rule(Expression(entry["require"], f"{where} require", names), reason,
                Reason(reason, f"{where} reason", names))


# -- finding a family -----------------------------------------------------------------------


@functools.cache
def shipped_families() -> tuple[str, ...]:
    """The names of the families that ship with autotune (``search_spaces/*.toml``)."""
    return tuple(sorted(p.stem for p in data_dir("search_spaces").glob("*.toml")))


def space_path(family: str) -> Path:
    """The file of a shipped family."""
    return data_dir("search_spaces") / f"{family}.toml"


def load_space(family: str, dtype: str | None = None, layout: str = "row") -> SearchSpace:
    """The space of a shipped kernel family, by name, e.g. ``"sgemm"``; never a path; for ``dtype``
    (:meth:`SearchSpace.for_dtype`), by default the family's first, and ``layout`` (:meth:`SearchSpace.for_layout`).

    This is what names read from results files and databases go through.

    Raises:
        InputError: ``family`` is not the name of a shipped family (the error lists them), or it does
            not serve ``dtype``.
    """
    if not isinstance(family, str) or family not in shipped_families():
        raise InputError("family", family, ", ".join(shipped_families()))
    space = _load_shipped(family)
    space = space if dtype is None else space.for_dtype(dtype)
    return space if layout == "row" else space.for_layout(layout)


@functools.cache
def _load_shipped(family: str) -> SearchSpace:
    space = SearchSpace(space_path(family), templates=data_dir("templates"))
    if space.family != family:
        raise SpaceError(f"{space.path.name}: family {space.family!r} differs from the file name")
    return space


def is_family_path(text: str) -> bool:
    """Whether ``--family`` text names a file: it holds a ``/`` or ends in ``.toml``."""
    return "/" in text or os.sep in text or text.endswith(".toml")


def resolve_family(text: str) -> SearchSpace:
    """``--family``: a shipped family's name (``sgemm``), or the path of a user's space file
    (``./my_space.toml``: anything with a ``/`` or ending in ``.toml``), whose templates sit in
    its folder; ``examples/...`` that names no file here is the example shipped with autotune
    (``examples/column_sgemm/column_sgemm.toml``). Only the command line calls this; names from
    results files and databases go through :func:`load_space`.

    Raises:
        InputError: neither a shipped family nor an existing file.
        SpaceError: the file is malformed, or its family takes the name of a shipped one.
    """
    choices = f"a shipped family ({', '.join(shipped_families())}) or the path of a space file, e.g. ./my_space.toml"
    if not is_family_path(text):
        if text not in shipped_families():
            raise InputError("--family", text, choices)
        return load_space(text)
    path = Path(text).expanduser()
    if not path.is_file():
        path = _shipped_example(text)
    if path is None:
        raise InputError("--family", text, choices + " (no such file)")
    space = SearchSpace(path)
    if space.family in shipped_families():
        raise SpaceError(f"{path}: family {space.family!r} is the name of a shipped family; give yours its own name")
    return space


def _shipped_example(text: str) -> Path | None:
    """The file ``examples/REST`` names among the examples shipped with autotune, or None."""
    first, _, rest = text.replace(os.sep, "/").partition("/")
    if first != "examples" or not rest:
        return None
    try:
        return inside_folder(data_dir("examples"), rest)
    except (jinja2.TemplateNotFound, FileNotFoundError):
        return None


def families_for_dtype(dtype: str, layout: str = "row") -> list[str]:
    """Shipped kernel families whose space file declares ``dtype`` and ``layout``, highest priority first."""
    names = [name for name in shipped_families()
             if dtype in load_space(name).dtypes and layout in load_space(name).layouts]
    return sorted(names, key=lambda name: (-load_space(name).priority, name))
