"""Every private part of Optuna that autotune uses, each behind one function of this module.

Optuna's public API has no TPE whose candidates can be screened before they are compared
(:class:`~autotune.search.sampler.FeasibleTpeSampler` needs its gamma split, its Parzen
estimators, their sampling and the l(x)/g(x) acquisition), no way to list the heartbeats of
running trials (a slot that never beat), no public trial id on a :class:`~optuna.trial.FrozenTrial`,
and no cheap way to store a trial with many parameters (``RDBStorage.create_new_trial`` makes three
queries per parameter: with a GEMM family's 20 knobs, 30 ms a slot on SQLite, a quarter of a search's
own time). Nothing else in autotune touches a name of Optuna that
starts with an underscore. ``tests/test_optuna_private.py`` tests each function here on its
own, so an Optuna release that changes one of them fails the test named after it. Written
for Optuna 5.0 and 5.1.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

import numpy
import optuna
import sqlalchemy
from optuna.distributions import BaseDistribution, distribution_to_json
from optuna.samplers._tpe import sampler as _tpe
from optuna.storages._rdb import models as _models
from optuna.storages._rdb.storage import _create_scoped_session
from optuna.trial import FrozenTrial, TrialState

HEARTBEATS = "trial_heartbeats"  # Optuna's table of running trials' last beats (RDBStorage)


# -- TPE ---------------------------------------------------------------------------------------


def tpe_gamma(sampler: optuna.samplers.TPESampler, study: optuna.Study) -> Callable[[int], int]:
    """How many of n finished trials ``sampler`` counts as good ("below"): its own gamma, or Optuna's
    default for the study's number of objectives."""
    if sampler._gamma is not None:
        return sampler._gamma
    return _tpe.default_gamma if len(study.directions) == 1 else _tpe.default_gamma_multiobjective


def ei_candidates(sampler: optuna.samplers.TPESampler) -> int:
    """How many candidates ``sampler`` compares by l(x)/g(x) per proposal."""
    return sampler._n_ei_candidates


def tpe_rng(sampler: optuna.samplers.TPESampler) -> numpy.random.RandomState:
    """``sampler``'s random state (seeded with its ``seed``)."""
    return sampler._rng.rng


def split_trials(study: optuna.Study, trials: list[FrozenTrial],
                 n_below: int) -> tuple[list[FrozenTrial], list[FrozenTrial]]:
    """``trials`` split as TPE splits them: the ``n_below`` best finished ones, and the others (running
    trials among them: the constant liar)."""
    return _tpe._split_trials(study, trials, n_below)


def parzen_estimator(sampler: optuna.samplers.TPESampler, study: optuna.Study,
                     search_space: dict[str, BaseDistribution], trials: list[FrozenTrial], below: bool):
    """``sampler``'s Parzen estimator over ``search_space`` built from ``trials``: l(x) for the good ones
    (``below``), g(x) for the others."""
    return sampler._build_parzen_estimator(study, search_space, trials, handle_below=below)


def sample(estimator, rng: numpy.random.RandomState, count: int) -> dict[str, numpy.ndarray]:
    """``count`` candidates drawn from a Parzen estimator: per parameter, an array of internal
    representations (for a categorical, the index of the choice)."""
    return estimator.sample(rng, count)


def acquisition(sampler: optuna.samplers.TPESampler, candidates: dict[str, numpy.ndarray],
                below, above) -> numpy.ndarray:
    """TPE's score of each candidate (log l(x) - log g(x)): the highest is proposed."""
    return sampler._compute_acquisition_func(candidates, below, above)


# -- trials and storages ------------------------------------------------------------------------


def trial_id(trial: FrozenTrial) -> int:
    """The trial's id in its storage (unique across the storage's studies; ``number`` counts per study)."""
    return trial._trial_id


def with_id(trial: FrozenTrial, number: int, trial_id: int) -> FrozenTrial:
    """``trial`` (one made by :func:`optuna.trial.create_trial`) given the number and id of a stored one."""
    trial.number, trial._trial_id = number, trial_id
    return trial


def beaten(storage: optuna.storages.RDBStorage, trial_ids: Iterable[int]) -> set[int]:
    """Those of ``trial_ids`` that have beaten at least once (Optuna's check of stale trials passes over
    the others)."""
    ids = list(trial_ids)
    if not ids:
        return set()
    with storage.engine.connect() as connection:
        return set(connection.scalars(
            sqlalchemy.text(f"SELECT trial_id FROM {HEARTBEATS} WHERE trial_id IN :ids")
            .bindparams(sqlalchemy.bindparam("ids", expanding=True)), {"ids": ids}))


CREATE_ATTEMPTS = 5  # Optuna's own retries of a trial's creation (a deadlock between processes)


def create_trial(storage: optuna.storages.RDBStorage, study_id: int, template: FrozenTrial) -> int:
    """Store ``template`` (a RUNNING or PRUNED trial of :func:`optuna.trial.create_trial`, with params and
    user attributes only) as a new trial of the study, as ``storage.create_new_trial(study_id, template)``
    stores it (the study's row locked while its number is counted), in one insert per table; its id.

    Unlike Optuna, it does not check each parameter's distribution against the study's earlier trials:
    the caller gives every trial of a study the same distributions.
    """
    if template.state not in (TrialState.RUNNING, TrialState.PRUNED) or template.values or template.system_attrs:
        raise ValueError("create_trial stores running or pruned trials with params and user attributes only")
    for attempt in range(1, CREATE_ATTEMPTS + 1):
        try:
            with _create_scoped_session(storage.scoped_session) as session:
                _models.StudyModel.find_or_raise_by_id(study_id, session, for_update=True)
                trial = _models.TrialModel(study_id=study_id, number=None, state=template.state,
                                           datetime_start=template.datetime_start,
                                           datetime_complete=template.datetime_complete)
                session.add(trial)
                session.flush()  # its id
                session.add_all([
                    _models.TrialParamModel(trial_id=trial.trial_id, param_name=name,
                                            param_value=template.distributions[name].to_internal_repr(value),
                                            distribution_json=distribution_to_json(template.distributions[name]))
                    for name, value in template.params.items()])
                session.add_all([_models.TrialUserAttributeModel(trial_id=trial.trial_id, key=key,
                                                                 value_json=json.dumps(value))
                                 for key, value in template.user_attrs.items()])
                trial.number = trial.count_past_trials(session)
                return trial.trial_id
        except optuna.exceptions.StorageInternalError:
            if attempt == CREATE_ATTEMPTS:
                raise
    raise AssertionError("unreachable")
