"""The kernel table: what a program needs to call tuned kernels, with no database.

A :class:`KernelTable` holds, for one GPU (or every GPU of one architecture)
and each dtype, the kernels a selection chose (at most 16, each with its
launch contract and, once compiled, its cubin; a kernel built for whole tiles
brings its build for any shape, launched where the shape has partial tiles)
and the rules that map a shape to one of them: the tuned shapes, each with the
times of those kernels and of cuBLAS measured there and its measured quality.
A shape gets, of the kernels measured at the nearest tuned shape, the one whose
time there scaled by the change in its busiest SM's work is least; and cuBLAS
instead where that predicted time is more than cuBLAS's time there carried in
proportion to ``m * n * k`` (:meth:`DtypeTable.pick`, :mod:`autotune.select.scaling`).
This one rule is what ``autotune table`` and ``plot`` show, what the runtime
launches and what the C library's ``autotune_gemm_pick`` computes.

A table is built from results by :mod:`autotune.select.selection` and compiled
by :mod:`autotune.export.compile`; this module only holds it. It is written as
JSON (:meth:`KernelTable.to_dict`, ``schema_version`` 2) by ``autotune export``
and read back by the runtime (:func:`autotune.load`), checked as it is read:
every number finite, every expression one the table can evaluate at every size
it serves without leaving 64 bits. Version 1 files (one time per rule) are read
too: their picks are the nearest tuned shape's kernel (or cuBLAS, where it was faster there).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Any

from autotune import __version__
from autotune.errors import AutotuneError, InputError
from autotune.expression import MAX_MAGNITUDE, MAX_SIZE, SIZES
from autotune.gpu_specs import GPUS, GpuSpec
from autotune.kernel.contract import LaunchContract, cdiv
from autotune.kernel.cubin import check_cubin
from autotune.kernel_abi import KERNEL_ARGUMENTS
from autotune.problem import DTYPES, LAYOUTS
from autotune.records import Resources
from autotune.select.scaling import cublas_ms_at, fastest
from autotune.shapes import farther_than_carried, nearest

SCHEMA_VERSION = 2
READS_SCHEMA_VERSIONS = (1, 2)
TUNED_RANGE_FACTOR = 2  # a table serves sizes from half its smallest to twice its largest tuned size, per axis
KIND = "autotune-kernel-table"
MAX_SMS = 4096  # the most SMs a GPU of a table may have
SELECTION_RULE = ("nearest tuned shape: the least |log m - log m'| + |log n - log n'| + |log k - log k'|, "
                  "a tie going to the larger tuned shape; there, of the kernels measured (times, fastest first), "
                  "of those that run the shape (its serves expression holds, or it has a build for any shape), "
                  "the least ms * work(shape) / work(tuned shape), a tie going to the earlier, where work = "
                  "cdiv(grid blocks, sms) * k_tiles (the busiest SM's k-tiles); cuBLAS instead where that least "
                  "time is more than cublas_ms * cost(shape) / cost(tuned shape), cost = max(2 * m * n * k, ridge * "
                  "(m * k + k * n + m * n)) (cuBLAS has no launch contract: it chooses its own kernel per shape, so "
                  "its time is carried by a roofline at the throughput measured there); "
                  "cuBLAS where none runs it, or where the shape is more than twice or less than half the nearest "
                  "tuned shape on any axis (a kernel's time is not carried that far), or where the chosen kernel's "
                  "tiles are whole along N or K at the tuned shape and cut at this one, whole meaning one more "
                  "column (or element of K) would take more work(1, n, 1) (or work(1, 1, k)) on one SM; "
                  "sizes outside [ceil(smallest tuned / 2), largest tuned * 2] on any axis are not served (cuBLAS)")


def cuts_whole_tiles(launch: LaunchContract, there: tuple[int, int, int], here: tuple[int, int, int]) -> bool:
    """Whether ``here`` cuts the kernel's tiles along N or K where ``there`` (its tuned shape) has them whole. A
    time measured on whole tiles is not carried to cut ones: on the H200 every kernel run at shapes cutting N or K
    ran at 0.27-0.84x cuBLAS, however fast at its tuned shape (bench/NOTES.md, "Cut tiles, shipped for N and K").
    M is not checked: token counts cut it anywhere, and f16 and bf16 kernels there ran within 0.96-1.10 of their
    carried times."""
    return any(_whole(launch, axis, there[axis]) and not _whole(launch, axis, here[axis]) for axis in (1, 2))


def _whole(launch: LaunchContract, axis: int, size: int) -> bool:
    """Whether ``size`` along ``axis`` (the other sizes 1) ends a whole tile: one more would take one SM more work."""
    probe, more = [1, 1, 1], [1, 1, 1]
    probe[axis], more[axis] = size, size + 1
    return launch.work(*more, 1) > launch.work(*probe, 1)


class TableError(AutotuneError):
    """A kernel table cannot be built, read or used."""


# Families whose kernels read C (beta != 0) far slower than they write it, so that the table's times, all of beta 0,
# do not hold where beta is not 0: cuBLAS runs those calls. hgemm_wgmma: the shipped table's kernels measured
# 0.76-0.95x cuBLAS at beta 0.5 on the H200 (bench/NOTES.md, "Calls with beta != 0").
SLOW_C_READS = frozenset({"hgemm_wgmma"})


@dataclasses.dataclass(frozen=True)
class TableKernel:
    """One kernel of the table: a config of a family, how to launch it, and (once compiled) its cubin."""

    name: str
    family: str
    params: dict[str, int]
    template_hash: str  # of the template it is built from
    launch: LaunchContract
    resources: Resources | None = None
    cubin: bytes | None = None
    any_shape: str | None = None  # a build for some shapes only: the table's build of it for any shape
    # The dtype it is built for where that is not its family's first (bf16 of an fp16 family), as
    # :attr:`~autotune.space.family.Config.other_dtype`; empty for the first.
    other_dtype: str = ""
    layout: str = "row"  # the layout it is built for (:attr:`~autotune.space.family.Config.layout`)

    @property
    def dtype(self) -> str | None:
        """The dtype it is built for: :attr:`other_dtype`, or None for its family's first."""
        return self.other_dtype or None

    @property
    def reads_c_slowly(self) -> bool:
        """Whether a call with beta != 0 should run cuBLAS instead (:data:`SLOW_C_READS`)."""
        return self.family in SLOW_C_READS

    def to_dict(self, with_cubin: bool) -> dict[str, Any]:
        data = {
            "name": self.name, "family": self.family, "params": self.params, "template_hash": self.template_hash,
            "launch": self.launch.to_dict(),
            "resources": dataclasses.asdict(self.resources) if self.resources else None,
            "any_shape": self.any_shape,
        }
        if self.other_dtype:
            data["other_dtype"] = self.other_dtype
        if self.layout != "row":
            data["layout"] = self.layout
        if with_cubin and self.cubin is not None:
            data["cubin_base64"] = base64.b64encode(self.cubin).decode()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TableKernel:
        cubin = base64.b64decode(data["cubin_base64"], validate=True) if data.get("cubin_base64") else None
        if not str(data["name"]).isidentifier() or not str(data["family"]).isidentifier():
            raise ValueError(f"kernel name {data['name']!r} or family {data['family']!r} is not an identifier")
        if cubin is not None:
            check_cubin(cubin, str(data["name"]))  # CubinError is a ValueError: one line naming the file
        return cls(name=str(data["name"]), family=str(data["family"]),
                   params={str(k): int(v) for k, v in data["params"].items()},
                   template_hash=str(data["template_hash"]), launch=LaunchContract.from_dict(data["launch"]),
                   resources=Resources(**data["resources"]) if data.get("resources") else None, cubin=cubin,
                   any_shape=str(data["any_shape"]) if data.get("any_shape") else None,
                   other_dtype=_other_dtype(data.get("other_dtype", "")), layout=_layout(data.get("layout", "row")))


