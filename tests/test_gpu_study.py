"""A search on the real GPU survives planted faults, hangs and wrong answers."""

from pathlib import Path

import pytest

from autotune.errors import FailureClass
from autotune.gpu_specs import GPUS
from autotune.problem import GemmProblem
from autotune.results import ResultStore
from autotune.search.search import Search, SearchSettings
from autotune.space.family import SearchSpace

pytestmark = pytest.mark.gpu

PLANTED = Path(__file__).parent / "data" / "planted.toml"


def test_planted_fault_and_hang_are_recorded_and_the_study_goes_on(tmp_path):
    from autotune.gpu.worker import GpuWorker

    space = SearchSpace(PLANTED)
    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    problem = GemmProblem(256, 192, 64, "f32")
    with GpuWorker() as worker:
        gpu = GPUS[worker.environment().gpu_key]
        search = Search(space, gpu, problem, store, worker, SearchSettings(trials=4, jobs=2, repeats=5))
        result = search.run()
        restarts = worker.restarts
    assert result.failures.get(FailureClass.FAULT.value) == 1
    assert result.failures.get(FailureClass.TIMEOUT.value) == 1
    assert result.failures.get(FailureClass.WRONG_ANSWER.value) == 1
    assert result.best_config is not None and result.best_config["MODE"] == 0
    assert restarts >= 2
    counts = store.failure_counts(gpu.key, problem)
    assert counts[FailureClass.FAULT.value] == 1 and counts[FailureClass.TIMEOUT.value] == 1
