"""Measurements -> a per-shape selection table of a few kernels, and how good its picks are.

Like cuBLAS's heuristics, the table maps a GEMM shape to one kernel. The
kernels are at most ``max_kernels`` (16) configs chosen by a greedy cover of the
measured times (:mod:`autotune.select.cover`); each training shape's rule holds the
chosen kernels measured there, fastest first. A shape goes to the rule of the
nearest training shape (distance in log m, log n, log k; a tie goes to the
larger problem), which gives it the kernel whose time there, scaled by how its
busiest SM's work changes between the two shapes (:mod:`autotune.select.scaling`),
is least: at the training shape itself, its fastest.

Its quality is measured, not assumed: on held-out shapes (never used to build
the table), or, without any, by leaving each training shape out in turn and
building the table from the others. A pick counts only where it was measured.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable, Sequence

from autotune.errors import AutotuneError
from autotune.gpu_specs import GpuSpec
from autotune.kernel.contract import LaunchContract, contract_for
from autotune.problem import GemmProblem
from autotune.results import ResultStore
from autotune.select import cover, scaling
from autotune.shapes import nearest
from autotune.space.family import load_space

MAX_KERNELS = cover.MAX_KERNELS
Shape = tuple[int, int, int]


@dataclasses.dataclass(frozen=True)
class Kernel:
    """A tuned config: its name, family and knob values."""

    name: str
    family: str
    params: dict[str, int]


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
    kernels: dict[str, Kernel]

    def without(self, shapes: Iterable[Shape]) -> Results:
        dropped = set(shapes)
        return Results({s: m for s, m in self.shapes.items() if s not in dropped}, self.kernels)


@dataclasses.dataclass(frozen=True)
class Rule:
    """A training shape and the chosen kernel it is served by, with what was measured there."""

    problem: GemmProblem
    kernel: Kernel
    ms: float  # the kernel's time here
    best_ms: float  # the tuned best here (any config)
    best_config: str
    cublas_ms: float | None
    measured_on: str  # the GPU the kernel's time was measured on
    times: tuple[tuple[str, float], ...] = ()  # every chosen kernel measured here (name, ms), fastest first

    @property
    def shape(self) -> Shape:
        return self.problem.m, self.problem.n, self.problem.k

    @property
    def fraction_of_best(self) -> float:
        return self.best_ms / self.ms

    @property
    def ratio_to_cublas(self) -> float | None:
        return self.cublas_ms / self.ms if self.cublas_ms else None


@dataclasses.dataclass(frozen=True)
class Pick:
    """The table's kernel for a shape, and the rule (nearest training shape) it was chosen at."""

    rule: Rule
    kernel: Kernel


@dataclasses.dataclass(frozen=True)
class SelectionTable:
    """Rules over the training shapes, pointing at no more than ``max_kernels`` kernels."""

    rules: tuple[Rule, ...]
    kernels: tuple[Kernel, ...]  # in the order the cover chose them
    training: tuple[Shape, ...]  # every shape the table was built from, ruled or not
    gpu: GpuSpec  # whose SMs the times scale with
    max_kernels: int = MAX_KERNELS

    @property
    def unruled(self) -> tuple[Shape, ...]:
        """Training shapes where no chosen kernel was measured (only when the cap leaves them out)."""
        ruled = {rule.shape for rule in self.rules}
        return tuple(s for s in self.training if s not in ruled)

    def short_name(self, kernel: Kernel) -> str:
        """``k1`` for the kernel the cover chose first, ``k2`` for the next, ..."""
        return f"k{[k.name for k in self.kernels].index(kernel.name) + 1}"

    def served(self, kernel: Kernel) -> int:
        """How many rules point at ``kernel``."""
        return sum(1 for rule in self.rules if rule.kernel.name == kernel.name)

    def pick(self, problem: GemmProblem, exclude: GemmProblem | None = None) -> Pick | None:
        """The kernel for ``problem``, chosen at the training shape nearest to it (skipping ``exclude``)."""
        candidates = [r for r in self.rules if r.problem != exclude and r.problem.dtype == problem.dtype]
        if not candidates:
            return None
        shape = (problem.m, problem.n, problem.k)
        rule = nearest(candidates, shape, lambda r: r.shape)
        kernels = {kernel.name: kernel for kernel in self.kernels}

        def work(name: str, at: Shape) -> int:
            return _contract(kernels[name], self.gpu).work(*at, self.gpu.sms)

        return Pick(rule, _launched(kernels[scaling.fastest(rule.times, work, rule.shape, shape)], problem, self.gpu))


def gather(store: ResultStore, gpu_keys: str | Sequence[str], dtype: str) -> Results:
    """Every candidate measurement of ``dtype`` on the GPUs ``gpu_keys``: per shape (its plain alpha 1,
    beta 0 problem where there is one) each config's fastest time over those GPUs."""
    keys = [gpu_keys] if isinstance(gpu_keys, str) else list(gpu_keys)
    problems: dict[Shape, GemmProblem] = {}
    for key in keys:
        for problem in store.problems(key, dtype):
            shape = (problem.m, problem.n, problem.k)
            if shape not in problems or _plain(problem) and not _plain(problems[shape]):
                problems[shape] = problem
    shapes, kernels = {}, {}
    for shape, problem in problems.items():
        ms, measured_on, cublas = {}, {}, []
        for key in keys:
            for row in store.best(key, problem, limit=100_000):
                kernels.setdefault(row.config_name, Kernel(row.config_name, row.family, row.params))
                if row.config_name not in ms or row.median_ms < ms[row.config_name]:
                    ms[row.config_name], measured_on[row.config_name] = row.median_ms, row.gpu_name
                cublas.append((row.median_ms, row.cublas_median_ms))
        if not ms:
            continue
        best = min(ms, key=lambda name: (ms[name], name))
        references = [reference for _, reference in sorted(cublas, key=lambda c: c[0]) if reference]
        shapes[shape] = Measured(problem, ms, measured_on, best, references[0] if references else None)
    return Results(dict(sorted(shapes.items(), key=lambda item: _volume_order(item[0]))), kernels)


