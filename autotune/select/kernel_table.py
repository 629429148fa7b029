"""The kernel table: what a program needs to call tuned kernels, with no database.

A :class:`KernelTable` holds, for one GPU (or every GPU of one architecture)
and each dtype, the kernels the selection table chose (at most 16, each with
its launch contract and, once compiled, its cubin; a kernel built for whole
tiles brings its build for any shape, launched where the shape has partial
tiles) and the rules that map a
shape to one of them: the tuned shapes, each with the times of those kernels
measured there and its measured quality. A shape gets, of the kernels measured
at the nearest tuned shape, the one whose time there scaled by the change in
its busiest SM's work is least (:mod:`autotune.select.selection`, :mod:`autotune.select.scaling`).

It is written as JSON (:meth:`KernelTable.to_dict`, ``schema_version`` 2) by
``autotune export`` and read back by the runtime (:func:`autotune.load`).
Version 1 files (one time per rule) are read too: their picks are the nearest
tuned shape's kernel.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import math
import re
from pathlib import Path
from typing import Any

from autotune import __version__
from autotune.errors import AutotuneError, InputError
from autotune.gpu_specs import GPUS, GpuSpec
from autotune.kernel.compile import CompiledKernel, compile_kernel
from autotune.kernel.contract import LaunchContract, contract_for
from autotune.kernel.cubin import check_cubin
from autotune.kernel.render import render
from autotune.kernel.resources import resource_violation
from autotune.kernel_abi import KERNEL_ARGUMENTS
from autotune.problem import DTYPES
from autotune.records import Resources
from autotune.select.scaling import fastest
from autotune.select.selection import MAX_KERNELS, held_out
from autotune.select.selection import build as build_selection
from autotune.shapes import nearest
from autotune.space.family import load_space

SCHEMA_VERSION = 2
READS_SCHEMA_VERSIONS = (1, 2)
TUNED_RANGE_FACTOR = 2  # a table serves sizes from half its smallest to twice its largest tuned size, per axis
KIND = "autotune-kernel-table"
SELECTION_RULE = ("nearest tuned shape: the least |log m - log m'| + |log n - log n'| + |log k - log k'|, "
                  "a tie going to the larger tuned shape; there, of the kernels measured (times, fastest first), "
                  "the least ms * work(shape) / work(tuned shape), a tie going to the earlier, where work = "
                  "cdiv(grid blocks, sms) * k_tiles (the busiest SM's k-tiles); sizes outside "
                  "[ceil(smallest tuned / 2), largest tuned * 2] on any axis are not served (cuBLAS)")


class TableError(AutotuneError):
    """A kernel table cannot be built, read or used."""


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

    def to_dict(self, with_cubin: bool) -> dict[str, Any]:
        data = {
            "name": self.name, "family": self.family, "params": self.params, "template_hash": self.template_hash,
            "launch": self.launch.to_dict(),
            "resources": dataclasses.asdict(self.resources) if self.resources else None,
            "any_shape": self.any_shape,
        }
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
                   any_shape=str(data["any_shape"]) if data.get("any_shape") else None)


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

    def __post_init__(self):
        if not self.times:  # a rule made with its own kernel only (version 1 files)
            object.__setattr__(self, "times", ((self.kernel, self.ms),))

    @property
    def ratio_to_cublas(self) -> float | None:
        """cuBLAS time over this kernel's time where both were measured (above 1: faster than cuBLAS)."""
        return self.cublas_ms / self.ms if self.cublas_ms else None

    def to_dict(self) -> dict[str, Any]:
        return {"m": self.m, "n": self.n, "k": self.k, "kernel": self.kernel, "ms": self.ms,
                "cublas_ms": self.cublas_ms, "ratio_to_cublas": self.ratio_to_cublas,
                "measured_on": self.measured_on, "held_out_fraction_of_best": self.held_out_fraction_of_best,
                "best_ms": self.best_ms, "times": [[name, ms] for name, ms in self.times]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TableRule:
        sizes = [int(data[axis]) for axis in ("m", "n", "k")]
        ms = float(data["ms"])
        if min(sizes) < 1 or not (math.isfinite(ms) and ms > 0):
            raise ValueError(f"rule {sizes}: sizes must be >= 1 and ms a positive number, got {ms}")
        cublas = data.get("cublas_ms")
        held = data.get("held_out_fraction_of_best")
        best = data.get("best_ms")
        times = tuple((str(name), float(time)) for name, time in data.get("times", [[data["kernel"], ms]]))
        if not times or times[0][0] != str(data["kernel"]) or any(
                not (math.isfinite(t) and t > 0) for _, t in times) or [t for _, t in times] != sorted(t for _, t in times):
            raise ValueError(f"rule {sizes}: times must start with its kernel and be positive, fastest first")
        return cls(*sizes, kernel=str(data["kernel"]), ms=ms, cublas_ms=float(cublas) if cublas else None,
                   measured_on=str(data["measured_on"]), held_out_fraction_of_best=float(held) if held else None,
                   best_ms=float(best) if best else None, times=times)


@dataclasses.dataclass(frozen=True)
class TablePick:
    """The kernel (its name) a shape gets, and the rule (nearest tuned shape) it was chosen at."""

    rule: TableRule
    kernel: str
    measured: str = ""  # the kernel of the rule's times it was chosen as: itself, or one built for whole tiles

    def __post_init__(self):
        if not self.measured:
            object.__setattr__(self, "measured", self.kernel)


@dataclasses.dataclass(frozen=True)
class DtypeTable:
    """The kernels and rules of one dtype, and the SM count their times scale with."""

    kernels: tuple[TableKernel, ...]
    rules: tuple[TableRule, ...]
    sms: int = 1

    def kernel(self, name: str) -> TableKernel:
        return next(kernel for kernel in self.kernels if kernel.name == name)

    def outside(self, m: int, n: int, k: int) -> str | None:
        """Why ``m x n x k`` is outside what the rules cover (None if inside): each size must lie within
        half the smallest and twice the largest tuned size of its axis (TUNED_RANGE_FACTOR)."""
        for axis, size in zip("mnk", (m, n, k)):
            tuned = [getattr(rule, axis) for rule in self.rules]
            low, high = -(-min(tuned) // TUNED_RANGE_FACTOR), max(tuned) * TUNED_RANGE_FACTOR
            if not low <= size <= high:
                return f"{axis} = {size} is outside the tuned range of {axis} ({low}..{high})"
        return None

    def pick(self, m: int, n: int, k: int) -> TablePick | None:
        """The kernel for ``m x n x k``, chosen at the nearest tuned shape (see SELECTION_RULE)."""
        if not self.rules:
            return None
        rule = nearest(self.rules, (m, n, k), lambda r: (r.m, r.n, r.k))
        contracts = {kernel.name: kernel.launch for kernel in self.kernels}

        def work(name: str, at: tuple[int, int, int]) -> int:
            return contracts[name].work(*at, self.sms)

        measured = self.kernel(fastest(rule.times, work, (rule.m, rule.n, rule.k), (m, n, k)))
        chosen = measured
        if not measured.launch.serves_shape(m, n, k):  # built for whole tiles, say: its build for any shape
            chosen = self.kernel(measured.any_shape)  # type: ignore[arg-type]
        return TablePick(rule, chosen.name, measured.name)


@dataclasses.dataclass(frozen=True)
class KernelTable:
    """Tuned kernels for one GPU model (``gpu``) or one architecture (``gpu`` None), per dtype."""

    arch: str  # sm_90
    gpu: str | None  # the GPU key (h200), or None for every GPU of ``arch``
    measured_on: tuple[str, ...]  # names of the GPUs the rules were measured on
    dtypes: dict[str, DtypeTable]
    created_at: str = ""
    source: str = ""  # where the results came from (a database URL with the password masked, or a file)

    @property
    def scope(self) -> str:
        return self.gpu or self.arch

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
            "dtypes": {
                dtype: {"kernels": [k.to_dict(with_cubins) for k in table.kernels],
                        "rules": [r.to_dict() for r in table.rules], "sms": table.sms}
                for dtype, table in self.dtypes.items()
            },
        }

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
            dtypes = {}
            for dtype, table in data["dtypes"].items():
                if dtype not in DTYPES:
                    raise ValueError(f"dtype {dtype!r} (expected {', '.join(DTYPES)})")
                kernels = tuple(TableKernel.from_dict(k) for k in table["kernels"])
                rules = tuple(TableRule.from_dict(r) for r in table["rules"])
                names = {k.name for k in kernels}
                missing = [name for r in rules for name, _ in r.times if name not in names]
                if missing:
                    raise ValueError(f"rule names kernel {missing[0]!r}, which the table lacks")
                for_any_shape = {k.name for k in kernels if k.launch.serves == "1"}
                for kernel in kernels:
                    if kernel.launch.serves != "1" and kernel.any_shape not in for_any_shape:
                        raise ValueError(f"kernel {kernel.name!r} serves some shapes only and its any_shape "
                                         f"{kernel.any_shape!r} is not a kernel of the table built for any shape")
                sms = int(table.get("sms", 1))  # version 1: one time per rule, so the SM count never matters
                if sms < 1:
                    raise ValueError(f"sms {sms} (expected >= 1)")
                dtypes[dtype] = DtypeTable(kernels, rules, sms)
            if not re.fullmatch(r"sm_\d{2,3}[a-z]?", str(data["arch"])):
                raise ValueError(f"arch {data['arch']!r} (expected sm_XY, e.g. sm_90)")
            if data.get("gpu") is not None and not re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,63}", str(data["gpu"])):
                raise ValueError(f"gpu {data['gpu']!r} (expected a GPU key such as h200)")
            return cls(arch=str(data["arch"]), gpu=data.get("gpu"), measured_on=tuple(map(str, data["measured_on"])),
                       dtypes=dtypes, created_at=str(data.get("created_at", "")), source=str(data.get("source", "")))
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise TableError(f"{where} is malformed: {type(error).__name__}: {error}") from None

    def write(self, path: Path, with_cubins: bool) -> None:
        Path(path).write_text(json.dumps(self.to_dict(with_cubins), indent=1, sort_keys=False) + "\n")

    def compiled(self) -> KernelTable:
        """This table with every kernel compiled (NVRTC, offline; cubins come from the disk cache when there)."""
        dtypes = {dtype: dataclasses.replace(t, kernels=tuple(compile_table_kernel(k, self.arch) for k in t.kernels))
                  for dtype, t in self.dtypes.items()}
        return dataclasses.replace(self, dtypes=dtypes)


