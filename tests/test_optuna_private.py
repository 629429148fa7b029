"""Optuna's private parts that autotune uses (autotune/search/optuna_private.py), one test each: an Optuna
release that changes one fails the test named after it."""

import numpy
import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from autotune.search import optuna_private

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")  # heartbeats

SPACE = {"x": CategoricalDistribution([1, 2, 4, 8]), "y": CategoricalDistribution([0, 1])}


def trial(x: int, y: int, value: float | None, state=TrialState.COMPLETE):
    return optuna.trial.create_trial(state=state, params={"x": x, "y": y}, distributions=SPACE, value=value)


def results() -> list:
    """x = 8 is fast, whatever y."""
    return [trial(x, y, (1.0 if x == 8 else 5.0) + 0.1 * i) for i, (x, y) in
            enumerate((x, y) for x in (1, 2, 4, 8) for y in (0, 1) for _ in range(3))]


def test_tpe_gamma():
    study = optuna.create_study()
    assert optuna_private.tpe_gamma(optuna.samplers.TPESampler(), study)(100) == 10
    assert optuna_private.tpe_gamma(optuna.samplers.TPESampler(), study)(1000) == 25  # capped
    pareto = optuna.create_study(directions=["minimize", "minimize"])
    assert optuna_private.tpe_gamma(optuna.samplers.TPESampler(), pareto)(1000) == 100  # not capped


def test_ei_candidates():
    assert optuna_private.ei_candidates(optuna.samplers.TPESampler(n_ei_candidates=7)) == 7


def test_tpe_rng():
    draws = [optuna_private.tpe_rng(optuna.samplers.TPESampler(seed=3)).randint(1 << 30, size=4) for _ in range(2)]
    assert isinstance(optuna_private.tpe_rng(optuna.samplers.TPESampler()), numpy.random.RandomState)
    assert list(draws[0]) == list(draws[1])  # seeded with the sampler's seed


def test_split_trials():
    study = optuna.create_study()
    finished = results()
    running = trial(8, 1, None, TrialState.RUNNING)
    below, above = optuna_private.split_trials(study, finished + [running], 3)
    assert sorted(t.value for t in below) == sorted(t.value for t in finished)[:3]
    assert running in above and len(above) == len(finished) - 3 + 1


def _estimators(sampler, study):
    below, above = optuna_private.split_trials(study, results(), 6)
    return (optuna_private.parzen_estimator(sampler, study, SPACE, below, below=True),
            optuna_private.parzen_estimator(sampler, study, SPACE, above, below=False))


def test_parzen_estimator():
    sampler, study = optuna.samplers.TPESampler(seed=1, multivariate=True), optuna.create_study()
    below, _ = _estimators(sampler, study)
    candidates = below.sample(numpy.random.RandomState(0), 200)
    assert numpy.mean(candidates["x"] == 3) > 0.5  # x = 8 (its index 3) is where the good trials are


def test_sample():
    sampler, study = optuna.samplers.TPESampler(seed=1, multivariate=True), optuna.create_study()
    below, _ = _estimators(sampler, study)
    candidates = optuna_private.sample(below, numpy.random.RandomState(0), 50)
    assert set(candidates) == set(SPACE)
    assert all(len(values) == 50 for values in candidates.values())
    assert set(candidates["x"].tolist()) <= {0, 1, 2, 3} and set(candidates["y"].tolist()) <= {0, 1}  # indices


def test_acquisition():
    sampler, study = optuna.samplers.TPESampler(seed=1, multivariate=True), optuna.create_study()
    below, above = _estimators(sampler, study)
    candidates = {"x": numpy.array([0.0, 3.0]), "y": numpy.array([0.0, 0.0])}  # x = 1, then x = 8
    scores = optuna_private.acquisition(sampler, candidates, below, above)
    assert scores.shape == (2,) and scores[1] > scores[0]


@pytest.fixture
def storage(tmp_path):
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/o.db", heartbeat_interval=60, grace_period=120)
    yield storage
    storage.engine.dispose()


def test_trial_id(storage):
    optuna.create_study(storage=storage, study_name="first").add_trial(trial(1, 0, 1.0))
    study = optuna.create_study(storage=storage, study_name="second")
    study.add_trial(trial(2, 0, 1.0))
    (stored,) = study.get_trials()
    assert stored.number == 0 and optuna_private.trial_id(stored) == 2  # ids run across the storage's studies
    assert storage.get_trial(optuna_private.trial_id(stored)).params == {"x": 2, "y": 0}


def test_with_id():
    made = optuna_private.with_id(trial(4, 1, 2.0), 5, 17)
    assert made.number == 5 and optuna_private.trial_id(made) == 17


def test_beaten(storage):
    study = optuna.create_study(storage=storage, study_name="beats")
    study_id = storage.get_study_id_from_name("beats")
    beat, silent = (storage.create_new_trial(study_id) for _ in range(2))
    storage.record_heartbeat(beat)
    assert optuna_private.beaten(storage, [beat, silent]) == {beat}
    assert optuna_private.beaten(storage, []) == set()


@pytest.mark.parametrize("state", [TrialState.RUNNING, TrialState.PRUNED])
def test_create_trial(storage, state):
    """A trial stored by create_trial reads back as Optuna's create_new_trial stores it: number, state,
    params with their distributions, user attributes and start time."""
    study = optuna.create_study(storage=storage, study_name="created")
    study_id = storage.get_study_id_from_name("created")
    made = [optuna.trial.create_trial(state=state, params={"x": x, "y": 1}, distributions=SPACE,
                                      user_attrs={"config": f"x{x}", "device": 0, "stage": "gpu"})
            for x in (2, 8)]
    ours = optuna_private.create_trial(storage, study_id, made[0])
    theirs = storage.create_new_trial(study_id, template_trial=made[1])
    a, b = storage.get_trial(ours), storage.get_trial(theirs)
    assert (a.number, b.number) == (0, 1)
    assert a.state == b.state == state
    assert a.params == {"x": 2, "y": 1} and b.params == {"x": 8, "y": 1}
    assert a.distributions == b.distributions == SPACE
    assert a.user_attrs == {"config": "x2", "device": 0, "stage": "gpu"}
    assert a.user_attrs.keys() == b.user_attrs.keys()
    assert a.datetime_start == made[0].datetime_start
    assert (a.datetime_complete is None) == (b.datetime_complete is None) == (state == TrialState.RUNNING)
    assert [t.params["x"] for t in study.get_trials()] == [2, 8]
    with pytest.raises(ValueError):
        optuna_private.create_trial(storage, study_id, trial(1, 0, 1.0))  # a finished trial with a value
