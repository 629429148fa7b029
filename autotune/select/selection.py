"""Measurements -> the kernel table of a GPU (:mod:`autotune.select.kernel_table`), and how good its picks are.

Like cuBLAS's heuristics, the table maps a GEMM shape to one kernel. The
kernels are at most ``max_kernels`` (16) configs chosen by a greedy cover of the
measured times (:mod:`autotune.select.cover`); each training shape's rule holds
the chosen kernels measured there, fastest first. Which kernel a shape gets is
the table's rule (:meth:`DtypeTable.pick`): the nearest training shape's kernel
whose time there, scaled by how its busiest SM's work changes between the two
shapes (:mod:`autotune.select.scaling`), is least; or cuBLAS, where that time is
more than cuBLAS's there carried in proportion to ``m * n * k``.

Only measurements of a GPU's own architecture count: results filed under a known
GPU key with another architecture are left out (:func:`ignored_environments` says
which). No time that is not a positive finite number enters a table.

Its quality is measured, not assumed: on held-out shapes (never used to build
the table), or, without any, by leaving each training shape out in turn and
building the table from the others. A pick counts only where it was measured;
a cuBLAS pick's time is cuBLAS's time there.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import math
from collections.abc import Iterable, Sequence

from autotune.errors import AutotuneError
from autotune.gpu_specs import GPUS, GpuSpec
from autotune.kernel.contract import contract_for
from autotune.problem import LAYOUTS, GemmProblem
from autotune.progress import ProgressCallback, no_progress
from autotune.results import BestRow, ResultStore
from autotune.select import cover
from autotune.select.kernel_table import DtypeTable, KernelTable, TableError, TableKernel, TableRule, spec_for_arch
from autotune.shapes import CARRIED_FACTOR
from autotune.space.family import load_space

MAX_KERNELS = cover.MAX_KERNELS
BUILDING = "building the table"  # what build_table reports its progress as
Shape = tuple[int, int, int]


@dataclasses.dataclass(frozen=True)
class MeasuredConfig:
    """A config with recorded measurements: its name, family, knob values and the dtype and layout it was
    measured in."""

    name: str
    family: str
    params: dict[str, int]
    dtype: str
    layout: str = "row"


@dataclasses.dataclass(frozen=True)
class Measured:
    """What was measured at one shape: each config's fastest time, the tuned best, cuBLAS."""

    problem: GemmProblem
    ms: dict[str, float]  # config name -> its fastest time here
    measured_on: dict[str, str]  # config name -> the GPU that time was measured on
    best_config: str
    cublas_ms: float | None

    @property
    def best_ms(self) -> float:
        return self.ms[self.best_config]


@dataclasses.dataclass(frozen=True)
class Results:
    """Every measured shape of one dtype (one problem per shape) and every config measured."""

    shapes: dict[Shape, Measured]
    configs: dict[str, MeasuredConfig]

    def without(self, shapes: Iterable[Shape]) -> Results:
        dropped = set(shapes)
        return Results({s: m for s, m in self.shapes.items() if s not in dropped}, self.configs)


@dataclasses.dataclass(frozen=True)
class Selection:
    """The table of one dtype built from measurements, with what it was built from and under."""

    table: DtypeTable
    results: Results  # everything measured, held-out shapes too
    training: tuple[Shape, ...]  # every shape the table was built from, ruled or not
    gpu: GpuSpec  # whose SMs the times scale with
    dtype: str
    max_kernels: int = MAX_KERNELS
    layout: str = "row"

    @property
    def unruled(self) -> tuple[Shape, ...]:
        """Training shapes where no chosen kernel was measured (only when the cap leaves them out)."""
        ruled = {rule.shape for rule in self.table.rules}
        return tuple(s for s in self.training if s not in ruled)


