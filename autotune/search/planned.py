"""Which recorded configs to measure again at a shape: each shape's fastest distinct configs that still build.

``autotune cross-dtype`` (fp16's best timed in bf16) and ``autotune retime`` (each shape's best timed again)
both start from a shape's recorded results, fastest first, and keep the first ``top`` distinct configs of a
shipped family that the static rules admit where they are to run, and, where none of those runs
:data:`~autotune.shapes.CARRIED_FACTOR` times the shape's rows (each a build for few rows), the fastest that
does: a table carries a shape's times that far, and a shape judged by few-row builds alone would leave those
rows no kernel. A config recorded under several template versions is several rows of the results, and one
config here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Container

from autotune.errors import InputError
from autotune.gpu_specs import GpuSpec
from autotune.kernel.contract import contract_for
from autotune.problem import GemmProblem
from autotune.results import ResultStore
from autotune.shapes import CARRIED_FACTOR
from autotune.space.family import Config, SearchSpace, load_space


@dataclasses.dataclass(frozen=True)
class Planned:
    """One shape: the problem, and the configs (of their families' spaces for it) to time there."""

    problem: GemmProblem
    configs: tuple[tuple[SearchSpace, Config], ...]


def fastest_configs(store: ResultStore, gpu_key: str, recorded: GemmProblem, problem: GemmProblem, gpu: GpuSpec,
                    families: Container[str], top: int) -> list[tuple[SearchSpace, Config]]:
    """The ``top`` fastest distinct configs recorded at ``recorded`` on ``gpu_key`` whose family is one of
    ``families``, each built for ``problem`` (its dtype and layout; :meth:`SearchSpace.build_for`) where the static
    rules admit it on ``gpu``, fastest first; then, where none of them runs CARRIED_FACTOR times ``problem``'s rows,
    the fastest config that does. A config whose knob values its family no longer has is passed over."""
    configs: list[tuple[SearchSpace, Config]] = []
    more_rows = (CARRIED_FACTOR * problem.m, problem.n, problem.k)
    served = False  # whether a config kept runs more_rows
    for row in store.best(gpu_key, recorded, limit=1_000_000):
        if len(configs) >= top and served:
            break
        if row.family not in families:
            continue
        space = load_space(row.family, problem.dtype, problem.layout)
        try:
            config = space.build_for(space.config(row.params), gpu, problem)
        except InputError:
            continue  # a knob value the family no longer has
        if not space.check(config, gpu, problem).feasible or config in (c for _, c in configs):
            continue
        serves = contract_for(space, config, gpu).serves_shape(*more_rows)
        if len(configs) < top or serves:
            configs.append((space, config))
            served = served or serves
    return configs
