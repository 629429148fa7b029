"""Starting a search or a sweep: the GPU workers, the compile pool, the GPU's spec, the family, the opening.

    start GPU workers and compile processes (not waiting for them)
    -> GPU model known (--gpu h200)? choose the family, draw the opening and start compiling it
    -> load the search (Optuna, the database) meanwhile -> the Search, which opens the database
       once its seeds compile

A search spends its first seconds waiting for processes: CuPy and the CUDA contexts come up
in the workers, NVRTC in the compile processes. Everything here that need not wait for them
runs in the meantime, so this module loads the heavy modules (the GPU worker, the compile
pool, Optuna, the database) only where it first needs them.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from autotune.errors import GpuMismatchError, InputError
from autotune.gpu_specs import FAKE_SUFFIX, GPUS, GpuSpec, spec_from_properties
from autotune.problem import LAYOUT_CHOICES, LAYOUTS, GemmProblem, check_dtype, dtype_runs_on
from autotune.records import Environment
from autotune.search.draws import FeasibleDraws, Opening, opening_size, stream_seed
from autotune.search.objective import make_objective
from autotune.search.settings import SAMPLERS, SearchSettings, SweepSettings
from autotune.search.timeline import SEARCH, Timeline, span
from autotune.space.family import SearchSpace, families_for_dtype, load_space, resolve_family, shipped_families
from autotune.space.subspace import pin
from autotune.space.survey import survey

if TYPE_CHECKING:
    from autotune.gpu.worker import GpuWorker
    from autotune.kernel.compile import CompilePool
    from autotune.search.search import Progress, Search
    from autotune.search.sweep import ShapeOutcome, Sweep, SweepProgress

@dataclasses.dataclass(frozen=True)
class GpuRequest:
    """The GPU a command asks for, and how to reach it."""

    requested: GpuSpec | None  # the model asked for; None for the attached one, whatever it is (--gpu auto)
    name: str  # --gpu as given
    device: int = 0  # the CUDA device index of the (first) worker
    backend: str = "cupy"  # the GPU worker's backend (fake: no GPU)


@dataclasses.dataclass(frozen=True)
class SearchRequest:
    """What a search is asked to do, its arguments checked."""

    problem: GemmProblem
    family: str | None  # a shipped family's name or a space file; None: the best for the dtype and GPU
    gpu: GpuRequest
    settings: SearchSettings
    workers: int = 1  # GPU workers, one per device from ``gpu.device`` on
    db: str | None = None  # the results database's URL (None: the default)
    pins: Mapping[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)  # --pin: knobs limited to values

    def check(self) -> None:
        """Fail before any process starts where the request cannot run: an unknown objective or sampler,
        or a ``family`` (or ``pins``) that does not resolve or is not of the problem's dtype (naming one costs
        no survey)."""
        make_objective(self.settings.objective)
        if self.settings.sampler not in SAMPLERS:
            raise InputError("--sampler", self.settings.sampler, ", ".join(SAMPLERS))
        if self.family or self.pins:
            choose_family(self.family, self.problem.dtype, self.gpu.requested or GPUS["h200"], self.problem.layout,
                          self.pins)


@dataclasses.dataclass(frozen=True)
class SweepRequest:
    """What a sweep is asked to do, its arguments checked."""

    problems: tuple[GemmProblem, ...]
    dtype: str
    family: str | None
    gpu: GpuRequest
    settings: SweepSettings
    db: str | None = None
    layout: str = "row"
    pins: Mapping[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)  # --pin: knobs limited to values


# -- starting -------------------------------------------------------------------------------------


@contextlib.contextmanager
def started_search(request: SearchRequest, timeline: Timeline | None = None,
                   on_progress: Callable[[Progress], None] = lambda progress: None,
                   on_environment: Callable[[Search, Environment], None] = lambda search, env: None,
                   ) -> Iterator[Search]:
    """A :class:`~autotune.search.search.Search` ready to run, its processes started and its opening
    compiling; they stop when the context ends. ``on_environment(search, env)`` is called once the
    GPU answered and is the one asked for, before anything is measured."""
    settings, problem = request.settings, request.problem
    with contextlib.ExitStack() as stack:
        with span(timeline, SEARCH, "start processes"):
            workers, pool = start_processes(request.gpu, request.workers, settings.jobs, stack)
        requested = request.gpu.requested
        with span(timeline, SEARCH, "choose family"):  # the GPU model is known: choose now
            space = choose_family(request.family, problem.dtype, requested, problem.layout, request.pins) \
                if requested else None
        gpu = simulated(requested, request.gpu.backend) if requested else None
        opening = draw_opening(pool, space, gpu, problem, settings, request.gpu.device) if space else None
        from autotune.search.search import Search  # Optuna and the database load while the processes start

        if gpu is None:
            gpu = attached_gpu_spec(None, workers[0].environment(), request.gpu.name, workers[0].device_properties())
            space = choose_family(request.family, problem.dtype, gpu, problem.layout, request.pins)

        def on_start(env: Environment) -> None:
            check_attached(requested, env)
            on_environment(search, env)

        search = Search(space, gpu, problem, lambda: stack.enter_context(_open_store(request.db)), workers,
                        settings, on_progress=on_progress, on_environment=on_start, pool=pool, timeline=timeline,
                        opening=opening)
        yield search


@contextlib.contextmanager
def started_sweep(request: SweepRequest, on_progress: Callable[[SweepProgress], None] = lambda progress: None,
                  on_shape: Callable[[ShapeOutcome], None] = lambda outcome: None) -> Iterator[Sweep]:
    """A :class:`~autotune.search.sweep.Sweep` ready to run on one GPU worker and one compile pool;
    they stop, and the database closes, when the context ends."""
    with contextlib.ExitStack() as stack:
        (worker,), pool = start_processes(request.gpu, 1, request.settings.search.jobs, stack)
        from autotune.search.sweep import Sweep

        gpu = attached_gpu_spec(request.gpu.requested, worker.environment(), request.gpu.name,
                                worker.device_properties())
        space = choose_family(request.family, request.dtype, gpu, request.layout, request.pins)
        store = stack.enter_context(_open_store(request.db))
        yield Sweep(space, gpu, request.problems, store, worker, pool, request.settings, on_progress=on_progress,
                    on_shape=on_shape)


def start_processes(gpu: GpuRequest, workers: int, jobs: int | None,
                    stack: contextlib.ExitStack) -> tuple[list[GpuWorker], CompilePool]:
    """``workers`` GPU workers (devices from ``gpu.device`` on) and the compile pool, started without
    waiting for them; closed with ``stack``."""
    from autotune.gpu.worker import GpuWorker
    from autotune.kernel.compile import CompilePool

    started = [stack.enter_context(contextlib.closing(GpuWorker(device=gpu.device + i, backend=gpu.backend)))
               for i in range(workers)]
    for worker in started:
        worker.begin()
    pool = stack.enter_context(CompilePool(jobs))
    pool.warm_up()
    return started, pool


@contextlib.contextmanager
def attached_worker(gpu: GpuRequest) -> Iterator[tuple[GpuWorker, GpuSpec]]:
    """A started GPU worker and the spec of its GPU, which must be the one ``gpu`` asks for."""
    from autotune.gpu.worker import GpuWorker

    with GpuWorker(device=gpu.device, backend=gpu.backend) as worker:
        yield worker, attached_gpu_spec(gpu.requested, worker.environment(), gpu.name, worker.device_properties())


def draw_opening(pool: CompilePool, space: SearchSpace, gpu: GpuSpec, problem: GemmProblem,
                 settings: SearchSettings, device: int = 0) -> Opening:
    """Draw the search's opening (the seeds, then random feasible configs; one per compile process) and
    start compiling it: the search takes the opening and its draws over, and the pool hands it these
    compiles, finished or not. ``device`` is the search's first GPU: its stream of random draws."""
    from autotune.kernel.render import render

    draws = FeasibleDraws(space, gpu, problem, stream_seed(settings.seed, device))
    configs = tuple(draws.opening(opening_size(pool.jobs, settings.trials)))
    for config in configs:
        pool.prefetch(render(space, config, gpu))
    return Opening(configs, draws)