def gather(store: ResultStore, gpu_keys: str | Sequence[str], dtype: str, arch: str | None = None,
           layout: str = "row") -> Results:
    """Every candidate measurement of ``dtype`` and ``layout`` on the GPUs ``gpu_keys`` (in environments of ``arch``, when
    given): per shape (its plain alpha 1, beta 0 problem where there is one) each config's fastest time over
    those GPUs, or where kernels were measured again there (``autotune retime``), those kernels' median times
    alone (:func:`_rows`). TableError names a time that is not a positive finite number."""
    keys = list(dict.fromkeys([gpu_keys] if isinstance(gpu_keys, str) else gpu_keys))
    problems: dict[Shape, GemmProblem] = {}
    for key in keys:
        for problem in store.problems(key, dtype, layout):
            shape = (problem.m, problem.n, problem.k)
            if shape not in problems or _plain(problem) and not _plain(problems[shape]):
                problems[shape] = problem
    shapes, configs = {}, {}
    for shape, problem in problems.items():
        ms, measured_on, cublas = {}, {}, []
        for row in _rows(store, keys, problem, arch):
            _check_times(row, problem)
            configs.setdefault(row.config_name, MeasuredConfig(row.config_name, row.family, row.params, dtype, layout))
            if row.config_name not in ms or row.median_ms < ms[row.config_name]:
                ms[row.config_name], measured_on[row.config_name] = row.median_ms, row.gpu_name
            cublas.append((row.median_ms, row.cublas_median_ms))
        if not ms:
            continue
        best = min(ms, key=lambda name: (ms[name], name))
        references = [reference for _, reference in sorted(cublas, key=lambda c: c[0]) if reference]
        shapes[shape] = Measured(problem, ms, measured_on, best, references[0] if references else None)
    return Results(dict(sorted(shapes.items(), key=lambda item: _volume_order(item[0]))), configs)


def _rows(store: ResultStore, keys: Sequence[str], problem: GemmProblem, arch: str | None) -> list[BestRow]:
    """What ``problem``'s shape is judged by on the GPUs ``keys`` (in environments of ``arch``, when given):
    the kernels measured again there in rounds beside cuBLAS (:meth:`ResultStore.retimed`), where there are
    any, and only those; else every kernel measured there, each at its fastest measurement."""
    for measured in (store.retimed, lambda key, problem: store.best(key, problem, limit=100_000)):
        found = [row for key in keys for row in measured(key, problem) if arch is None or row.arch == arch]
        if found:
            return found
    return []


