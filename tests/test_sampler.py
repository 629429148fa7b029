"""Proposals: seeds first, then random feasible configs, then TPE (or breeding) over feasible configs only."""

import hashlib
import statistics
from pathlib import Path

import optuna
import pytest
from conftest import cpu_seconds
from optuna.trial import TrialState

from autotune.gpu_specs import gpu_spec
from autotune.problem import GemmProblem
from autotune.search import sampler as sampler_module
from autotune.search.sampler import WAIT, Proposer
from autotune.space.family import SearchSpace, load_space

H200, PROBLEM = gpu_spec("h200"), GemmProblem(4096, 4096, 4096)
TINY = Path(__file__).parent / "data" / "tiny.toml"  # 3 seeds, 160 feasible configs at 64^3


@pytest.fixture(scope="module")
def space():
    return load_space("sgemm")  # 86% of its configs break a static rule on the H200


def measured(proposer, config, ms):
    return optuna.trial.create_trial(params=config.as_dict(), distributions=proposer.distributions, value=ms)


def _feasible_seeds(space):
    """The seeds in their build for PROBLEM (whole tiles where they are whole) that the rules admit there."""
    seeds = [space.for_problem(seed, H200, PROBLEM) for seed in space.seeds]
    return [seed for seed in seeds if space.check(seed, H200, PROBLEM).feasible]


def test_the_opening_is_the_feasible_seeds_then_random_configs_and_the_same_from_the_same_seed(space):
    from autotune.search.draws import FeasibleDraws

    feasible_seeds = _feasible_seeds(space)
    count = len(feasible_seeds) + 6
    opening = FeasibleDraws(space, H200, PROBLEM, seed=7, n_startup=count).opening(count)
    assert opening[:len(feasible_seeds)] == feasible_seeds
    assert len({config.name for config in opening}) == count
    assert all(space.check(config, H200, PROBLEM).feasible for config in opening)
    assert Proposer(space, H200, PROBLEM, seed=7, n_startup=count).opening(count) == opening  # the search's too
    other = FeasibleDraws(space, H200, PROBLEM, seed=8, n_startup=count).opening(count)
    assert other[len(feasible_seeds):] != opening[len(feasible_seeds):]
    assert FeasibleDraws(space, H200, PROBLEM, seed=7).opening(2) == feasible_seeds[:2]


def test_seeds_come_first_then_random_feasible_configs_then_the_proposer_waits(space):
    feasible_seeds = _feasible_seeds(space)
    proposer = Proposer(space, H200, PROBLEM, seed=1, n_startup=len(feasible_seeds) + 10)
    study = optuna.create_study()
    taken: set[str] = set()
    proposed = []
    while (config := proposer.next(study, [], taken, in_flight=proposed)) is not WAIT:
        proposed.append(config)
        taken.add(config.name)
    assert proposed[:len(feasible_seeds)] == feasible_seeds
    assert len(proposed) == proposer.n_startup  # the opening: no more
    assert len(set(proposed)) == len(proposed)
    assert all(space.check(config, H200, PROBLEM).feasible for config in proposed)
    assert proposer.rejected > 0  # random draws that broke a rule were screened out, not proposed
    assert not proposer.learned


def _tiny_results(proposer, configs, ms=lambda config: 1.0 / (config["ROWS"] * config["COLS"])):
    return [measured(proposer, config, ms(config)) for config in configs]


