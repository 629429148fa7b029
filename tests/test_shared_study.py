"""Several searches on one study: a global budget, each config once, dead processes' slots freed."""

import collections
import os
import signal
import time
from pathlib import Path

import forked_processes
import optuna
import pytest
import sqlalchemy
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from autotune.gpu_specs import gpu_spec
from autotune.problem import GemmProblem
from autotune.results import ResultStore
from autotune.search import optuna_private
from autotune.search.search import Search, SearchSettings
from autotune.search.study import FAILURE, Admission, StudyLedger, evaluated_on_gpu, holds_slot
from autotune.space.family import SearchSpace

HERE = Path(__file__).parent
TINY = HERE / "data" / "tiny.toml"


def start_search(url: str, trials: int, *options: str):
    """A search of tests/search_process.py, forked in a session of its own (so that it can be killed with its
    GPU worker and compile process): the process, and the connection that brings how many configs it evaluated."""
    context = forked_processes.processes()
    received, sent = context.Pipe(duplex=False)
    process = context.Process(target=forked_processes.search, args=([url, str(trials), *options], sent))
    process.start()
    return process, received


def the_study(url: str) -> optuna.Study:
    (name,) = optuna.get_all_study_names(url)
    return optuna.load_study(study_name=name, storage=url)


@pytest.fixture
def url(tmp_path):
    url = f"sqlite:///{tmp_path}/shared.db"
    ResultStore(url).close()  # migrated once, before any search starts
    return url


@pytest.mark.parametrize("sampler", ["tpe", "genetic"])
def test_four_concurrent_searches_end_with_exactly_the_budget(url, sampler):
    budget = 24  # past the 16 results TPE learns from: TPE proposals (or children) race as well
    searches = [start_search(url, budget, "--sampler", sampler) for _ in range(4)]  # all start with the seeds
    evaluated = [received.recv() if received.poll(600) else None for _, received in searches]
    for process, _ in searches:
        process.join(60)
    assert [process.exitcode for process, _ in searches] == [0] * 4  # a search's traceback: in the captured stderr
    assert evaluated == [budget] * 4
    trials = the_study(url).get_trials(deepcopy=False)
    evaluated = [t for t in trials if evaluated_on_gpu(t)]
    assert len(evaluated) == budget
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    per_config = collections.Counter(t.user_attrs["config"] for t in evaluated)
    assert max(per_config.values()) == 1  # every config evaluated once: the seeds too
    seeds = [seed.name for seed in SearchSpace(TINY).seeds]
    assert all(per_config[seed] == 1 for seed in seeds)
    with sqlalchemy.create_engine(url).connect() as connection:
        rows, kernels = connection.execute(sqlalchemy.text(
            "SELECT count(*), count(DISTINCT kernel_id) FROM measurements WHERE kernel_id IS NOT NULL")).one()
        failures = connection.execute(sqlalchemy.text("SELECT count(*), count(DISTINCT kernel_id) FROM failures")).one()
    assert kernels == budget and rows == budget + 4  # one row per evaluation, and each search's closing measurement
    assert failures[0] == failures[1]  # each failed config recorded once


def test_a_killed_search_leaves_slots_that_the_next_run_fails_and_finishes(url):
    killed, _ = start_search(url, 12, "--kernel-s", "0.3", "--heartbeat", "1", "--grace", "2")
    deadline = time.monotonic() + 300
    while True:
        assert time.monotonic() < deadline and killed.is_alive(), "the search ended before it could be killed"
        try:
            trials = the_study(url).get_trials(deepcopy=False)
        except (ValueError, KeyError):  # no study yet
            trials = []
        if sum(evaluated_on_gpu(t) for t in trials) >= 2 and any(t.state == TrialState.RUNNING for t in trials):
            break
        time.sleep(0.1)
    os.killpg(killed.pid, signal.SIGKILL)  # the search, its GPU worker and its compile process
    killed.join()
    left_running = {optuna_private.trial_id(t) for t in the_study(url).get_trials(deepcopy=False)
                    if t.state == TrialState.RUNNING}
    assert left_running

    from autotune.gpu.worker import GpuWorker

    with GpuWorker(backend="fake") as worker:
        result = Search(SearchSpace(TINY), gpu_spec("h200"), GemmProblem(64, 64, 64), ResultStore(url), worker,
                        SearchSettings(trials=12, jobs=1, heartbeat_s=1, grace_s=2, timeout_s=120)).run()
    assert result.evaluated == 12
    trials = {optuna_private.trial_id(t): t for t in the_study(url).get_trials(deepcopy=False)}
    assert sum(evaluated_on_gpu(t) for t in trials.values()) == 12
    assert not [t for t in trials.values() if t.state == TrialState.RUNNING]
    for trial_id in left_running:  # failed as stale: not counted, not a GPU failure
        assert trials[trial_id].state == TrialState.FAIL and FAILURE not in trials[trial_id].user_attrs