def _check_times(row, problem: GemmProblem) -> None:
    for what, value in (("time", row.median_ms), ("cuBLAS time", row.cublas_median_ms)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise TableError(f"the results hold a {what} of {value!r} ms for {row.config_name} at {problem.shape} "
                             f"on {row.gpu_name!r}, which is not a positive finite number: no table takes it")


def build(store: ResultStore, gpu: GpuSpec, gpu_keys: str | Sequence[str], dtype: str,
          max_kernels: int = MAX_KERNELS, hold_out: Iterable[Shape] = (), layout: str = "row") -> Selection:
    """The table for the GPUs ``gpu_keys`` (of ``gpu``'s kind, measured as ``gpu``'s architecture),
    ``dtype`` and ``layout``, built from every measured shape but ``hold_out``."""
    results = gather(store, gpu_keys, dtype, gpu.sm, layout)
    training = results.without(hold_out)
    return Selection(table_from(training, gpu, max_kernels, dtype), results, tuple(training.shapes), gpu, dtype,
                     max_kernels, layout)


def table_from(results: Results, gpu: GpuSpec, max_kernels: int = MAX_KERNELS, dtype: str | None = None) -> DtypeTable:
    """The table built by covering ``results``' shapes with kernels autotune can build for ``gpu``: the
    kernels chosen (in the order the cover chose them) and their builds for any shape, and a rule per
    shape where one of them was measured."""
    usable = {name: kernel for name, config in results.configs.items()
              if (kernel := _table_kernel(config, gpu)) is not None}
    times = {shape: {c: ms for c, ms in measured.ms.items() if c in usable} for shape, measured in results.shapes.items()}
    more_rows, floors = _more_rows(results, times, usable)
    chosen = cover.choose({**times, **more_rows}, max_kernels, floors)
    rules = []
    for shape, measured in results.shapes.items():
        name = chosen.rules[shape]
        if name is None:
            continue
        here = sorted((measured.ms[k], k) for k in chosen.kernels if k in measured.ms)
        rules.append(TableRule(*shape, kernel=name, ms=measured.ms[name], cublas_ms=measured.cublas_ms,
                               measured_on=measured.measured_on[name], best_ms=measured.best_ms,
                               times=tuple((k, ms) for ms, k in here)))
    kernels = {name: _table_kernel(results.configs[name], gpu) for name in chosen.kernels}
    ridge = gpu.flops_per_element(dtype) if dtype else 0.0  # cuBLAS's times carried by a roofline
    return DtypeTable(tuple(with_builds_for_any_shape(kernels, gpu).values()), tuple(rules), gpu.sms, ridge)


def _more_rows(results: Results, times: dict[Shape, dict[str, float]], kernels: dict[str, TableKernel]
               ) -> tuple[dict[tuple, dict[str, float]], dict[tuple, float]]:
    """For each shape where some kernels measured are builds for few rows: the times of those that run
    CARRIED_FACTOR times its rows, under the key ``("rows", shape)``, and that key's floor for the cover: its
    best such time over cuBLAS's there (what cuBLAS scores, as the table sends rows that no kernel runs to it).
    The cover weighs a kernel for those rows against the rest, so that a shape of 5 rows nearest one of 4 tuned
    with 4-row builds may find one that runs it. Left out where cuBLAS was not measured or is faster."""
    more, floors = {}, {}
    for shape, measured in times.items():
        m, n, k = shape
        wider = {c: ms for c, ms in measured.items() if kernels[c].launch.serves_shape(CARRIED_FACTOR * m, n, k)}
        best, cublas_ms = min(wider.values(), default=None), results.shapes[shape].cublas_ms
        if best is not None and len(wider) < len(measured) and cublas_ms and best < cublas_ms:
            more[("rows", shape)], floors[("rows", shape)] = wider, best / cublas_ms
    return more, floors


def table_kernel(family: str, params: dict[str, int], gpu: GpuSpec, dtype: str | None = None,
                 layout: str = "row") -> TableKernel:
    """A table kernel for a recorded config of ``dtype`` (by default its family's first; the family must be
    one autotune ships) and ``layout``; a build for some shapes only names its build for any shape
    (:func:`with_builds_for_any_shape` adds that one)."""
    space = load_space(family, dtype, layout)
    config = space.config(params)
    launch = contract_for(space, config, gpu)
    any_shape = None  # a build for some shapes only: its build for any shape, where the family has one
    if launch.serves != "1":
        twin = space.for_any_problem(config)
        any_shape = twin.name if twin != config and contract_for(space, twin, gpu).serves == "1" else None
    return TableKernel(name=config.name, family=family, params=config.as_dict(), template_hash=space.template_hash,
                       launch=launch, any_shape=any_shape, other_dtype=space.other_dtype, layout=space.layout)


def with_builds_for_any_shape(kernels: dict[str, TableKernel], gpu: GpuSpec) -> dict[str, TableKernel]:
    """``kernels`` and, after them, for each built for some shapes only, its build for any shape: what the
    table launches on the shapes that one is not built for."""
    twins = {}
    for kernel in kernels.values():
        if kernel.any_shape and kernel.any_shape not in kernels:
            space = load_space(kernel.family, kernel.dtype, kernel.layout)
            twin = space.for_any_problem(space.config(kernel.params))
            twins[twin.name] = table_kernel(kernel.family, twin.as_dict(), gpu, kernel.dtype, kernel.layout)
    return {**kernels, **twins}


def _table_kernel(config: MeasuredConfig, gpu: GpuSpec) -> TableKernel | None:
    """The table kernel of a measured config, or None where autotune cannot build it for ``gpu`` (its
    family does not ship or no longer takes its knob values, or names them otherwise)."""
    return _table_kernel_of(config.name, config.family, tuple(sorted(config.params.items())), gpu, config.dtype,
                            config.layout)


@functools.lru_cache(maxsize=4096)
def _table_kernel_of(name: str, family: str, params: tuple[tuple[str, int], ...], gpu: GpuSpec,
                     dtype: str, layout: str) -> TableKernel | None:
    try:
        kernel = table_kernel(family, dict(params), gpu, dtype, layout)
    except AutotuneError:
        return None
    return kernel if kernel.name == name else None


CUBLAS = "cublas"  # the name a pick of cuBLAS goes by where a kernel's name would stand


@dataclasses.dataclass(frozen=True)
class HeldOut:
    """The table's pick for a shape it was not built from, and what was measured there."""

    problem: GemmProblem
    picked_from: GemmProblem | None  # the training shape whose rule it took; None: the table is empty
    kernel: TableKernel | None  # the tuned kernel picked (where cuBLAS is picked: the one it stands in for)
    pick_ms: float | None  # the pick's time there (cuBLAS's, for a cuBLAS pick); None when not measured there
    best_ms: float | None  # the tuned best there; None when nothing was measured there
    cublas_ms: float | None
    cublas: bool = False  # the table picks cuBLAS here

    @property
    def config_name(self) -> str | None:
        """The picked kernel's name, ``cublas`` for a cuBLAS pick, None where the table picks nothing."""
        if self.cublas:
            return CUBLAS
        return self.kernel.name if self.kernel else None

    @property
    def fraction_of_best(self) -> float | None:
        """Tuned best ms / pick ms there (1: the pick is the best measured there)."""
        return self.best_ms / self.pick_ms if self.pick_ms and self.best_ms else None

    @property
    def ratio_to_cublas(self) -> float | None:
        """cuBLAS ms / pick ms there (above 1: the pick beats cuBLAS)."""
        return self.cublas_ms / self.pick_ms if self.pick_ms and self.cublas_ms else None


def judge(selection: Selection, shapes: Iterable[Shape]) -> list[HeldOut]:
    """The table's pick at each of ``shapes`` (held out of it), timed where the pick was measured there."""
    report = []
    for shape in shapes:
        measured = selection.results.shapes.get(tuple(shape))
        problem = measured.problem if measured else GemmProblem(*shape, selection.dtype, selection.layout)
        report.append(_held_out(selection.table, selection.results, problem, measured))
    return report


def held_out(selection: Selection) -> list[HeldOut]:
    """Leave-one-out: each training shape's pick by the table built (cover and rules) from the others."""
    kept = set(selection.training)
    training = selection.results.without(s for s in selection.results.shapes if s not in kept)
    report = []
    for shape in selection.training:
        others = table_from(training.without([shape]), selection.gpu, selection.max_kernels, selection.dtype)
        measured = training.shapes[shape]
        report.append(_held_out(others, training, measured.problem, measured))
    return report


def _held_out(table: DtypeTable, results: Results, problem: GemmProblem, measured: Measured | None) -> HeldOut:
    pick = table.pick(problem.m, problem.n, problem.k)
    if pick is None:
        return HeldOut(problem, None, None, None, measured.best_ms if measured else None,
                       measured.cublas_ms if measured else None)
    cublas_ms = measured.cublas_ms if measured else None
    pick_ms = cublas_ms if pick.cublas else measured.ms.get(pick.kernel) if measured else None
    return HeldOut(problem, results.shapes[pick.rule.shape].problem, table.kernel(pick.kernel), pick_ms,
                   measured.best_ms if measured else None, cublas_ms, pick.cublas)


@dataclasses.dataclass(frozen=True)
class Quality:
    """Geometric means and worst of best/pick and cuBLAS/pick over the held-out shapes where the pick was measured."""

    shapes: int
    measured: int  # shapes whose pick was measured there
    unmeasured: int  # shapes with results whose pick was not measured there
    no_results: int  # shapes with nothing measured at all
    geomean_fraction_of_best: float | None
    worst_fraction_of_best: float | None
    geomean_ratio_to_cublas: float | None
    worst_ratio_to_cublas: float | None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def quality(report: Sequence[HeldOut]) -> Quality:
    """The summary of a held-out report."""
    fractions = [h.fraction_of_best for h in report if h.fraction_of_best is not None]
    ratios = [h.ratio_to_cublas for h in report if h.ratio_to_cublas is not None]
    no_results = sum(1 for h in report if h.best_ms is None)
    return Quality(len(report), len(fractions), len(report) - len(fractions) - no_results, no_results,
                   _geomean(fractions), min(fractions, default=None), _geomean(ratios), min(ratios, default=None))


def build_table(store: ResultStore, dtypes: tuple[str, ...], gpu: str | None = None, arch: str | None = None,
                max_kernels: int = MAX_KERNELS, progress: ProgressCallback = no_progress,
                layouts: tuple[str, ...] = LAYOUTS, hold_out: Iterable[Shape] = ()) -> KernelTable:
    """The table of ``gpu`` (a GPU key) or of every GPU of ``arch`` from the results in ``store``.

    A known GPU's table is of its own architecture, whatever environments filed under its key say;
    an architecture's table takes the GPUs measured as it, but not a known GPU of another architecture
    (:func:`ignored_environments`). Per dtype, the table is :func:`build`'s from every measured shape
    (where several GPUs timed a config at a shape, the fastest measurement counts) but those of ``hold_out``,
    each rule with its leave-one-out quality. Kernels are not compiled here (:func:`autotune.export.compile.compile_table`).
    Layouts other than "row" get a dtype's table only where it has rules. ``progress`` hears of each
    (layout, dtype) table done (``building the table``).
    """
    known = [(key, name, sm) for key, name, sm in store.gpus() if _trusted(key, sm)]
    if gpu is not None:
        arch = GPUS[gpu].sm if gpu in GPUS else next((sm for key, _, sm in known if key == gpu), arch)
        chosen = [(key, name, sm) for key, name, sm in known if key == gpu and sm == arch]
    else:
        chosen = [(key, name, sm) for key, name, sm in known if sm == arch]
    if arch is None:
        raise TableError(f"no results for {gpu} in {store.shown_url}")
    spec = spec_for_arch(arch, gpu)
    keys = list(dict.fromkeys(key for key, _, _ in chosen))
    tables: dict[str, dict[str, DtypeTable]] = {layout: {} for layout in layouts}
    kinds = [(layout, dtype) for layout in layouts for dtype in dtypes]
    progress(BUILDING, 0, len(kinds))
    for done, (layout, dtype) in enumerate(kinds, 1):
        selection = build(store, spec, keys, dtype, max_kernels, hold_out=hold_out, layout=layout)
        if selection.table.rules or layout == "row":
            quality_of = {(h.problem.m, h.problem.n, h.problem.k): h.fraction_of_best for h in held_out(selection)}
            rules = tuple(dataclasses.replace(rule, held_out_fraction_of_best=quality_of.get(rule.shape))
                          for rule in selection.table.rules)
            tables[layout][dtype] = dataclasses.replace(selection.table, rules=rules)
        progress(BUILDING, done, len(kinds))
    names = tuple(sorted({name for _, name, _ in chosen}))
    return KernelTable(arch=arch, gpu=gpu, measured_on=names, dtypes=tables.pop("row", {}),
                       created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), source=store.shown_url,
                       other_layouts={layout: t for layout, t in tables.items() if t})


def ignored_environments(store: ResultStore, gpu: str | None = None, arch: str | None = None) -> list[str]:
    """One line for each GPU whose results a table of ``gpu`` (or of ``arch``) leaves out: filed under
    a known GPU key (that one, or any of ``arch``) but measured as another architecture."""
    lines = []
    for key, name, sm in store.gpus():
        if not _trusted(key, sm) and (key == gpu or gpu is None and sm == arch):
            lines.append(f"ignoring the results of {key} measured on {name!r} as {sm!r}: {key} is {GPUS[key].sm}")
    return lines


def _trusted(key: str, arch: str) -> bool:
    """Whether results of GPU key ``key`` measured as ``arch`` count: a known GPU's must be of its own architecture."""
    return key not in GPUS or GPUS[key].sm == arch


def _geomean(values: Sequence[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _plain(problem: GemmProblem) -> bool:
    return problem.alpha == 1.0 and problem.beta == 0.0


def _volume_order(shape: Shape) -> tuple:
    return shape[0] * shape[1] * shape[2], shape