def _layout(value: object) -> str:
    if value not in LAYOUTS:
        raise ValueError(f"layout {value!r} (expected one of {', '.join(LAYOUTS)})")
    return str(value)


def _other_dtype(value: object) -> str:
    if value != "" and value not in DTYPES:
        raise ValueError(f"other_dtype {value!r} (expected one of {', '.join(DTYPES)}, or none)")
    return str(value)


@dataclasses.dataclass(frozen=True)
class TableRule:
    """A tuned shape and the table's kernel for it, with what was measured there."""

    m: int
    n: int
    k: int
    kernel: str
    ms: float
    cublas_ms: float | None
    measured_on: str  # the GPU's name
    held_out_fraction_of_best: float | None = None  # this shape's pick by the table without it, vs its best
    best_ms: float | None = None  # the fastest kernel measured here, in the table or not (files before it: None)
    times: tuple[tuple[str, float], ...] = ()  # the table's kernels measured here (name, ms), fastest first

    def __post_init__(self):  # TableError for a size or time a table cannot hold
        if not self.times:  # a rule made with its own kernel only (version 1 files)
            object.__setattr__(self, "times", ((self.kernel, self.ms),))
        sizes = [self.m, self.n, self.k]
        if any(type(size) is not int or not 1 <= size <= MAX_SIZE for size in sizes):
            raise TableError(f"rule {sizes}: sizes must be integers from 1 to {MAX_SIZE}")
        numbers = {"ms": self.ms, "cublas_ms": self.cublas_ms, "best_ms": self.best_ms,
                   "held_out_fraction_of_best": self.held_out_fraction_of_best}
        for what, value in [*numbers.items(), *((f"time of {name}", ms) for name, ms in self.times)]:
            if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise TableError(f"rule {sizes}: {what} {value!r} is not a positive finite number")
        if self.times[0][0] != self.kernel or [t for _, t in self.times] != sorted(t for _, t in self.times):
            raise TableError(f"rule {sizes}: times must start with its kernel and be positive, fastest first")

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.m, self.n, self.k

    @property
    def ratio_to_cublas(self) -> float | None:
        """cuBLAS time over this kernel's time where both were measured (above 1: faster than cuBLAS)."""
        return self.cublas_ms / self.ms if self.cublas_ms else None

    @property
    def fraction_of_best(self) -> float | None:
        """The fastest time measured here over this kernel's (1: the kernel is the best measured here)."""
        return self.best_ms / self.ms if self.best_ms else None

    def to_dict(self) -> dict[str, Any]:
        return {"m": self.m, "n": self.n, "k": self.k, "kernel": self.kernel, "ms": self.ms,
                "cublas_ms": self.cublas_ms, "ratio_to_cublas": self.ratio_to_cublas,
                "measured_on": self.measured_on, "held_out_fraction_of_best": self.held_out_fraction_of_best,
                "best_ms": self.best_ms, "times": [[name, ms] for name, ms in self.times]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TableRule:
        sizes = [int(data[axis]) for axis in ("m", "n", "k")]
        ms = float(data["ms"])
        cublas = data.get("cublas_ms")
        held = data.get("held_out_fraction_of_best")
        best = data.get("best_ms")
        times = tuple((str(name), float(time)) for name, time in data.get("times", [[data["kernel"], ms]]))
        if not times:
            raise ValueError(f"rule {sizes}: times must start with its kernel and be positive, fastest first")
        return cls(*sizes, kernel=str(data["kernel"]), ms=ms, cublas_ms=float(cublas) if cublas else None,
                   measured_on=str(data["measured_on"]), held_out_fraction_of_best=float(held) if held else None,
                   best_ms=float(best) if best else None, times=times)


@dataclasses.dataclass(frozen=True)
class TablePick:
    """What a shape gets: cuBLAS (``cublas``) or the tuned kernel ``kernel``, chosen at ``rule`` (the nearest
    tuned shape), with the times predicted for both at the shape. ``kernel`` is always a tuned kernel: the one
    to run where cuBLAS is picked but cannot be loaded."""

    rule: TableRule
    kernel: str
    measured: str = ""  # the kernel of the rule's times it was chosen as: itself, or one built for whole tiles
    kernel_ms: float | None = None  # its predicted time at the shape (its time at the rule, scaled by its work)
    cublas_ms: float | None = None  # cuBLAS's predicted time at the shape; None where the rule has none
    # No kernel measured at the rule runs this shape (each is built for fewer rows, say): cuBLAS must, and
    # ``kernel`` (the rule's) must not run here.
    unserved: bool = False
    # The shape is more than CARRIED_FACTOR times (or less than 1 / CARRIED_FACTOR of) the rule's on some axis:
    # cuBLAS, since the kernel's time carried that far says little (``kernel`` is still the one predicted fastest).
    far: bool = False
    # The kernel's tiles are whole along N or K at the rule and cut here (:func:`cuts_whole_tiles`): cuBLAS.
    cut: bool = False

    def __post_init__(self):
        if not self.measured:
            object.__setattr__(self, "measured", self.kernel)

    @property
    def cublas(self) -> bool:
        """Whether the shape goes to cuBLAS: no kernel of the rule runs it, the rule is too far from it
        (:data:`~autotune.shapes.CARRIED_FACTOR`), the shape cuts the kernel's tiles where the rule's are whole
        (:func:`cuts_whole_tiles`), or the kernel's predicted time is more than cuBLAS's."""
        slower = self.cublas_ms is not None and self.kernel_ms is not None and self.kernel_ms > self.cublas_ms
        return self.unserved or self.far or self.cut or slower

    @property
    def ratio_to_cublas(self) -> float | None:
        """cuBLAS's predicted time over the kernel's (below 1: the kernel is predicted slower than cuBLAS)."""
        return self.cublas_ms / self.kernel_ms if self.cublas_ms is not None and self.kernel_ms else None


@dataclasses.dataclass(frozen=True)
class DtypeTable:
    """The kernels and rules of one dtype, and the SM count their times scale with.

    A table built from results lists its kernels in the order its selection chose them, then the builds
    for any shape of those built for whole tiles. Making one checks that each kernel's grid and k-tiles
    are at least 1 and its work (:meth:`LaunchContract.work`) stays within 64 bits at every size from 1
    to the largest the table serves (TableError otherwise), so a pick never fails at its first call.
    """

    kernels: tuple[TableKernel, ...]
    rules: tuple[TableRule, ...]
    sms: int = 1
    ridge: float = 0.0  # the GPU's peak flops per element moved, which cuBLAS's times are carried by (0: m*n*k)

    def __post_init__(self):
        if type(self.sms) is not int or not 1 <= self.sms <= MAX_SMS:
            raise TableError(f"sms {self.sms!r} (expected an integer from 1 to {MAX_SMS})")
        if type(self.ridge) is not float or not 0.0 <= self.ridge < 1e6:
            raise TableError(f"ridge {self.ridge!r} (expected a number of flops per element from 0 to 1e6)")
        if self.rules:  # every size from 1 to the largest served, so that picks outside the range evaluate too
            domain = {size: (1, min(high, MAX_SIZE)) for size, (_, high) in self.served_sizes().items()}
            for kernel in self.kernels:
                _check_bounded(kernel, domain, self.sms)

    def kernel(self, name: str) -> TableKernel:
        return next(kernel for kernel in self.kernels if kernel.name == name)

    @property
    def chosen(self) -> tuple[TableKernel, ...]:
        """The kernels the rules choose among (those their times name), in the table's order."""
        named = {name for rule in self.rules for name, _ in rule.times}
        return tuple(kernel for kernel in self.kernels if kernel.name in named)

    def short_name(self, name: str) -> str:
        """``k1`` for the first kernel the rules choose among, ``k2`` for the next, ...; ``k2-any`` for the
        build for any shape of ``k2`` (built for whole tiles); any other name as it is."""
        chosen = [kernel.name for kernel in self.chosen]
        if name in chosen:
            return f"k{chosen.index(name) + 1}"
        whole = next((kernel.name for kernel in self.chosen if kernel.any_shape == name), None)
        return f"{self.short_name(whole)}-any" if whole else name

    def served(self, name: str) -> int:
        """How many rules have ``name`` as their kernel (those that go to cuBLAS too)."""
        return sum(1 for rule in self.rules if rule.kernel == name)

    def goes_to_cublas(self, rule: TableRule) -> bool:
        """Whether the table picks cuBLAS at ``rule``'s own shape (its kernel was slower than cuBLAS there)."""
        return bool(self.rules) and self._choose(*rule.shape).cublas

    def served_sizes(self) -> dict[str, tuple[int, int]]:
        """Per size (M, N, K), the least and greatest the rules serve (see :meth:`outside`)."""
        ranges = {}
        for size, axis in zip(SIZES, "mnk"):
            tuned = [getattr(rule, axis) for rule in self.rules]
            ranges[size] = (-(-min(tuned) // TUNED_RANGE_FACTOR), max(tuned) * TUNED_RANGE_FACTOR)
        return ranges

    def outside(self, m: int, n: int, k: int) -> str | None:
        """Why ``m x n x k`` is outside what the rules cover (None if inside): each size must lie within
        half the smallest and twice the largest tuned size of its axis (TUNED_RANGE_FACTOR)."""
        for (low, high), axis, value in zip(self.served_sizes().values(), "mnk", (m, n, k)):
            if not low <= value <= high:
                return f"{axis} = {value} is outside the tuned range of {axis} ({low}..{high})"
        return None

    def pick(self, m: int, n: int, k: int) -> TablePick | None:
        """The kernel for ``m x n x k``, or cuBLAS, chosen at the nearest tuned shape (see SELECTION_RULE);
        None where the table has no rules."""
        if not self.rules:
            return None
        pick = self._choose(m, n, k)
        measured = self.kernel(pick.measured)
        if pick.unserved or measured.launch.serves_shape(m, n, k):
            return pick
        # built for whole tiles, say, and these are partial: its build for any shape
        return dataclasses.replace(pick, kernel=measured.any_shape)

    def _choose(self, m: int, n: int, k: int) -> TablePick:
        """The pick of the rules' kernels (maybe one built for some shapes only) or cuBLAS, with their times."""
        rule = nearest(self.rules, (m, n, k), lambda r: (r.m, r.n, r.k))
        contracts = {kernel.name: kernel.launch for kernel in self.kernels}

        def work(name: str, at: tuple[int, int, int]) -> int:
            return contracts[name].work(*at, self.sms)

        cublas_ms = cublas_ms_at(rule.cublas_ms, rule.shape, (m, n, k), self.ridge) if rule.cublas_ms else None
        runnable = [(name, ms) for name, ms in rule.times
                    if contracts[name].serves_shape(m, n, k) or self.kernel(name).any_shape]
        if not runnable:
            return TablePick(rule, rule.kernel, rule.kernel, None, cublas_ms, unserved=True)
        name, kernel_ms = fastest(runnable, work, rule.shape, (m, n, k))
        return TablePick(rule, name, name, kernel_ms, cublas_ms, far=farther_than_carried(rule.shape, (m, n, k)),
                         cut=cuts_whole_tiles(contracts[name], rule.shape, (m, n, k)))


def _check_bounded(kernel: TableKernel, domain: dict[str, tuple[int, int]], sms: int) -> None:
    """TableError unless ``kernel``'s grid and k-tiles are at least 1 and its work fits 64 bits over ``domain``."""
    expressions = kernel.launch.expressions
    try:
        grid = [side.bounds(domain, MAX_MAGNITUDE) for side in expressions.grid]
        tiles = expressions.k_tiles.bounds(domain, MAX_MAGNITUDE)
        expressions.serves.bounds(domain, MAX_MAGNITUDE)
    except AutotuneError as error:
        raise TableError(str(error)) from None
    if min(low for low, _ in [*grid, tiles]) < 1:
        raise TableError(f"{kernel.name}: its grid or k-tiles can be below 1 at sizes the table serves "
                         f"(M, N, K from 1 to {_largest(domain)})")
    blocks = math.prod(high for _, high in grid)
    if blocks + sms >= MAX_MAGNITUDE or cdiv(blocks, sms) * tiles[1] >= MAX_MAGNITUDE:
        raise TableError(f"{kernel.name}: its grid's blocks times its k-tiles leave 64 bits at sizes the table "
                         f"serves (M, N, K from 1 to {_largest(domain)})")


def _largest(domain: dict[str, tuple[int, int]]) -> str:
    return ", ".join(str(high) for _, high in domain.values())


@dataclasses.dataclass(frozen=True)
class KernelTable:
    """Tuned kernels for one GPU model (``gpu``) or one architecture (``gpu`` None), per dtype: ``dtypes``
    for layout "row", ``other_layouts`` per other layout ("nt": B stored N x K)."""

    arch: str  # sm_90
    gpu: str | None  # the GPU key (h200), or None for every GPU of ``arch``
    measured_on: tuple[str, ...]  # names of the GPUs the rules were measured on
    dtypes: dict[str, DtypeTable]
    created_at: str = ""
    source: str = ""  # where the results came from (a database URL with the password masked, or a file)
    other_layouts: dict[str, dict[str, DtypeTable]] = dataclasses.field(default_factory=dict)

    @property
    def scope(self) -> str:
        return self.gpu or self.arch

    def for_layout(self, layout: str) -> dict[str, DtypeTable]:
        """The dtype tables of ``layout`` (empty where the table has none)."""
        return self.dtypes if layout == "row" else self.other_layouts.get(layout, {})

    def dtype_tables(self) -> list[tuple[str, str, DtypeTable]]:
        """Every dtype table as ``(layout, dtype, table)``, "row" first."""
        return [(layout, dtype, table) for layout in LAYOUTS for dtype, table in self.for_layout(layout).items()]

    def to_dict(self, with_cubins: bool = False) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": KIND,
            "autotune_version": __version__,
            "created_at": self.created_at,
            "arch": self.arch,
            "gpu": self.gpu,
            "measured_on": list(self.measured_on),
            "source": self.source,
            "selection": SELECTION_RULE,
            "kernel_arguments": KERNEL_ARGUMENTS,
            "dtypes": _dtypes_to_dict(self.dtypes, with_cubins),
            **({"layouts": {layout: _dtypes_to_dict(tables, with_cubins) for layout, tables in self.other_layouts.items()}}
               if self.other_layouts else {}),
        }

    def to_json(self, with_cubins: bool) -> str:
        """The table file's text (:meth:`to_dict`)."""
        return json.dumps(self.to_dict(with_cubins), indent=1, sort_keys=False) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "kernel table") -> KernelTable:
        """Read a table written by :meth:`to_dict`; one-line TableError for anything else."""
        if not isinstance(data, dict) or data.get("kind") != KIND:
            raise TableError(f"{where} is not an autotune kernel table (no \"kind\": \"{KIND}\")")
        version = data.get("schema_version")
        if version not in READS_SCHEMA_VERSIONS:
            raise TableError(f"{where} has schema_version {version!r}; this autotune reads "
                             f"{' and '.join(map(str, READS_SCHEMA_VERSIONS))}")
        try:
            dtypes = _dtypes_from_dict(data["dtypes"])
            other_layouts = {}
            for layout, tables in data.get("layouts", {}).items():
                if layout not in LAYOUTS or layout == "row":
                    raise ValueError(f"layout {layout!r} (expected one of {', '.join(LAYOUTS[1:])})")
                other_layouts[layout] = _dtypes_from_dict(tables)
            if not re.fullmatch(r"sm_\d{2,3}[a-z]?", str(data["arch"])):
                raise ValueError(f"arch {data['arch']!r} (expected sm_XY, e.g. sm_90)")
            if data.get("gpu") is not None and not re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,63}", str(data["gpu"])):
                raise ValueError(f"gpu {data['gpu']!r} (expected a GPU key such as h200)")
            return cls(arch=str(data["arch"]), gpu=data.get("gpu"), measured_on=tuple(map(str, data["measured_on"])),
                       dtypes=dtypes, created_at=str(data.get("created_at", "")), source=str(data.get("source", "")),
                       other_layouts=other_layouts)
        except AutotuneError as error:
            raise TableError(f"{where} is malformed: {error}") from None
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as error:
            raise TableError(f"{where} is malformed: {type(error).__name__}: {error}") from None

    def write(self, path: Path, with_cubins: bool) -> None:
        Path(path).write_text(self.to_json(with_cubins))


