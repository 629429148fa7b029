"""The search loop with the fake GPU backend: budget, rejections, resume."""

import pytest

from autotune.db import ResultStore
from autotune.errors import FailureClass
from autotune.gpus import gpu_spec
from autotune.problem import GemmProblem
from autotune.space import load_space
from autotune.study import Search, SearchSettings


@pytest.fixture(scope="module")
def worker():
    from autotune.worker import GpuWorker

    with GpuWorker(backend="fake") as fake:
        yield fake


def test_rejections_do_not_use_the_budget_and_a_rerun_resumes(tmp_path, worker):
    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    space, gpu, problem = load_space("sgemm"), gpu_spec("h200"), GemmProblem(64, 64, 64)

    first = Search(space, gpu, problem, store, worker, SearchSettings(trials=12, jobs=2, seed=3)).run()
    assert first.evaluated == 12
    assert first.failures.get(FailureClass.REJECTED.value, 0) > 0  # asked, rejected, not counted
    counts = store.failure_counts("h200", problem)
    assert counts[FailureClass.REJECTED.value] == first.failures[FailureClass.REJECTED.value]
    candidates = {row.config_name for row in store.best("h200", problem, limit=100)}
    assert len(candidates) == 12  # every GPU evaluation is a distinct config
    assert all(space.check(space.config(r.params), gpu).feasible for r in store.best("h200", problem, limit=100))

    again = Search(space, gpu, problem, store, worker, SearchSettings(trials=12, jobs=2, seed=3)).run()
    assert again.evaluated == 12 and again.study_name == first.study_name  # nothing new to do
    assert len({row.config_name for row in store.best("h200", problem, limit=100)}) == 12

    more = Search(space, gpu, problem, store, worker, SearchSettings(trials=14, jobs=2, seed=3)).run()
    assert more.evaluated == 14
    assert len({row.config_name for row in store.best("h200", problem, limit=100)}) == 14