def test_the_opening_is_n_startup_configs_whatever_is_in_flight_then_every_proposal_is_tpes():
    """Random draws in flight count against the opening: however fast configs compile, no more than
    n_startup of them are handed out, and what comes after the opening's results is TPE's."""
    space, problem = SearchSpace(TINY), GemmProblem(64, 64, 64)
    proposer = Proposer(space, H200, problem, seed=5, n_startup=8)
    study = optuna.create_study()
    opening = proposer.opening(2)  # what a search compiles before its study is read
    while (config := proposer.next(study, [], {c.name for c in opening}, in_flight=opening)) is not WAIT:
        opening.append(config)
    assert len(opening) == 8 and proposer.opened == 8
    assert opening[:3] == list(space.seeds)
    results = _tiny_results(proposer, opening[:7])  # one of the opening still running: still waiting
    running = optuna.trial.create_trial(state=TrialState.RUNNING, params=opening[7].as_dict(),
                                        distributions=proposer.distributions)
    taken = {c.name for c in opening}
    assert proposer.next(study, results + [running], taken) is WAIT
    assert proposer.opening(4) == []  # the opening is handed out
    results.append(measured(proposer, opening[7], 0.5))
    in_flight = []
    for _ in range(6):  # compiling ahead of a slow GPU: every one TPE's, each told to TPE as running
        config = proposer.next(study, results, taken, in_flight=in_flight)
        assert config.name in proposer.learned and config.name not in taken
        taken.add(config.name)
        in_flight.append(config)
    assert proposer.opened == 8


def test_the_opening_counts_the_trials_of_other_processes_sharing_the_study():
    space, problem = SearchSpace(TINY), GemmProblem(64, 64, 64)
    theirs = Proposer(space, H200, problem, seed=6, n_startup=8).opening(6)
    proposer = Proposer(space, H200, problem, seed=7, n_startup=8)
    study = optuna.create_study()
    running = [optuna.trial.create_trial(state=TrialState.RUNNING, params=c.as_dict(),
                                         distributions=proposer.distributions) for c in theirs]
    taken, mine = {c.name for c in theirs}, []
    while (config := proposer.next(study, running, taken, in_flight=mine)) is not WAIT:
        mine.append(config)
        taken.add(config.name)
    assert len(mine) == 2  # the study's 6 and these 2: the opening


def test_an_opening_cut_short_by_gpu_failures_goes_on_with_tpe_once_nothing_of_it_is_in_flight():
    """Configs that failed on the GPU teach TPE nothing: TPE starts from the results there are."""
    space, problem = SearchSpace(TINY), GemmProblem(64, 64, 64)
    proposer = Proposer(space, H200, problem, seed=8, n_startup=8)
    study = optuna.create_study()
    opening = proposer.opening(8)
    taken = {c.name for c in opening}
    results = _tiny_results(proposer, opening[:6])  # two failed on the GPU: no result
    config = proposer.next(study, results, taken)
    assert config is not WAIT and config.name in proposer.learned
    taken.add(config.name)
    running = optuna.trial.create_trial(state=TrialState.RUNNING, params=config.as_dict(),
                                        distributions=proposer.distributions)
    assert proposer.next(study, results + [running], taken).name in proposer.learned  # TPE goes on, in flight


def test_random_search_opens_as_tpe_does_then_draws_feasible_configs_without_waiting_or_learning():
    space, problem = SearchSpace(TINY), GemmProblem(64, 64, 64)
    tpe = Proposer(space, H200, problem, seed=5, n_startup=8)
    proposer = Proposer(space, H200, problem, seed=5, n_startup=8, sampler="random")
    study = optuna.create_study()
    assert proposer.opening(8) == tpe.opening(8)  # the same opening from the same seed
    taken: set[str] = set()
    in_flight = []
    for _ in range(40):  # no results at all: random search never waits for them
        config = proposer.next(study, [], taken, in_flight=in_flight)
        assert config is not WAIT and config.name not in taken
        assert space.check(config, H200, problem).feasible
        taken.add(config.name)
        in_flight.append(config)
    assert not proposer.learned


def test_an_unknown_sampler_is_refused():
    from autotune.errors import InputError

    with pytest.raises(InputError, match="'annealing'.*tpe, random"):
        Proposer(SearchSpace(TINY), H200, GemmProblem(64, 64, 64), seed=1, sampler="annealing")