def read_table(path: Path) -> KernelTable:
    """A table file written by ``autotune export --format python`` or ``--format json``."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as error:
        raise InputError("kernel table", str(path), f"a readable file ({error.strerror})") from None
    except ValueError as error:
        raise TableError(f"{path} is not JSON: {error}") from None
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


def table_kernel(family: str, params: dict[str, int], gpu: GpuSpec) -> TableKernel:
    """A table kernel for a recorded config (the family must be one autotune ships); a build for some
    shapes only names its build for any shape (:func:`with_builds_for_any_shape` adds that one)."""
    space = load_space(family)
    config = space.config(params)
    launch = contract_for(space, config, gpu)
    any_shape = space.for_any_problem(config).name if launch.serves != "1" else None
    return TableKernel(name=config.name, family=family, params=config.as_dict(), template_hash=space.template_hash,
                       launch=launch, any_shape=any_shape)


def with_builds_for_any_shape(kernels: dict[str, TableKernel], gpu: GpuSpec) -> dict[str, TableKernel]:
    """``kernels`` and, for each built for some shapes only, its build for any shape: what the table
    launches on the shapes that one is not built for."""
    twins = {}
    for kernel in kernels.values():
        if kernel.any_shape and kernel.any_shape not in kernels:
            space = load_space(kernel.family)
            twin = space.for_any_problem(space.config(kernel.params))
            twins[twin.name] = table_kernel(kernel.family, twin.as_dict(), gpu)
    return {**kernels, **twins}


def compile_table_kernel(kernel: TableKernel, arch: str) -> TableKernel:
    """``kernel`` with its cubin and ptxas resources; TableError if it does not compile or fit the GPU."""
    if kernel.cubin is not None:
        return kernel
    gpu = spec_for_arch(arch)
    space = load_space(kernel.family)
    if space.template_hash != kernel.template_hash:
        raise TableError(f"{kernel.name} was built from template {kernel.template_hash}, but this autotune's "
                         f"{kernel.family} template is {space.template_hash}; export the table again")
    compiled = compile_kernel(render(space, space.config(kernel.params), gpu))
    if not isinstance(compiled, CompiledKernel):
        raise TableError(f"{kernel.name} does not compile for {kernel.launch.target}: {compiled.message}")
    resources = dataclasses.replace(compiled.resources, smem_dynamic=kernel.launch.dynamic_smem)
    violation = resource_violation(resources, kernel.launch.block[0], gpu, kernel.launch.opt_in)
    if violation:
        raise TableError(f"{kernel.name} does not fit {gpu.key}: {violation}")
    return dataclasses.replace(kernel, cubin=compiled.cubin, resources=resources)


def build_table(store, dtypes: tuple[str, ...], gpu: str | None = None, arch: str | None = None,
                max_kernels: int = MAX_KERNELS) -> KernelTable:
    """The table of ``gpu`` (a GPU key) or of every GPU of ``arch`` from the results in ``store``.

    Per dtype, the kernels are at most ``max_kernels`` configs chosen by the cover
    of :func:`autotune.select.selection.build` (where several GPUs of the architecture timed a
    config at a shape, the fastest measurement counts), and each tuned shape's rule
    is the fastest of them measured there. Kernels are not compiled here
    (:meth:`KernelTable.compiled`).
    """
    known = store.gpus()
    if gpu is not None:
        chosen = [(key, name, sm) for key, name, sm in known if key == gpu]
        arch = chosen[0][2] if chosen else (GPUS[gpu].sm if gpu in GPUS else arch)
    else:
        chosen = [(key, name, sm) for key, name, sm in known if sm == arch]
    if arch is None:
        raise TableError(f"no results for {gpu} in {store.shown_url}")
    spec = spec_for_arch(arch, gpu)
    keys = [key for key, _, _ in chosen]
    dtype_tables = {}
    for dtype in dtypes:
        selection, results = build_selection(store, spec, keys, dtype, max_kernels)
        quality = {h.problem: h.fraction_of_best for h in held_out(selection, results)}
        kernels = {kernel.name: table_kernel(kernel.family, kernel.params, spec) for kernel in selection.kernels}
        rules = [TableRule(*rule.shape, kernel=kernels[rule.kernel.name].name, ms=rule.ms, cublas_ms=rule.cublas_ms,
                           measured_on=rule.measured_on, held_out_fraction_of_best=quality.get(rule.problem),
                           best_ms=rule.best_ms, times=tuple((kernels[name].name, ms) for name, ms in rule.times))
                 for rule in selection.rules]
        unique = with_builds_for_any_shape({kernel.name: kernel for kernel in kernels.values()}, spec)
        dtype_tables[dtype] = DtypeTable(tuple(unique[name] for name in sorted(unique)),
                                         tuple(sorted(rules, key=lambda r: (r.m * r.n * r.k, (r.m, r.n, r.k)))),
                                         spec.sms)
    names = tuple(sorted({name for _, name, _ in chosen}))
    return KernelTable(arch=arch, gpu=gpu, measured_on=names, dtypes=dtype_tables,
                       created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), source=store.shown_url)