def _dtypes_to_dict(tables: dict[str, DtypeTable], with_cubins: bool) -> dict[str, Any]:
    return {dtype: {"kernels": [k.to_dict(with_cubins) for k in table.kernels],
                    "rules": [r.to_dict() for r in table.rules], "sms": table.sms, "ridge": table.ridge}
            for dtype, table in tables.items()}


def _dtypes_from_dict(data: dict[str, Any]) -> dict[str, DtypeTable]:
    tables = {}
    for dtype, table in data.items():
        if dtype not in DTYPES:
            raise ValueError(f"dtype {dtype!r} (expected {', '.join(DTYPES)})")
        tables[dtype] = _dtype_from_dict(table)
    return tables


def _dtype_from_dict(table: dict[str, Any]) -> DtypeTable:
    kernels = tuple(TableKernel.from_dict(k) for k in table["kernels"])
    rules = tuple(TableRule.from_dict(r) for r in table["rules"])
    names = [k.name for k in kernels]
    if len(set(names)) != len(names):
        raise ValueError(f"kernel {next(n for n in names if names.count(n) > 1)!r} is listed twice")
    missing = [name for r in rules for name, _ in r.times if name not in names]
    if missing:
        raise ValueError(f"rule names kernel {missing[0]!r}, which the table lacks")
    for_any_shape = {k.name for k in kernels if k.launch.serves == "1"}
    for kernel in kernels:
        if kernel.launch.serves != "1" and kernel.any_shape is not None and kernel.any_shape not in for_any_shape:
            raise ValueError(f"kernel {kernel.name!r} serves some shapes only and its any_shape "
                             f"{kernel.any_shape!r} is not a kernel of the table built for any shape")
    sms = table.get("sms", 1)  # version 1: one time per rule, so the SM count never matters
    if type(sms) is not int:
        raise ValueError(f"sms {sms!r} (expected an integer >= 1)")
    ridge = table.get("ridge", 0.0)  # tables written before it carry cuBLAS's times by m * n * k
    if type(ridge) not in (int, float) or isinstance(ridge, bool):
        raise ValueError(f"ridge {ridge!r} (expected a number >= 0)")
    return DtypeTable(kernels, rules, sms, float(ridge))


def read_table(path: Path) -> KernelTable:
    """A table file written by ``autotune export --format python`` or ``--format json``."""
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise InputError("kernel table", str(path), f"a readable file ({error.strerror})") from None
    except UnicodeDecodeError:
        raise TableError(f"{path} is not JSON: it is not UTF-8 text") from None
    try:
        data = json.loads(text)
    except ValueError as error:
        raise TableError(f"{path} is not JSON: {error}") from None
    except RecursionError:
        raise TableError(f"{path} is not a kernel table: its JSON nests too deep") from None
    return KernelTable.from_dict(data, str(path))


def spec_for_arch(arch: str, gpu_key: str | None = None) -> GpuSpec:
    """The spec kernels of ``arch`` are rendered and checked against: ``gpu_key``'s if it has one, else
    the first built-in GPU of that architecture."""
    if gpu_key in GPUS and GPUS[gpu_key].sm == arch:
        return GPUS[gpu_key]
    for spec in GPUS.values():
        if spec.sm == arch:
            return spec
    raise InputError("--arch", arch, "an architecture of a known GPU: " + ", ".join(sorted({g.sm for g in GPUS.values()})))