def _open_store(url: str | None):
    from autotune.results.opening import open_store

    return open_store(url)


# -- the GPU and the family -----------------------------------------------------------------------


def simulated(gpu: GpuSpec, backend: str) -> GpuSpec:
    """The GPU model a search records: the fake backend's is kept apart from the real GPU's."""
    if backend == "fake":
        return dataclasses.replace(gpu, key=gpu.key.removesuffix(FAKE_SUFFIX) + FAKE_SUFFIX)
    return gpu


def check_attached(requested: GpuSpec | None, env: Environment) -> None:
    """GpuMismatchError unless the GPU the worker found is the one asked for (any, for None). The fake
    backend's GPU (``env.gpu_key`` ``h200-fake``) answers to ``--gpu h200``."""
    if requested is not None and requested.key not in (env.gpu_key, env.gpu_key.removesuffix(FAKE_SUFFIX)):
        raise GpuMismatchError(requested.key, env.gpu_key, env.gpu_name)


def attached_gpu_spec(requested: GpuSpec | None, env: Environment, name: str,
                      properties: dict | None = None) -> GpuSpec:
    """The spec of the GPU the worker found; an error if it is not the one asked for.

    A GPU without a built-in spec gets one from its device ``properties``
    (``GpuWorker.device_properties()``); without them it is refused. The fake backend's
    GPU (``env.gpu_key`` ``h200-fake``) answers to ``--gpu h200`` and comes back under
    its own key, so its results are kept apart from the real GPU's.
    """
    check_attached(requested, env)
    simulated_gpu = env.gpu_key.endswith(FAKE_SUFFIX)
    gpu = requested or GPUS.get(env.gpu_key.removesuffix(FAKE_SUFFIX))
    if gpu is None and properties is not None:
        gpu = spec_from_properties(env.gpu_name, env.arch.removesuffix(FAKE_SUFFIX), properties)
    if gpu is None:
        raise InputError("--gpu", name, f"one of {', '.join(GPUS)} (the attached {env.gpu_name!r} is unknown)")
    return dataclasses.replace(gpu, key=env.gpu_key) if simulated_gpu else gpu