def test_tpe_proposes_only_feasible_configs_that_are_not_taken_nor_in_flight(space):
    proposer = Proposer(space, H200, PROBLEM, seed=2, n_startup=8)
    study = optuna.create_study()
    taken = {seed.name for seed in space.seeds}
    trials = []
    for i in range(20):  # a landscape TPE can learn: larger tiles are faster
        config = proposer.random(taken)
        taken.add(config.name)
        trials.append(measured(proposer, config, 10.0 / (config["BM"] * config["BN"]) + 1e-3 * i))
    in_flight = [proposer.random(taken) for _ in range(3)]  # compiling, say
    screened = proposer.rejected
    proposals = []
    for _ in range(15):
        config = proposer.next(study, trials, taken | {c.name for c in in_flight}, in_flight=in_flight)
        assert space.check(config, H200, PROBLEM).feasible
        assert config.name not in taken and config not in in_flight
        proposals.append(config)
        in_flight.append(config)  # as the search does: it compiles what it was given
    assert proposer.rejected > screened  # TPE's candidates were screened too
    best = sorted(trials, key=lambda t: t.value)[:5]
    big = sum(c["BM"] * c["BN"] >= min(t.params["BM"] * t.params["BN"] for t in best) for c in proposals)
    assert big >= len(proposals) // 2  # it learned where the fast configs are


def test_running_trials_count_against_a_region(space):
    """Configs in flight are told to TPE as running trials (constant liar): they are not proposed again."""
    proposer = Proposer(space, H200, PROBLEM, seed=3, n_startup=4)
    study = optuna.create_study()
    taken = set()
    trials = []
    for _ in range(6):
        config = proposer.random(taken)
        taken.add(config.name)
        trials.append(measured(proposer, config, 1.0))
    running = [optuna.trial.create_trial(state=TrialState.RUNNING, params=proposer.random(taken).as_dict(),
                                         distributions=proposer.distributions)]
    config = proposer.next(study, trials + running, taken | {space.config(running[0].params).name})
    assert config.name != space.config(running[0].params).name


def test_screening_a_rejected_config_costs_a_rule_check(space):
    proposer = Proposer(space, H200, PROBLEM, seed=4)
    started = cpu_seconds()
    configs = [proposer.random(set()) for _ in range(50)]
    elapsed = cpu_seconds() - started
    assert all(space.check(config, H200, PROBLEM).feasible for config in configs)
    assert proposer.rejected >= 100  # about 6 rejected draws per feasible config
    assert elapsed / proposer.rejected < 0.005  # milliseconds at most, where a stored trial cost ~0.2 s


def test_an_exhausted_space_proposes_nothing():
    space = load_space("hgemm_wmma")
    proposer = Proposer(space, gpu_spec("t4"), GemmProblem(64, 64, 64, "f16"), seed=5)
    from autotune.space.survey import feasible_configs

    everything = {config.name for config in feasible_configs(space, gpu_spec("t4"), GemmProblem(64, 64, 64, "f16"))}
    last = next(iter(everything))
    assert proposer.random(everything - {last}).name == last
    assert proposer.random(everything) is None


def _proposed(seed: int, count: int = 24, sampler: str = "tpe") -> list[str]:
    """The configs a proposer gives, one at a time, each measured by the fake backend's fixed rates."""
    from autotune.gpu.fake_backend import FakeBackend

    space, problem = SearchSpace(TINY), GemmProblem(64, 64, 64)
    proposer = Proposer(space, H200, problem, seed=seed, n_startup=8, sampler=sampler)
    study = optuna.create_study()
    trials, taken, names = [], set(), []
    for _ in range(count):
        config = proposer.next(study, trials, taken)
        names.append(config.name)
        taken.add(config.name)
        trials.append(measured(proposer, config, problem.flops / (FakeBackend.kernel_tflops(config.name) * 1e9)))
    assert len(proposer.learned) == count - 8  # TPE's (or bred) proposals are part of the sequence
    return names


@pytest.mark.parametrize("sampler", ["tpe", "genetic"])
def test_the_same_seed_proposes_the_same_configs_given_the_same_results(sampler):
    assert _proposed(11, sampler=sampler) == _proposed(11, sampler=sampler)
    assert _proposed(11, sampler=sampler) != _proposed(12, sampler=sampler)


