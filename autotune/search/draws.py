"""Feasible configs drawn at random: what a search tries before TPE has results to learn from.

A search's opening (its warm-start configs, the space's seeds, then random
feasible configs spread over the knobs' values, N_STARTUP in all unless the fixed
ones alone are more) needs no study: :mod:`autotune.search.start` draws its first
configs and starts compiling them before Optuna and the database are loaded, and
the search takes the opening and its draws over. This module loads neither Optuna
nor NumPy.

The opening's random configs are spread (:meth:`FeasibleDraws.spread`): each is the
one of SPREAD_POOL uniformly random feasible configs whose knob values the opening
has tried least. Uniform draws over the feasible configs favour the values most
combinations admit (narrow tiles, few stages), while the fastest configs of a GEMM
space tend to use values few combinations admit (wide tiles near the register and
shared-memory limits); an opening that tries each knob's values about equally
often gives TPE a result for each of them (bench/NOTES.md, the replay benchmark).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import random
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence

from autotune.errors import SearchError
from autotune.gpu_specs import GpuSpec
from autotune.problem import GemmProblem
from autotune.space.family import Config, SearchSpace
from autotune.space.screen import KnobValues, Screen
from autotune.space.survey import SpaceTooLarge, feasible_configs

MAX_RANDOM_DRAWS = 2_000  # random combinations tried per draw before listing the feasible configs
MAX_LISTED = 1_000_000  # feasible configs listed at most (the first in enumeration order)
N_STARTUP = 16  # results TPE waits for: the opening's size (fixed configs and random draws together)
SPREAD_POOL = 128  # random feasible configs each of the opening's random configs is chosen from
SEED_RANGE = 2**32  # samplers take seeds below this


def stream_seed(seed: int, stream: int = 0) -> int:
    """The sampler's seed of one process sharing a study: ``seed`` alone for stream 0 (a search in one
    process, or the first of several), so that ``--seed`` reproduces its proposals given the same
    results; for other streams a hash of both, so that processes sharing a study explore different
    configs. A search's stream is its first GPU device (``--device``): the same from run to run,
    and distinct for the processes of one host."""
    if stream == 0:
        return seed % SEED_RANGE
    digest = hashlib.sha256(f"{seed}:{stream}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def opening_size(jobs: int, trials: int, n_startup: int = N_STARTUP) -> int:
    """How many configs a search compiles before its study is read: one per compile process, and
    no more than the budget or the opening. (Two per process kept the processes busy until the study
    opened, but delayed its opening on a machine whose cores all compile, and searches were no faster:
    see bench/NOTES.md.)"""
    return min(jobs, trials, n_startup)


class FeasibleDraws:
    """Feasible configs of one space on one GPU and problem: each config checked against the static
    rules once, and uniformly random feasible configs.

    ``n_startup`` is the size of the opening: :attr:`opened` counts the configs of it handed out
    (:meth:`opening` counts its own; the proposer counts the others)."""

    def __init__(self, space: SearchSpace, gpu: GpuSpec, problem: GemmProblem, seed: int,
                 warm_start: Sequence[Config] = (), n_startup: int = N_STARTUP):
        self.space, self.gpu, self.problem = space, gpu, problem
        self.warm_start = tuple(warm_start)
        self.n_startup = n_startup
        self.rng = random.Random(seed)
        self.opened = 0  # opening configs handed out: fixed ones and random draws
        self.rejected = 0  # configs screened out because a static rule rejects them
        self.spread_knobs = tuple(knob for knob, values in space.knobs.items()
                                  if len(values) > 1 and knob not in space.specialized)  # what a search chooses
        self.screen = Screen(space, gpu, problem)
        self._feasible: dict[KnobValues, bool] = {}  # each config screened: whether it passes the static rules
        self._listed: list[Config] | None = None  # every feasible config, listed when random draws miss
        self._pool: list[Config] = []  # random feasible configs the opening's next spread config is chosen from

    def set_up(self, values: dict[str, int]) -> Config:
        """The config of these knob values with its ``[specialize]`` knobs as the problem sets them (a
        search never chooses those)."""
        return self.space.for_problem(self.space.config(values), self.gpu, self.problem)

    def feasible(self, config: Config) -> bool:
        """Whether ``config`` passes the static rules (each config checked once)."""
        key = tuple(value for _, value in config.params)
        if key not in self._feasible:
            self._screened(key, self.screen.passes(config.as_dict()))
        return self._feasible[key]

    def admitted(self, values: dict[str, int]) -> Config | None:
        """The config :meth:`set_up` makes of these knob values where it passes the static rules, else None:
        screened before it is built (only one that passes is), each config once, a rejected one counted in
        :attr:`rejected` as :meth:`feasible` counts it. The values are from the knobs' choices (not checked)."""
        knob_values, feasible = self.screen.set_up(values)
        return self.set_up(values) if self._screened(knob_values, feasible) else None

    def _screened(self, knob_values: KnobValues, feasible: bool) -> bool:
        """Note the verdict of the config of ``knob_values``, once: a rejected one counts in :attr:`rejected`."""
        if knob_values not in self._feasible:
            self._feasible[knob_values] = feasible
            if not feasible:
                self.rejected += 1
        return feasible

    def random(self, taken: set[str]) -> Config | None:
        """A uniformly random feasible config that is not taken, or None when there is none."""
        if self._listed is None:
            space = self.space
            for _ in range(MAX_RANDOM_DRAWS):
                # screened before anything is built; values from the knobs' choices need no checks: the Config
                # set_up would make is that of the knob values set up
                values = {knob: self.rng.choice(choices) for knob, choices in space.knobs.items()
                          if knob not in space.specialized}
                knob_values, feasible = self.screen.set_up(values)
                config = Config(space.family, tuple(zip(space.knobs, knob_values)), space.other_dtype, space.layout)
                if config.name not in taken and self._screened(knob_values, feasible):
                    return config
            try:
                feasible = feasible_configs(self.space, self.gpu, self.problem, limit=MAX_LISTED)
            except SpaceTooLarge as error:
                raise SearchError(f"{MAX_RANDOM_DRAWS} random draws found no feasible config of {self.space.family} "
                                  f"not tried yet, and listing them failed: {error}") from None
            # both builds of a config pass the rules where the problem has whole tiles: the one it sets, once
            listed = (self.space.for_problem(c, self.gpu, self.problem) for c in feasible)
            self._listed = list(dict.fromkeys(listed))
        left = [config for config in self._listed if config.name not in taken]
        return self.rng.choice(left) if left else None

    def spread(self, taken: set[str], tried: Iterable[Mapping[str, int]]) -> Config | None:
        """A random feasible config, not taken, whose knob values ``tried`` (the knob values of configs
        tried or handed out) holds least often: of a pool of SPREAD_POOL random feasible configs (kept
        from call to call, topped up with new draws), the one with the most ``1 / (1 + n)``, summed over
        the knobs a search chooses, where n counts ``tried``'s configs with its value of that knob; the
        earliest drawn of those that tie. None when every feasible config is taken."""
        self._pool = [config for config in self._pool if config.name not in taken]
        while len(self._pool) < SPREAD_POOL:
            config = self.random(taken | {config.name for config in self._pool})
            if config is None:
                break
            self._pool.append(config)
        if not self._pool:
            return None
        counts = Counter((knob, values[knob]) for values in tried for knob in self.spread_knobs if knob in values)
        score = lambda config: sum(1 / (1 + counts[knob, config[knob]]) for knob in self.spread_knobs)  # noqa: E731
        chosen = max(self._pool, key=score)  # the first of equals: the earliest drawn
        self._pool.remove(chosen)
        return chosen

    def fixed_configs(self) -> Iterator[Config]:
        """The configs tried first, fixed in advance: the warm-start configs, then the space's seeds,
        each set up for the problem (:meth:`SearchSpace.for_problem`) and tried once, where the static rules
        admit them."""
        names = set()
        for config in (self.set_up(c.as_dict()) for c in (*self.warm_start, *self.space.seeds)):
            if config.name not in names and self.feasible(config):
                names.add(config.name)
                yield config

    @functools.cached_property
    def opening_quota(self) -> int:
        """How many configs the opening holds: ``n_startup``, or every fixed config where they are more
        (the warm-start configs and the seeds are never left out)."""
        return max(self.n_startup, sum(1 for _ in self.fixed_configs()))

    def opening(self, count: int) -> list[Config]:
        """The first ``count`` configs a search tries whatever its study holds: the fixed ones, then
        random feasible configs spread over the knobs' values (:meth:`spread`); no more than the opening
        holds. Draws with the same seed give the same opening."""
        count = min(count, self.opening_quota - self.opened)
        chosen = {config.name: config for config in itertools.islice(self.fixed_configs(), count)}
        while len(chosen) < count:
            config = self.spread(set(chosen), [config.as_dict() for config in chosen.values()])
            if config is None:
                break
            chosen[config.name] = config
        self.opened += len(chosen)
        return list(chosen.values())

    def take_over(self, earlier: FeasibleDraws) -> None:
        """Go on from ``earlier``'s draws (of the same space, GPU, problem and warm start): its random
        state, the configs it checked (and what its screen remembers), those it rejected, the opening it
        handed out and the pool its spread configs are chosen from, as if these draws had made them."""
        self.rng, self.rejected, self.opened = earlier.rng, earlier.rejected, earlier.opened
        self.screen = earlier.screen
        self._feasible, self._listed, self._pool = earlier._feasible, earlier._listed, earlier._pool


@dataclasses.dataclass(frozen=True)
class Opening:
    """A search's opening drawn ahead of the search: its configs, and the draws that go on after them."""

    configs: tuple[Config, ...]
    draws: FeasibleDraws