def choose_family(family: str | None, dtype: str, gpu: GpuSpec, layout: str = "row",
                  pins: Mapping[str, tuple[int, ...]] | None = None) -> SearchSpace:
    """``family`` (a shipped family's name or the path of a space file, see
    :func:`~autotune.space.family.resolve_family`), which must be one for ``dtype`` and ``layout``; or
    the highest-priority family for both that can run on ``gpu``; its knobs limited to the values ``pins``
    names (:func:`~autotune.space.subspace.pin`)."""
    space = _family(family, dtype, gpu, layout)
    return pin(space, pins) if pins else space


def _family(family: str | None, dtype: str, gpu: GpuSpec, layout: str) -> SearchSpace:
    check_dtype(dtype)
    if layout not in LAYOUTS:
        raise InputError("--layout", layout, LAYOUT_CHOICES)
    dtype_runs_on(dtype, gpu.arch, gpu.key)
    if family:
        space = resolve_family(family)
        if dtype not in space.dtypes:
            raise InputError("--family", family, f"a family for {dtype} ({space.family} serves "
                             f"{', '.join(space.dtypes)}): " + ", ".join(families_for_dtype(dtype)))
        if layout not in space.layouts:
            raise InputError("--family", family, f"a family for layout {layout} ({space.family} serves "
                             f"{', '.join(space.layouts)}): " + ", ".join(families_for_dtype(dtype, layout)))
        return space.for_dtype(dtype).for_layout(layout)
    families = families_for_dtype(dtype, layout)
    if not families:
        if families_for_dtype(dtype):
            raise InputError("--layout", layout, f"a layout a {dtype} family serves: "
                             + ", ".join(sorted({lay for f in families_for_dtype(dtype) for lay in load_space(f).layouts})))
        raise InputError("--dtype", dtype, "a dtype with a search space: "
                         + ", ".join(sorted({d for f in shipped_families() for d in load_space(f).dtypes})))
    for name in families:
        space = load_space(name, dtype, layout)
        if survey(space, gpu, limit=1).feasible:
            return space
    return load_space(families[0], dtype, layout)
