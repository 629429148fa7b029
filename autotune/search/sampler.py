"""Which config a search tries next: the space's seeds, then random feasible configs, then TPE (or breeding).

Most combinations of a GEMM space break a static rule (99% of sgemm's at 4096 on
an H200), and a sampler asked through an Optuna study turns each proposal into a
stored trial, rejected or not. Here no rejected config is ever a trial:

* :class:`FeasibleTpeSampler` is Optuna's TPE (multivariate, the same Parzen
  estimators, gamma split and l(x)/g(x) criterion) whose candidates, drawn from
  l(x) as usual, are screened before the comparison: a candidate that breaks a
  static rule or is already taken costs one rule check (about 0.1 ms), not a trial.
* :class:`Proposer` proposes the search's opening first: its warm-start configs (the best of
  nearby tuned shapes, when a sweep gives them) and the space's seeds, then uniformly random
  feasible configs, ``n_startup`` configs in all (more only where the fixed ones alone are more),
  counting those of other processes in the study. Then it waits for the opening's results
  (:data:`WAIT`), however fast configs compile: every config after the opening is TPE's,
  proposed from ``n_startup`` results at least (or, where some failed on the GPU, from all there
  are once nothing of the opening is in flight). Configs in flight (compiling, queued or running
  on a GPU, in this process or another) are given to TPE as running trials, as Optuna's
  ``constant_liar`` does.
* With ``sampler="random"`` the opening is the same, and every config after it is a uniformly random
  feasible one (random search through the same pipeline, a yardstick for TPE); it waits for nothing.
* With ``sampler="genetic"`` the opening and the wait for its results are TPE's, and every config after
  it is bred (:func:`breed`) from the configs measured so far: two parents, each the winner of a
  tournament, uniform crossover, then mutation. It waits because its children would reach the GPU
  after the opening's configs anyway (built candidates go to the GPU first come, first served):
  breeding before the opening's results are in would only breed them from fewer parents. Configs in
  flight and configs that failed (to compile or on the GPU) are never parents; children are screened
  as TPE's candidates are, and it falls back to a random feasible config after MAX_CHILDREN.

TPE's internals are Optuna's own, reached through :mod:`autotune.search.optuna_private`
(Optuna has no public API for them): only the screening of candidates is added.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy
import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import InputError
from autotune.gpu_specs import GpuSpec
from autotune.problem import GemmProblem
from autotune.search import optuna_private as private
from autotune.search.draws import N_STARTUP, FeasibleDraws
from autotune.search.settings import SAMPLERS
from autotune.space.family import Config, SearchSpace

DRAW_CHUNK = 256  # candidates drawn from l(x) at a time
MAX_DRAWS = 1024  # candidates drawn from l(x) per proposal at most, before falling back to a random config
EI_CANDIDATES = 64  # distinct admissible candidates TPE compares per proposal (Optuna's default: 24 draws)
NEAR_EVERY = 2  # every second TPE proposal is of the incumbent's one-knob neighbours
TOURNAMENT = 6  # measured configs drawn per tournament: the best of them is a parent
MAX_CHILDREN = 64  # children bred per proposal at most, before falling back to a random config


def neighbours(values: dict[str, int], search_space: dict[str, CategoricalDistribution]) -> Iterator[dict[str, int]]:
    """``values`` with one knob of ``search_space`` moved to another of its choices: every such config."""
    for knob, distribution in search_space.items():
        for choice in distribution.choices:
            if choice != values[knob]:
                yield {**values, knob: choice}


class FeasibleTpeSampler(optuna.samplers.TPESampler):
    """TPE whose candidates are screened: only admissible ones reach the l(x)/g(x) comparison.

    ``n_ei_candidates`` distinct admissible candidates drawn from l(x) are compared (plain TPE
    compares that many draws, repeats included); drawing stops after MAX_DRAWS. Given an
    incumbent (``near``), the candidates are its admissible one-knob neighbours where it has any.
    """

    def propose(self, study: optuna.Study, trials: list[FrozenTrial],
                search_space: dict[str, CategoricalDistribution],
                admissible: Callable[[dict[str, int]], bool], near: dict[str, int] | None = None
                ) -> dict[str, int] | None:
        """The best admissible candidate by l(x)/g(x) given ``trials`` (running ones count as bad):
        of the one-knob neighbours of ``near`` where it has an admissible one, else of candidates drawn
        from l(x); None when there is no admissible candidate."""
        finished = sum(trial.state != TrialState.RUNNING for trial in trials)
        below, above = private.split_trials(study, trials, private.tpe_gamma(self, study)(finished))
        mpe_below = private.parzen_estimator(self, study, search_space, below, below=True)
        mpe_above = private.parzen_estimator(self, study, search_space, above, below=False)
        kept = {} if near is None else {_internal(params, search_space): params
                                        for params in neighbours(near, search_space) if admissible(params)}
        kept = kept or self._candidates(mpe_below, search_space, admissible)
        if not kept:
            return None
        candidates = {name: numpy.array([row[i] for row in kept]) for i, name in enumerate(search_space)}
        scores = private.acquisition(self, candidates, mpe_below, mpe_above)
        return list(kept.values())[int(numpy.argmax(scores))]

    def _candidates(self, mpe_below, search_space: dict[str, CategoricalDistribution],
                    admissible: Callable[[dict[str, int]], bool]) -> dict[tuple, dict[str, int]]:
        """Up to ``n_ei_candidates`` distinct admissible candidates drawn from l(x), in the order drawn:
        their internal representations (one per knob of ``search_space``) and their knob values."""
        wanted, rng = private.ei_candidates(self), private.tpe_rng(self)
        kept: dict[tuple, dict[str, int]] = {}
        seen: set[tuple] = set()
        drawn = 0
        while len(kept) < wanted and drawn < MAX_DRAWS:
            draws = private.sample(mpe_below, rng, DRAW_CHUNK)
            drawn += DRAW_CHUNK
            for row in zip(*(draws[name].tolist() for name in search_space)):
                if row in seen:
                    continue
                seen.add(row)
                params = {name: distribution.to_external_repr(value)
                          for (name, distribution), value in zip(search_space.items(), row)}
                if admissible(params):
                    kept[row] = params
                    if len(kept) == wanted:
                        break
        return kept


def _internal(params: dict[str, int], search_space: dict[str, CategoricalDistribution]) -> tuple:
    """A config's internal representation in ``search_space``: its choices' indices, as TPE draws them."""
    return tuple(float(distribution.to_internal_repr(params[name])) for name, distribution in search_space.items())


Parent = tuple[dict[str, int], Sequence[float]]  # a measured config's knob values and its objective values


def _dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))


def _tournament(parents: Sequence[Parent], rng: random.Random) -> dict[str, int]:
    """The best of TOURNAMENT parents drawn at random (lower is better; with several objectives, the first
    drawn that no other drawn one dominates)."""
    entrants = rng.sample(parents, min(TOURNAMENT, len(parents)))
    return next(params for params, values in entrants
                if not any(_dominates(other, values) for _, other in entrants))


def breed(parents: Sequence[Parent], choices: dict[str, Sequence[int]], rng: random.Random,
          admissible: Callable[[dict[str, int]], bool]) -> dict[str, int] | None:
    """A child of two tournament winners among ``parents``: each knob of ``choices`` from either parent
    (uniform crossover), then each moved to another of its values with probability 1/len(choices);
    the first admissible child of MAX_CHILDREN, or None (no parents, or none admissible)."""
    if not parents:
        return None
    mutation = 1.0 / len(choices)
    for _ in range(MAX_CHILDREN):
        mother, father = _tournament(parents, rng), _tournament(parents, rng)
        child = {knob: (mother if rng.random() < 0.5 else father)[knob] for knob in choices}
        for knob, values in choices.items():
            if rng.random() < mutation:
                child[knob] = rng.choice([value for value in values if value != child[knob]])
        if admissible(child):
            return child
    return None


class Pause(enum.Enum):
    """What :meth:`Proposer.next` gives while no config can be proposed yet."""

    WAIT = "wait"  # the opening is handed out and its results are not in yet


WAIT = Pause.WAIT
_UNKNOWN = object()  # not built and checked yet


class Proposer(FeasibleDraws):
    """Feasible, untaken configs of one space on one GPU and problem, best guess first.

    ``taken`` (config names) is everything the study holds or has in flight; the proposer
    never proposes a taken config, nor one that breaks a static rule. ``warm_start`` configs
    are proposed before the space's seeds, each once, where the static rules admit them.
    ``sampler`` is what proposes after the opening: ``tpe``, ``random`` or ``genetic`` (:data:`SAMPLERS`).
    """

    def __init__(self, space: SearchSpace, gpu: GpuSpec, problem: GemmProblem, seed: int,
                 n_startup: int = N_STARTUP, warm_start: Sequence[Config] = (), sampler: str = "tpe"):
        if sampler not in SAMPLERS:
            raise InputError("--sampler", sampler, ", ".join(SAMPLERS))
        super().__init__(space, gpu, problem, seed, warm_start, n_startup)
        self.kind = sampler
        self.distributions = {knob: CategoricalDistribution(values) for knob, values in space.knobs.items()}
        self.varying = {knob: d for knob, d in self.distributions.items()  # what TPE chooses: not what the problem sets
                        if len(d.choices) > 1 and knob not in space.specialized}
        self.fixed = {knob: d.choices[0] for knob, d in self.distributions.items() if len(d.choices) == 1}
        self.sampler = FeasibleTpeSampler(seed=seed, multivariate=True, n_startup_trials=n_startup,
                                          n_ei_candidates=EI_CANDIDATES)
        self._admitted: dict[tuple, Config | None] = {}  # varying knobs' values: their feasible config, or None
        self._liars: dict[str, FrozenTrial] = {}  # running trials standing for configs in flight, by config name
        self.learned: set[str] = set()  # configs TPE proposed (or breeding bred) from the study's results: the
                                        # others were fixed or drawn

    def next(self, study: optuna.Study, trials: list[FrozenTrial], taken: set[str],
             in_flight: Iterable[Config] = ()) -> Config | Pause | None:
        """The next config to try; WAIT while the opening's results are still to come; None when every
        feasible config is taken.

        ``trials`` are the study's finished trials that TPE learns from and its running ones;
        ``in_flight`` are this process's configs not in the study yet.
        """
        in_flight = list(in_flight)
        if self.opened < self.opening_quota:
            for config in self.fixed_configs():
                if config.name not in taken:
                    self.opened += 1
                    return config
        if not self.varying or self.kind == "random":
            return self.random(taken)  # nothing to learn (every config is its own), or random search
        finished = sum(trial.state in (TrialState.COMPLETE, TrialState.PRUNED) for trial in trials)
        if finished < self.n_startup and not self.learned:  # once TPE has proposed, it goes on
            if self.opened < self.opening_quota and len(trials) + len(in_flight) < self.n_startup:
                self.opened += 1
                return self.spread(taken, [*(trial.params for trial in trials), *(c.as_dict() for c in in_flight)])
            if len(trials) > finished or in_flight:
                return WAIT  # TPE (or breeding) proposes once the opening's results are in
        admissible = lambda values: self._admissible(values, taken)  # noqa: E731
        if self.kind == "genetic":
            parents = [({knob: trial.params[knob] for knob in self.varying}, trial.values)
                       for trial in trials if trial.state == TrialState.COMPLETE]
            params = breed(parents, {knob: d.choices for knob, d in self.varying.items()}, self.rng, admissible)
        else:
            params = self._tpe(study, trials + [self._liar(config) for config in in_flight], admissible)
        if params is not None:
            config = self.set_up({**self.fixed, **params})
            self.learned.add(config.name)
            return config
        return self.random(taken)

    def _tpe(self, study: optuna.Study, trials: list[FrozenTrial],
             admissible: Callable[[dict[str, int]], bool]) -> dict[str, int] | None:
        """TPE's proposal: every NEAR_EVERY-th (the first included) of the incumbent's neighbourhood where
        it has an admissible config left, the others (and those) of candidates drawn from l(x)."""
        incumbent = self.incumbent(study, trials) if len(self.learned) % NEAR_EVERY == 0 else None
        return self.sampler.propose(study, trials, self.varying, admissible, near=incumbent)

    def incumbent(self, study: optuna.Study, trials: list[FrozenTrial]) -> dict[str, int] | None:
        """The knob values TPE chooses of the best measured config of ``trials`` (the first of equals);
        None where nothing is measured, or the study has several objectives (no one best)."""
        measured = [trial for trial in trials if trial.state == TrialState.COMPLETE]
        if not measured or len(study.directions) > 1:
            return None
        best = min(measured, key=lambda trial: trial.values[0])
        return {knob: best.params[knob] for knob in self.varying}

    def _admissible(self, values: dict[str, int], taken: set[str]) -> bool:
        """Whether the config of these values of the varying knobs passes the static rules and is not taken;
        each set of values is screened once, and its config built only where it passes (TPE draws the same
        ones again and again)."""
        key = tuple(values[knob] for knob in self.varying)
        config = self._admitted.get(key, _UNKNOWN)
        if config is _UNKNOWN:
            config = self._admitted[key] = self.admitted({**self.fixed, **values})
        return config is not None and config.name not in taken

    def _liar(self, config: Config) -> FrozenTrial:
        """A running trial standing for a config in flight, so that TPE looks elsewhere (made once per config:
        a config stays in flight over several proposals)."""
        liar = self._liars.get(config.name)
        if liar is None:
            liar = self._liars[config.name] = optuna.trial.create_trial(
                state=TrialState.RUNNING, params=config.as_dict(), distributions=self.distributions)
        return liar
