"""The Optuna study in the results database, shared by every process that runs the same search.

Each GPU evaluation holds a *slot*: before a candidate goes to a GPU, a RUNNING
trial is created for it, and it runs only if fewer than ``budget`` slots come
before it in the study (by trial id) and no earlier trial holds the same config.
So the budget is global to the study and each config is evaluated once, however
many processes on however many hosts share it: Optuna creates a study's trials one
at a time (it locks the study's row; SQLite serialises every write), so trial ids
follow commit order and every process sees the same slots before its own. A slot
whose candidate does not run is *released* (failed, never counted).

Running trials are kept alive by Optuna heartbeats (``RDBStorage(heartbeat_interval,
grace_period)``); a search that starts, or that waits for other processes' slots,
fails the trials of processes that stopped beating (:func:`optuna.storages.fail_stale_trials`),
which frees their slots. A slot beats at once when it is created; one that never beat
(its process died in between, and Optuna's check passes over trials without a
heartbeat) is failed once it is older than the grace period.

A trial carries its config as Optuna parameters (each knob's distribution is a
:class:`~optuna.distributions.CategoricalDistribution` of its values), so Optuna's own
tools (``optuna.importance``, ``optuna.visualization``, optuna-dashboard) read our
studies, and its name as the user attribute ``config``. A trial is stored with one insert per table
(:func:`~autotune.search.optuna_private.create_trial`): Optuna's own ``create_new_trial`` makes
three queries per parameter, some 30 ms a slot for a family's 20 knobs on SQLite. Studies written before trials carried
parameters hold the knob values in the user attribute ``params``; :meth:`StudyView.learnable`
gives TPE those trials with their params. ``stage`` is ``gpu`` for a slot (held or finished),
``compile`` for a compile or resource failure, ``rejected`` in studies written before
rejected configs stopped being trials. A finished slot is COMPLETE (measured; its
values, and ``ms`` where the value is not the time) or FAIL with a ``failure`` class
(it failed on the GPU); a released or stale slot is FAIL without one.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import functools
import os
import socket
import threading
import time
import warnings
from collections.abc import Callable

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy.exc import SQLAlchemyError

from autotune.errors import DatabaseError
from autotune.results.engine import sync_commits_as_wal_needs
from autotune.results.urls import shown_url
from autotune.search import optuna_private as private
from autotune.space.family import Config

PROCESS = f"{socket.gethostname()}:{os.getpid()}"  # which process of which host evaluated a trial

STAGE = "stage"
CONFIG = "config"
PARAMS = "params"
FAILURE = "failure"
GPU, COMPILE, REJECTED = "gpu", "compile", "rejected"
OPEN_ATTEMPTS = 8  # opening a storage that other processes are creating at the same moment
SQLITE_LOCK_TIMEOUT_S = 60.0
VIEW_MAX_AGE_S = 0.25  # how long a view may miss other processes' changes (never this process's own)


class Admission(enum.Enum):
    """What became of a slot asked for."""

    ADMITTED = "admitted"
    FULL = "full"  # the budget is taken by earlier slots
    DUPLICATE = "duplicate"  # an earlier trial holds the same config


@dataclasses.dataclass(frozen=True)
class Slot:
    admission: Admission
    trial_id: int | None = None  # set when admitted


def _stage(trial: FrozenTrial) -> str | None:
    return trial.user_attrs.get(STAGE)


def evaluated_on_gpu(trial: FrozenTrial) -> bool:
    """A finished GPU evaluation: measured, or failed on the GPU (fault, timeout, wrong answer, ...)."""
    if _stage(trial) != GPU:
        return False
    return trial.state == TrialState.COMPLETE or (trial.state == TrialState.FAIL and FAILURE in trial.user_attrs)


def holds_slot(trial: FrozenTrial) -> bool:
    """A GPU evaluation finished, or one reserved and not yet finished."""
    return (trial.state == TrialState.RUNNING and _stage(trial) == GPU) or evaluated_on_gpu(trial)


def trial_ms(trial: FrozenTrial) -> float:
    """A GPU trial's median time: its ``ms`` attribute, else (time objective) its value."""
    return trial.user_attrs.get("ms", trial.values[0] if trial.values else float("inf"))