def test_slots_are_refused_past_the_budget_and_for_a_config_held_earlier(url):
    space = SearchSpace(TINY)
    configs = [verdict.config for verdict in space.verdicts(gpu_spec("h200")) if verdict.feasible][:4]
    distributions = {knob: CategoricalDistribution(values) for knob, values in space.knobs.items()}
    ledger = StudyLedger(url, "slots", ["minimize"], distributions, budget=2, heartbeat_s=1, grace_s=2)
    try:
        first = ledger.reserve(configs[0], device=0)
        assert first.admission is Admission.ADMITTED
        assert ledger.reserve(configs[0], device=1).admission is Admission.DUPLICATE
        assert ledger.record_compile_failure(configs[1], "resource", "too many registers")
        assert not ledger.record_compile_failure(configs[1], "resource", "too many registers")  # recorded once
        assert ledger.reserve(configs[1], device=0).admission is Admission.DUPLICATE  # it failed to compile
        second = ledger.reserve(configs[2], device=0)
        assert second.admission is Admission.ADMITTED
        assert ledger.reserve(configs[3], device=0).admission is Admission.FULL  # two slots held
        ledger.finish(first.trial_id, {}, (1.5,))
        ledger.release(second.trial_id)  # given back unused: the budget has room again
        third = ledger.reserve(configs[3], device=0)
        assert third.admission is Admission.ADMITTED
        ledger.finish(third.trial_id, {FAILURE: "wrong_answer", "reason": "max error 3x the bound"}, None)
        view = ledger.view(fresh=True)
        assert view.evaluated == 2 and view.held == 2  # a GPU failure counts as an evaluation
        assert view.taken == {configs[0].name, configs[1].name, configs[3].name}
        assert [t.params for t in view.learnable if t.state == TrialState.COMPLETE] == [configs[0].as_dict()]
        assert sum(holds_slot(t) for t in view.trials) == 2
    finally:
        ledger.close()


def test_searches_started_together_open_one_study(url):
    context = forked_processes.processes()
    barrier, results = context.Barrier(6), context.Queue()
    processes = [context.Process(target=forked_processes.open_ledger, args=(url, barrier, results)) for _ in range(6)]
    for process in processes:
        process.start()
    outcomes = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(30)
    assert len(set(outcomes)) == 1 and isinstance(outcomes[0], int), outcomes
    assert optuna.get_all_study_names(url) == ["together"]


def test_a_long_running_slot_keeps_beating_while_new_slots_come_and_go(url):
    space = SearchSpace(TINY)
    configs = [verdict.config for verdict in space.verdicts(gpu_spec("h200")) if verdict.feasible][:16]
    distributions = {knob: CategoricalDistribution(values) for knob, values in space.knobs.items()}
    # a beat every second, stale after 5 s without one: a loaded machine may delay a beat, not five in a row
    ledger = StudyLedger(url, "beats", ["minimize"], distributions, budget=100, heartbeat_s=1, grace_s=5)
    other = StudyLedger(url, "beats", ["minimize"], distributions, budget=100, heartbeat_s=1, grace_s=5)
    try:
        long = ledger.reserve(configs[0], device=0)  # a candidate that takes a while on its GPU
        for config in configs[1:]:  # while other candidates are reserved and finished all along, past the grace
            slot = ledger.reserve(config, device=0)
            ledger.finish(slot.trial_id, {}, (1.0,))
            time.sleep(0.5)
        other.fail_stale()  # another process looking for dead processes' slots
        assert ledger.storage.get_trial(long.trial_id).state == TrialState.RUNNING
    finally:
        other.close()
        ledger.close()


def test_a_slot_whose_process_died_before_its_first_heartbeat_is_failed_after_the_grace_period(url):
    space = SearchSpace(TINY)
    configs = [verdict.config for verdict in space.verdicts(gpu_spec("h200")) if verdict.feasible][:2]
    distributions = {knob: CategoricalDistribution(values) for knob, values in space.knobs.items()}
    ledger = StudyLedger(url, "unbeaten", ["minimize"], distributions, budget=1, heartbeat_s=1, grace_s=4)
    try:
        orphan = optuna.trial.create_trial(  # what a process killed right after creating its slot leaves
            state=TrialState.RUNNING, user_attrs={"config": configs[0].name, "params": configs[0].as_dict(),
                                                  "stage": "gpu", "device": 0})
        orphan_id = ledger.storage.create_new_trial(ledger.study_id, template_trial=orphan)
        assert ledger.reserve(configs[1], device=0).admission is Admission.FULL  # it holds the only slot
        ledger.fail_stale()
        assert ledger.storage.get_trial(orphan_id).state == TrialState.RUNNING  # younger than the grace period
        time.sleep(4.5)
        ledger.fail_stale()
        assert ledger.storage.get_trial(orphan_id).state == TrialState.FAIL
        assert ledger.reserve(configs[1], device=0).admission is Admission.ADMITTED
    finally:
        ledger.close()
