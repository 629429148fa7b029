"""The best config recorded in a results database, as a GPU task (shared by the bench scripts)."""

from __future__ import annotations

from autotune.compile import compile_kernel
from autotune.records import Failure
from autotune.render import render
from autotune.space import families_for_dtype, load_space
from autotune.study import kernel_task


def best_task(store, gpu, problem, warmup: int = 3, repeats: int = 10):
    """``(config, task)`` of the fastest config recorded for ``gpu`` and ``problem`` (any searchable
    family) that still compiles clean here, else of the first seed of the dtype's default family."""
    rows = [r for r in store.best(gpu.key, problem, limit=20) if load_space(r.family).priority >= 0]
    fallback = load_space(families_for_dtype(problem.dtype)[0])
    candidates = [(load_space(r.family), load_space(r.family).config(r.params)) for r in rows] \
        or [(fallback, fallback.seeds[0])]
    for space, config in candidates:
        task = kernel_task(space, config, compile_kernel(render(space, config, gpu)), gpu, problem,
                           seed=0, warmup=warmup, repeats=repeats)
        if not isinstance(task, Failure):
            return config, task
        print(f"skipped {config.name}: {task.message}")
    raise SystemExit("no recorded config compiles clean here")