def trial_params(trial: FrozenTrial) -> dict[str, int]:
    """A trial's knob values: its Optuna params, or its ``params`` attribute in studies written while
    the knobs were not params."""
    return trial.params or trial.user_attrs[PARAMS]


def _taken_by(trial: FrozenTrial) -> bool:
    """Whether the trial's config is spoken for: evaluated, reserved, or failed to compile."""
    return holds_slot(trial) or _stage(trial) == COMPILE


class StudyView:
    """The study's trials as read at one moment, with what a search asks of them."""

    def __init__(self, trials: list[FrozenTrial], mine: set[int], with_params: Callable[[FrozenTrial], FrozenTrial]):
        self.trials = trials
        self._mine = mine
        self._with_params = with_params

    @functools.cached_property
    def evaluated(self) -> int:
        """Finished GPU evaluations: what ``--trials`` counts."""
        return sum(evaluated_on_gpu(t) for t in self.trials)

    @functools.cached_property
    def held(self) -> int:
        """Slots held: finished GPU evaluations and reserved ones."""
        return sum(holds_slot(t) for t in self.trials)

    @functools.cached_property
    def running_elsewhere(self) -> int:
        """Reserved slots of other processes (they finish, or go stale)."""
        return sum(t.state == TrialState.RUNNING and holds_slot(t) and private.trial_id(t) not in self._mine
                   for t in self.trials)

    @functools.cached_property
    def taken(self) -> set[str]:
        """Configs that are evaluated, reserved, or failed to compile: none is proposed again."""
        return {t.user_attrs[CONFIG] for t in self.trials if CONFIG in t.user_attrs and _taken_by(t)}

    @functools.cached_property
    def learnable(self) -> list[FrozenTrial]:
        """What TPE learns from, with their params: measured candidates, compile and resource
        failures (pruned), and reserved slots (running)."""
        return [self._with_params(t) for t in self.trials
                if (t.state == TrialState.COMPLETE and _stage(t) == GPU)
                or (t.state == TrialState.PRUNED and _stage(t) == COMPILE)
                or (t.state == TrialState.RUNNING and holds_slot(t))]

    @functools.cached_property
    def measured(self) -> list[FrozenTrial]:
        """GPU evaluations that produced a measurement."""
        return [t for t in self.trials if t.state == TrialState.COMPLETE and _stage(t) == GPU]

    @property
    def best_ms(self) -> float | None:
        return min((trial_ms(t) for t in self.measured), default=None)


