"""Proposals: seeds first, then random feasible configs, then TPE over feasible configs only."""

import optuna
import pytest
from conftest import cpu_seconds
from optuna.trial import TrialState

from autotune.gpu_specs import gpu_spec
from autotune.problem import GemmProblem
from autotune.search.sampler import Proposer
from autotune.space.family import load_space

H200, PROBLEM = gpu_spec("h200"), GemmProblem(4096, 4096, 4096)


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
    opening = FeasibleDraws(space, H200, PROBLEM, seed=7).opening(count)
    assert opening[:len(feasible_seeds)] == feasible_seeds
    assert len({config.name for config in opening}) == count
    assert all(space.check(config, H200, PROBLEM).feasible for config in opening)
    assert Proposer(space, H200, PROBLEM, seed=7).opening(count) == opening  # what the search draws, too
    assert FeasibleDraws(space, H200, PROBLEM, seed=8).opening(count)[len(feasible_seeds):] != opening[len(feasible_seeds):]
    assert FeasibleDraws(space, H200, PROBLEM, seed=7).opening(2) == feasible_seeds[:2]


def test_seeds_come_first_then_random_feasible_configs(space):
    proposer = Proposer(space, H200, PROBLEM, seed=1)
    study = optuna.create_study()
    taken: set[str] = set()
    proposed = []
    for _ in range(len(space.seeds) + 10):
        config = proposer.next(study, [], taken)
        proposed.append(config)
        taken.add(config.name)
    feasible_seeds = _feasible_seeds(space)
    assert proposed[:len(feasible_seeds)] == feasible_seeds
    assert len(set(proposed)) == len(proposed)
    assert all(space.check(config, H200, PROBLEM).feasible for config in proposed)
    assert proposer.rejected > 0  # random draws that broke a rule were screened out, not proposed


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