def test_a_seed_alone_is_the_first_streams_and_other_streams_are_their_own():
    from autotune.search.draws import SEED_RANGE, stream_seed

    assert stream_seed(11) == stream_seed(11, 0) == 11  # a search in one process: --seed N is its sampler's seed
    assert stream_seed(SEED_RANGE) == 0  # a sweep's seed per shape (N + its position) wraps round
    others = [stream_seed(11, device) for device in range(1, 9)]  # processes on GPUs 1..8 sharing a study
    assert len(set(others)) == 8 and 11 not in others
    assert others == [stream_seed(11, device) for device in range(1, 9)]  # the same from run to run
    assert all(0 <= seed < SEED_RANGE for seed in others)


def test_breeding_opens_and_waits_as_tpe_does_then_breeds_without_waiting_for_configs_in_flight():
    space, problem = SearchSpace(TINY), GemmProblem(64, 64, 64)
    proposer = Proposer(space, H200, problem, seed=5, n_startup=8, sampler="genetic")
    study = optuna.create_study()
    opening = []
    while (config := proposer.next(study, [], {c.name for c in opening}, in_flight=opening)) is not WAIT:
        opening.append(config)
    assert opening == Proposer(space, H200, problem, seed=5, n_startup=8).opening(8)  # TPE's opening
    results = _tiny_results(proposer, opening[:7])
    taken = {c.name for c in opening}
    assert proposer.next(study, results, taken, in_flight=opening[7:]) is WAIT  # one of the opening to come
    results.append(measured(proposer, opening[7], 0.5))
    in_flight = []
    for _ in range(6):
        config = proposer.next(study, results, taken, in_flight=in_flight)
        assert config.name in proposer.learned and config.name not in taken
        taken.add(config.name)
        in_flight.append(config)


def test_children_are_feasible_and_never_a_config_taken_or_in_flight(space):
    proposer = Proposer(space, H200, PROBLEM, seed=2, n_startup=8, sampler="genetic")
    study = optuna.create_study()
    taken = {config.name for config in proposer.fixed_configs()}  # the opening's seeds, tried
    trials = []
    for i in range(20):
        config = proposer.random(taken)
        taken.add(config.name)
        trials.append(measured(proposer, config, 10.0 / (config["BM"] * config["BN"]) + 1e-3 * i))
    in_flight = [proposer.random(taken) for _ in range(3)]
    screened = proposer.rejected
    for _ in range(30):
        config = proposer.next(study, trials, taken | {c.name for c in in_flight}, in_flight=in_flight)
        assert space.check(config, H200, PROBLEM).feasible
        assert config.name not in taken and config not in in_flight and config.name in proposer.learned
        in_flight.append(config)
    assert proposer.rejected > screened  # children that broke a rule were screened out, not proposed


def test_parents_are_only_configs_measured_on_the_gpu(monkeypatch):
    """Compile failures (pruned) and configs in flight (running, or not in the study yet) are never parents."""
    space, problem = SearchSpace(TINY), GemmProblem(64, 64, 64)
    proposer = Proposer(space, H200, problem, seed=3, n_startup=4, sampler="genetic")
    configs = proposer.opening(10)
    measured_ = _tiny_results(proposer, configs[:4])
    pruned = [optuna.trial.create_trial(state=TrialState.PRUNED, params=c.as_dict(),
                                        distributions=proposer.distributions) for c in configs[4:6]]
    running = [optuna.trial.create_trial(state=TrialState.RUNNING, params=c.as_dict(),
                                         distributions=proposer.distributions) for c in configs[6:8]]
    seen = []
    breed = sampler_module.breed
    monkeypatch.setattr(sampler_module, "breed", lambda parents, *rest: seen.append(parents) or breed(parents, *rest))
    config = proposer.next(optuna.create_study(), measured_ + pruned + running, {c.name for c in configs},
                           in_flight=configs[8:])
    assert config.name in proposer.learned
    (parents,) = seen
    assert [params for params, _ in parents] == [{knob: c[knob] for knob in proposer.varying} for c in configs[:4]]
    assert [list(values) for _, values in parents] == [t.values for t in measured_]