class StudyLedger:
    """One search's study: slots, results and heartbeats (see the module's docstring).

    Args:
        url: the results database's SQLAlchemy URL; Optuna keeps its tables there.
        name: the study name.
        directions: Optuna's directions, one per objective value.
        distributions: every knob's distribution (trials carry their params).
        budget: GPU evaluations in the study, all processes together.
        heartbeat_s, grace_s: a running trial beats every ``heartbeat_s``; one whose
            last beat is older than ``grace_s`` is stale.
        sampler: the sampler the study is created with (it proposes nothing itself here).
    """

    def __init__(self, url: str, name: str, directions: list[str], distributions: dict[str, BaseDistribution],
                 budget: int, heartbeat_s: int = 5, grace_s: int = 20,
                 sampler: optuna.samplers.BaseSampler | None = None):
        self.budget = budget
        self.distributions = distributions
        self.heartbeat_s, self.grace_s = heartbeat_s, grace_s
        self.storage = _retried(lambda: optuna_storage(url, heartbeat_s, grace_s), f"open the Optuna storage of {shown_url(url)}")
        self.study = _retried(lambda: optuna.create_study(
            study_name=name, storage=self.storage, sampler=sampler, directions=directions, load_if_exists=True),
            f"create or load study {name}")
        self.study_id = self.storage.get_study_id_from_name(name)
        self._mine: set[int] = set()  # running trials of this process
        self._converted: dict[int, FrozenTrial] = {}  # finished trials with their params, by trial id
        self._view: StudyView | None = None
        self._viewed_at = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._beating = threading.Thread(target=self._beat, name="autotune-heartbeat", daemon=True)
        self._beating.start()

    # -- reading -----------------------------------------------------------------

    def view(self, fresh: bool = False) -> StudyView:
        """The study now: read again when ``fresh``, when this process wrote to it since the
        last read, or when that read is older than VIEW_MAX_AGE_S."""
        if fresh or self._view is None or time.monotonic() - self._viewed_at > VIEW_MAX_AGE_S:
            self._viewed_at = time.monotonic()
            with self._lock:
                mine = set(self._mine)
            self._view = StudyView(self.study.get_trials(deepcopy=False), mine, self._with_params)
        return self._view

    def fail_stale(self) -> None:
        """Fail running trials whose process stopped beating, or never beat, freeing their slots."""
        _quietly(lambda: optuna.storages.fail_stale_trials(self.study))
        cutoff = datetime.datetime.now() - datetime.timedelta(seconds=self.grace_s)
        with self._lock:
            mine = set(self._mine)
        old = [private.trial_id(t) for t in self.view(fresh=True).trials
               if t.state == TrialState.RUNNING and holds_slot(t) and private.trial_id(t) not in mine
               and t.datetime_start and t.datetime_start < cutoff]
        if not old:
            return
        for never_beat in set(old) - private.beaten(self.storage, old):
            self._close(never_beat, TrialState.FAIL, None)

    # -- GPU slots -----------------------------------------------------------------

    def reserve(self, config: Config, device: int) -> Slot:
        """Hold a slot for ``config`` if the budget and the study allow it."""
        trial_id = self._create(TrialState.RUNNING, config, {STAGE: GPU, "device": device, "process": PROCESS})
        with self._lock:
            self._mine.add(trial_id)
        self.storage.record_heartbeat(trial_id)  # a slot that never beat is only found stale late
        earlier = [t for t in self.view(fresh=True).trials if private.trial_id(t) < trial_id]
        if any(t.user_attrs.get(CONFIG) == config.name and _taken_by(t) for t in earlier):
            self.release(trial_id)
            return Slot(Admission.DUPLICATE)
        if sum(holds_slot(t) for t in earlier) >= self.budget:
            self.release(trial_id)
            return Slot(Admission.FULL)
        return Slot(Admission.ADMITTED, trial_id)

    def finish(self, trial_id: int, attrs: dict, values: tuple[float, ...] | None) -> None:
        """Close a slot as a GPU evaluation: measured (``values``), or failed on the GPU (None;
        ``attrs`` then holds its ``failure`` class)."""
        if values is None and FAILURE not in attrs:
            raise ValueError("a GPU failure needs its failure class")
        for key, value in attrs.items():
            self.storage.set_trial_user_attr(trial_id, key, value)
        state = TrialState.FAIL if values is None else TrialState.COMPLETE
        self._close(trial_id, state, None if values is None else list(values))

    def release(self, trial_id: int) -> None:
        """Give a slot back unused: failed, never counted."""
        self._close(trial_id, TrialState.FAIL, None)

    def release_all(self) -> None:
        """Give back every slot this process still holds (its candidates will not run), those an
        interrupt left between their creation and their bookkeeping included."""
        with self._lock:
            held = set(self._mine)
        held |= {private.trial_id(t) for t in self.view(fresh=True).trials
                 if t.state == TrialState.RUNNING and t.user_attrs.get("process") == PROCESS}
        for trial_id in sorted(held):
            self.release(trial_id)

    # -- compile failures ------------------------------------------------------------

    def record_compile_failure(self, config: Config, failure_class: str, reason: str) -> bool:
        """Store a compile or resource failure as a pruned trial; False when an earlier trial
        already holds the config (another process recorded it first)."""
        trial_id = self._create(TrialState.PRUNED, config,
                                {STAGE: COMPILE, FAILURE: failure_class, "reason": reason[:500]})
        return not any(t.user_attrs.get(CONFIG) == config.name and _taken_by(t)
                       for t in self.view(fresh=True).trials if private.trial_id(t) < trial_id)

    def close(self) -> None:
        """Release this process's slots, stop beating and close the storage's connections."""
        try:
            self.release_all()
        finally:
            self._stop.set()
            self._beating.join(timeout=self.heartbeat_s + 1)
            self.storage.engine.dispose()

    # -- internals ---------------------------------------------------------------------

    def _create(self, state: TrialState, config: Config, attrs: dict) -> int:
        params = config.as_dict()
        template = optuna.trial.create_trial(state=state, params=params, user_attrs={CONFIG: config.name, **attrs},
                                             distributions={knob: self.distributions[knob] for knob in params})
        return private.create_trial(self.storage, self.study_id, template)

    def _with_params(self, trial: FrozenTrial) -> FrozenTrial:
        """The trial with its config's knob values as Optuna params (for TPE)."""
        if trial.params or PARAMS not in trial.user_attrs:
            return trial  # its knobs are Optuna params already
        converted = self._converted.get(private.trial_id(trial))
        if converted is None:
            params = trial_params(trial)
            converted = optuna.trial.create_trial(
                state=trial.state, values=trial.values, params=params, user_attrs=trial.user_attrs,
                distributions={knob: self.distributions[knob] for knob in params})
            private.with_id(converted, trial.number, private.trial_id(trial))
            if trial.state.is_finished():
                self._converted[private.trial_id(trial)] = converted
        return converted

    def _close(self, trial_id: int, state: TrialState, values: list[float] | None) -> None:
        with self._lock:
            self._mine.discard(trial_id)
        self._view = None  # this process's own change shows in its next view
        try:
            self.storage.set_trial_state_values(trial_id, state=state, values=values)
        except optuna.exceptions.UpdateFinishedTrialError:
            pass  # failed as stale by another process meanwhile: its slot is free already

    def _beat(self) -> None:
        """Beat for this process's running trials every ``heartbeat_s`` (each beat once when reserved)."""
        while not self._stop.wait(self.heartbeat_s):
            with self._lock:
                running = sorted(self._mine)
            for trial_id in running:
                try:
                    self.storage.record_heartbeat(trial_id)
                except SQLAlchemyError:
                    pass  # the next round tries again; a grace period is several rounds long