def build(store: ResultStore, gpu: GpuSpec, gpu_keys: str | Sequence[str], dtype: str,
          max_kernels: int = MAX_KERNELS, hold_out: Iterable[Shape] = ()) -> tuple[SelectionTable, Results]:
    """The table for the GPUs ``gpu_keys`` (of ``gpu``'s kind) and ``dtype`` built from every measured shape
    but ``hold_out``, and everything measured (held-out shapes too)."""
    results = gather(store, gpu_keys, dtype)
    return table_from(results.without(hold_out), gpu, max_kernels), results


def table_from(results: Results, gpu: GpuSpec, max_kernels: int = MAX_KERNELS) -> SelectionTable:
    """The table built by covering ``results``' shapes with kernels autotune can build for ``gpu``."""
    usable = {name for name, kernel in results.kernels.items() if _builds(kernel, gpu)}
    times = {shape: {c: ms for c, ms in measured.ms.items() if c in usable} for shape, measured in results.shapes.items()}
    chosen = cover.choose(times, max_kernels)
    rules = []
    for shape, measured in results.shapes.items():
        name = chosen.rules[shape]
        if name is None:
            continue
        here = sorted((measured.ms[k], k) for k in chosen.kernels if k in measured.ms)
        rules.append(Rule(measured.problem, results.kernels[name], measured.ms[name], measured.best_ms,
                          measured.best_config, measured.cublas_ms, measured.measured_on[name],
                          tuple((k, ms) for ms, k in here)))
    return SelectionTable(tuple(rules), tuple(results.kernels[name] for name in chosen.kernels),
                          tuple(results.shapes), gpu, max_kernels)


@dataclasses.dataclass(frozen=True)
class HeldOut:
    """The table's pick for a shape it was not built from, and what was measured there."""

    problem: GemmProblem
    picked_from: GemmProblem | None  # the training shape whose rule it took; None: the table is empty
    kernel: Kernel | None
    pick_ms: float | None  # the pick's time there; None when it was not measured there
    best_ms: float | None  # the tuned best there; None when nothing was measured there
    cublas_ms: float | None

    @property
    def config_name(self) -> str | None:
        return self.kernel.name if self.kernel else None

    @property
    def fraction_of_best(self) -> float | None:
        """Tuned best ms / pick ms there (1: the pick is the best measured there)."""
        return self.best_ms / self.pick_ms if self.pick_ms and self.best_ms else None

    @property
    def ratio_to_cublas(self) -> float | None:
        """cuBLAS ms / pick ms there (above 1: the pick beats cuBLAS)."""
        return self.cublas_ms / self.pick_ms if self.pick_ms and self.cublas_ms else None


def judge(table: SelectionTable, results: Results, shapes: Iterable[Shape], dtype: str) -> list[HeldOut]:
    """The table's pick at each of ``shapes`` (held out of it), timed where the pick was measured there."""
    report = []
    for shape in shapes:
        measured = results.shapes.get(tuple(shape))
        problem = measured.problem if measured else GemmProblem(*shape, dtype)
        report.append(_held_out(table.pick(problem), problem, measured))
    return report


def held_out(table: SelectionTable, results: Results) -> list[HeldOut]:
    """Leave-one-out: each training shape's pick by the table built (cover and rules) from the others."""
    kept = set(table.training)
    training = results.without(s for s in results.shapes if s not in kept)
    report = []
    for shape in table.training:
        others = table_from(training.without([shape]), table.gpu, table.max_kernels)
        measured = training.shapes[shape]
        report.append(_held_out(others.pick(measured.problem), measured.problem, measured))
    return report


def _held_out(pick: Pick | None, problem: GemmProblem, measured: Measured | None) -> HeldOut:
    pick_ms = measured.ms.get(pick.kernel.name) if pick and measured else None
    return HeldOut(problem, pick.rule.problem if pick else None, pick.kernel if pick else None, pick_ms,
                   measured.best_ms if measured else None, measured.cublas_ms if measured else None)


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


def _geomean(values: Sequence[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _plain(problem: GemmProblem) -> bool:
    return problem.alpha == 1.0 and problem.beta == 0.0


def _volume_order(shape: Shape) -> tuple:
    return shape[0] * shape[1] * shape[2], shape


def _builds(kernel: Kernel, gpu: GpuSpec) -> bool:
    """Whether autotune can build ``kernel`` for ``gpu`` (its family ships and takes its knob values), and so
    launch, export and scale it."""
    try:
        _contract(kernel, gpu)
    except AutotuneError:
        return False
    return True


def _launched(kernel: Kernel, problem: GemmProblem, gpu: GpuSpec) -> Kernel:
    """The build of ``kernel`` launched on ``problem`` (:meth:`SearchSpace.build_for`)."""
    space = load_space(kernel.family)
    config = space.config(kernel.params)
    build = space.build_for(config, gpu, problem)
    return kernel if build == config else Kernel(build.name, kernel.family, build.as_dict())


def _contract(kernel: Kernel, gpu: GpuSpec) -> LaunchContract:
    return _contract_of(kernel.family, tuple(sorted(kernel.params.items())), gpu)


@functools.lru_cache(maxsize=4096)
def _contract_of(family: str, params: tuple[tuple[str, int], ...], gpu: GpuSpec) -> LaunchContract:
    space = load_space(family)
    return contract_for(space, space.config(dict(params)), gpu)