def test_a_tournament_picks_the_best_entrant_and_on_two_objectives_one_none_dominates():
    import random

    parents = [({"X": 1}, [3.0]), ({"X": 2}, [1.0]), ({"X": 3}, [2.0])]
    assert sampler_module.TOURNAMENT >= 3  # every parent enters: the best wins
    assert {sampler_module._tournament(parents, random.Random(seed))["X"] for seed in range(20)} == {2}
    front = [({"X": 1}, [1.0, 3.0]), ({"X": 2}, [2.0, 2.0]), ({"X": 3}, [3.0, 3.0])]  # 3 is dominated
    assert {sampler_module._tournament(front, random.Random(seed))["X"] for seed in range(40)} == {1, 2}


def _landscape_ms(config) -> float:
    """A landscape to learn: more outputs per thread and more unrolling are faster, plus noise."""
    noise = int.from_bytes(hashlib.sha256(config.name.encode()).digest()[:4], "little") / 2**32
    return 0.01 * (1.6 - 0.03 * config["ROWS"] * config["COLS"] - 0.02 * config["UNROLL"]) * (1 + 0.1 * noise)


def _evaluations_to_the_best(sampler: str, seed: int) -> int:
    """How many configs of the tiny space (160 feasible) a search evaluates, one at a time, before the best."""
    from autotune.space.survey import feasible_configs

    space, problem = SearchSpace(TINY), GemmProblem(64, 64, 64)
    space.seeds = []  # a search that knows nothing: the seeds are close to the best here
    best = min(feasible_configs(space, H200, problem), key=_landscape_ms).name
    proposer = Proposer(space, H200, problem, seed=seed, n_startup=8, sampler=sampler)
    study = optuna.create_study()
    trials, taken = [], set()
    for count in range(1, 161):
        config = proposer.next(study, trials, taken)
        if config.name == best:
            return count
        taken.add(config.name)
        trials.append(measured(proposer, config, _landscape_ms(config)))
    raise AssertionError("the best config was never proposed")


def test_breeding_finds_the_best_in_fewer_evaluations_than_random_search(monkeypatch):
    """Over ten seeds, about half the evaluations random search needs (46 against 87 on average); with
    breeding replaced by random draws the same count is random search's, and the test fails."""
    seeds = range(10)
    bred = statistics.mean(_evaluations_to_the_best("genetic", seed) for seed in seeds)
    drawn = statistics.mean(_evaluations_to_the_best("random", seed) for seed in seeds)
    assert bred < 0.7 * drawn
    monkeypatch.setattr(sampler_module, "breed", lambda *args: None)  # every proposal a random draw
    assert statistics.mean(_evaluations_to_the_best("genetic", seed) for seed in seeds) > 0.7 * drawn


# -- the opening spread over the knobs' values, and TPE's candidates ------------------------------------------


def _values_covered(configs, space) -> int:
    return sum(len({config[knob] for config in configs}) for knob, values in space.knobs.items() if len(values) > 1)


def test_the_opening_tries_every_value_of_every_knob_where_uniform_draws_miss_some(monkeypatch):
    """8 configs of the tiny space (4 knobs of 4 values) can hold all 16 values: the spread opening does,
    from every seed; with a pool of one (a uniformly random feasible config each time) most openings miss some."""
    from autotune.search import draws

    space, problem = SearchSpace(TINY), GemmProblem(64, 64, 64)
    space.seeds = []

    def covered(seed: int) -> int:
        return _values_covered(draws.FeasibleDraws(space, H200, problem, seed=seed, n_startup=8).opening(8), space)

    assert [covered(seed) for seed in range(10)] == [16] * 10
    monkeypatch.setattr(draws, "SPREAD_POOL", 1)
    assert sum(covered(seed) == 16 for seed in range(10)) <= 3


def test_a_spread_config_takes_the_values_the_configs_tried_hold_least():
    """Configs tried elsewhere (another process's trials, the search's configs in flight) count too."""
    space, problem = SearchSpace(TINY), GemmProblem(64, 64, 64)
    space.seeds = []
    proposer = Proposer(space, H200, problem, seed=3, n_startup=8)
    tried = [{"ROWS": 1, "COLS": cols, "UNROLL": 1, "SKEW": 0} for cols in (1, 2, 4)]
    config = proposer.spread(set(), tried)
    assert config["ROWS"] != 1 and config["UNROLL"] != 1 and config["SKEW"] != 0 and config["COLS"] == 8
    assert space.check(config, H200, problem).feasible
    running = [optuna.trial.create_trial(state=TrialState.RUNNING, params=space.config(values).as_dict(),
                                         distributions=proposer.distributions) for values in tried]
    proposed = proposer.next(optuna.create_study(), running, {space.config(values).name for values in tried})
    assert proposed["ROWS"] != 1 and proposed["SKEW"] != 0  # the opening's next config, spread from the study's