def optuna_storage(url: str, heartbeat_s: int | None = None, grace_s: int | None = None) -> optuna.storages.RDBStorage:
    """Optuna's storage in the results database at ``url``; its running trials beat every ``heartbeat_s``
    where given (a search's slots).

    Raises:
        DatabaseError: Optuna's tables there have a schema this Optuna does not read (written by a
            newer Optuna, or an older one's that needs upgrading).
    """
    engine_kwargs = {"connect_args": {"timeout": SQLITE_LOCK_TIMEOUT_S}} if url.startswith("sqlite") else {}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        storage = _quietly(lambda: optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs,
                                                              heartbeat_interval=heartbeat_s, grace_period=grace_s))
    except RuntimeError as error:  # Optuna's check of its table schema against its own version
        raise DatabaseError(f"cannot use the Optuna studies in {shown_url(url)}: {' '.join(str(error).split())}") \
            from None
    sync_commits_as_wal_needs(storage.engine)
    return storage


def _quietly(call: Callable):
    """``call()`` without Optuna's experimental-feature warning: heartbeats are marked experimental
    (since Optuna 2.9), and they are what frees a dead process's slots."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return call()


def _retried(make: Callable, what: str):
    """``make()``, again after a short wait when a concurrent process was creating the same tables or study."""
    for attempt in range(OPEN_ATTEMPTS):
        try:
            return make()
        except (SQLAlchemyError, optuna.exceptions.DuplicatedStudyError, KeyError) as error:
            if attempt == OPEN_ATTEMPTS - 1:
                raise DatabaseError(f"cannot {what}: {type(error).__name__}: {' '.join(str(error).split())[:200]}") \
                    from error
            time.sleep(0.05 * 2**attempt)
    raise AssertionError("unreachable")