def test_a_search_goes_on_with_the_spread_its_opening_began():
    """The opening drawn before the study (one config per compile process) and the rest of it proposed by
    the search that takes its draws over are the opening one draw of all of it gives."""
    from autotune.search.draws import SPREAD_POOL, FeasibleDraws

    space, problem = SearchSpace(TINY), GemmProblem(64, 64, 64)  # 160 feasible configs
    space.seeds = []
    early = FeasibleDraws(space, H200, problem, seed=4, n_startup=8)
    in_flight = early.opening(3)
    assert len(early._pool) == SPREAD_POOL - 1  # kept for the next draws: topped up, less the config chosen
    proposer = Proposer(space, H200, problem, seed=99, n_startup=8)
    proposer.take_over(early)
    study = optuna.create_study()
    while (config := proposer.next(study, [], {c.name for c in in_flight}, in_flight=in_flight)) is not WAIT:
        in_flight.append(config)
    assert in_flight == FeasibleDraws(space, H200, problem, seed=4, n_startup=8).opening(8)


def test_tpe_alternates_the_incumbents_neighbours_and_ei_candidates_distinct_admissible_configs(space, monkeypatch):
    """TPE's first proposal scores the incumbent's admissible one-knob neighbours, its second EI_CANDIDATES
    distinct feasible configs drawn from l(x) (Optuna's TPE scores 24 draws, the same config drawn again among
    them); none of them taken."""
    from autotune.search import optuna_private

    proposer = Proposer(space, H200, PROBLEM, seed=2, n_startup=8)
    taken, trials = {config.name for config in proposer.fixed_configs()}, []  # the opening's seeds, tried
    for i in range(20):
        config = proposer.random(taken)
        taken.add(config.name)
        trials.append(measured(proposer, config, 10.0 / (config["BM"] * config["BN"]) + 1e-3 * i))
    scored = []
    acquisition = optuna_private.acquisition
    monkeypatch.setattr(optuna_private, "acquisition",
                        lambda sampler, candidates, *rest: scored.append(candidates) or acquisition(sampler, candidates,
                                                                                                  *rest))

    def scored_configs(candidates):
        rows = list(zip(*(candidates[knob].tolist() for knob in proposer.varying)))
        assert len(rows) == len(set(rows))
        configs = [proposer.set_up({**proposer.fixed, **{knob: proposer.varying[knob].choices[int(i)]
                                                          for knob, i in zip(proposer.varying, row)}}) for row in rows]
        assert all(c.name not in taken and space.check(c, H200, PROBLEM).feasible for c in configs)
        return configs

    best = min(trials, key=lambda trial: trial.values[0]).params
    first = proposer.next(optuna.create_study(), trials, taken)
    neighbours = scored_configs(scored.pop())
    assert first in neighbours and 0 < len(neighbours) < sampler_module.EI_CANDIDATES
    assert all(sum(c[knob] != best[knob] for knob in proposer.varying) == 1 for c in neighbours)
    taken.add(first.name)
    second = proposer.next(optuna.create_study(), trials, taken)
    drawn = scored_configs(scored.pop())
    assert len(drawn) == sampler_module.EI_CANDIDATES and second in drawn


def test_tpe_finds_the_best_in_fewer_evaluations_than_random_search():
    """The tiny space's landscape, ten seeds, no seeds in the opening: TPE needs well under random search's."""
    seeds = range(10)
    learned = statistics.mean(_evaluations_to_the_best("tpe", seed) for seed in seeds)
    drawn = statistics.mean(_evaluations_to_the_best("random", seed) for seed in seeds)
    assert learned < 0.5 * drawn
