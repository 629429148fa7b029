"""The one evaluation path: a build's checks (kernel/build.py), a candidate's task, timeout, cuBLAS reference
and records (search/evaluate.py), where a search stands, starting a search (search/start.py), and the Optuna
storage's one-line errors."""

import concurrent.futures
import dataclasses
import sqlite3
from pathlib import Path

import pytest

from autotune.errors import DatabaseError, FailureClass, GpuMismatchError, InputError, SearchError
from autotune.gpu_specs import GPUS
from autotune.kernel import build
from autotune.kernel.build import BuiltKernel, compile_result, finish_build
from autotune.kernel.compile import CompiledKernel, CompileFailure
from autotune.kernel.contract import LaunchContract
from autotune.problem import GemmProblem
from autotune.records import Environment, Failure, Measurement, Resources, Timing
from autotune.search.evaluate import (
    CUBLAS_TIMEOUT_S,
    Measuring,
    Recorder,
    kernel_task,
    run_candidate,
    run_cublas,
)
from autotune.space.family import SearchSpace, load_space

TINY = Path(__file__).parent / "data" / "tiny.toml"
H200 = GPUS["h200"]
PROBLEM = GemmProblem(256, 128, 64)
ENV = Environment("h200-fake", "NVIDIA H200 (fake)", "sm_90-fake", "0", "0", "0", "none")


def compiled(config, registers=32, spills=0) -> CompiledKernel:
    """A compile's result without NVRTC (the cubin is no ELF: its parameters are looked up through a stub)."""
    return CompiledKernel(config.name, "sm_90", b"cubin", Resources(registers, 0, 0, spills, spills, 0), "")


@pytest.fixture
def cubin_without_parameters(monkeypatch):
    """The cubin lists no parameters (as some builds do): the argument check passes."""
    monkeypatch.setattr(build, "parameter_sizes", lambda cubin, entry: ())


def measurement(ms: float) -> Measurement:
    return Measurement(Timing.from_samples([ms, ms, ms]), PROBLEM.tflops(ms), 0.1)


class StubWorker:
    """Answers every task with ``answer`` and notes the tasks and their timeouts."""

    device = 0

    def __init__(self, answer):
        self.answer, self.runs = answer, []

    def run(self, task, timeout_s):
        self.runs.append((task, timeout_s))
        return self.answer


# -- the build ----------------------------------------------------------------------------------------


def test_a_compile_failure_is_a_failure_of_its_class():
    space = SearchSpace(TINY)
    failure = finish_build(space, space.seeds[0], CompileFailure("k", "error: no", "log"), H200, PROBLEM)
    assert failure == Failure(FailureClass.COMPILE_ERROR.value, "error: no")


def test_a_build_on_a_problem_has_its_launch_there_and_its_dynamic_shared_memory(cubin_without_parameters):
    space = SearchSpace(TINY)
    config = space.seeds[1]
    built = finish_build(space, config, compiled(config), H200, PROBLEM)
    launch = space.launch(config, H200, PROBLEM)
    assert isinstance(built, BuiltKernel) and built.launch == launch and built.cubin == b"cubin"
    assert built.resources.smem_dynamic == launch.dynamic_smem and built.resources.registers == 32


def test_a_build_without_a_problem_is_checked_against_its_launch_contract(cubin_without_parameters):
    space = SearchSpace(TINY)
    config = space.seeds[0]
    built = finish_build(space, config, compiled(config), H200)
    assert isinstance(built.launch, LaunchContract) and built.launch.grid[0] == "cdiv(N, 16)"
    given = dataclasses.replace(built.launch, dynamic_smem=1024)
    assert finish_build(space, config, compiled(config), H200, launch=given).resources.smem_dynamic == 1024


def test_spills_and_too_many_registers_are_resource_failures(cubin_without_parameters):
    space = SearchSpace(TINY)
    config = space.seeds[0]
    spilled = finish_build(space, config, compiled(config, spills=8), H200, PROBLEM)
    assert spilled.failure_class == FailureClass.RESOURCE.value and "spills 8 B" in spilled.message
    heavy = finish_build(space, config, compiled(config, registers=300), H200, PROBLEM)  # x 256 threads
    assert heavy.failure_class == FailureClass.RESOURCE.value and "registers 300 x 256" in heavy.message


def test_a_cubin_that_takes_other_arguments_than_its_launch_passes_is_a_launch_failure(monkeypatch):
    monkeypatch.setattr(build, "parameter_sizes", lambda cubin, entry: (8, 8))
    space = SearchSpace(TINY)
    config = space.seeds[0]
    failure = finish_build(space, config, compiled(config), H200, PROBLEM)
    assert failure.failure_class == FailureClass.LAUNCH_ERROR.value
    assert failure.message.startswith(f"{config.name} takes parameters of [8, 8] bytes; its launch passes [8, 8, 8")


def test_an_error_inside_a_compile_process_is_a_compile_failure():
    broken, fine = concurrent.futures.Future(), concurrent.futures.Future()
    broken.set_exception(ValueError("boom"))
    result = CompileFailure("k", "m", "")
    fine.set_result(result)
    assert compile_result(broken).message == "ValueError: boom" and compile_result(fine) is result


def test_a_table_kernel_names_where_its_build_stopped(monkeypatch):
    from autotune.export import compile as table_compile
    from autotune.select.kernel_table import TableError, spec_for_arch
    from autotune.select.selection import table_kernel

    kernel = table_kernel("sgemm", load_space("sgemm").seeds[0].as_dict(), H200)
    for failure_class, wanted in ((FailureClass.COMPILE_ERROR, "does not compile for sm_90"),
                                  (FailureClass.RESOURCE, f"does not fit {spec_for_arch('sm_90').key}"),
                                  (FailureClass.LAUNCH_ERROR, "cannot be launched as the table says")):
        monkeypatch.setattr(table_compile, "build_kernel",
                            lambda *args, cls=failure_class, **kwargs: Failure(cls.value, "why"))
        with pytest.raises(TableError, match=f"{kernel.name} {wanted}: why"):
            table_compile.compile_table_kernel(kernel, "sm_90")


# -- the GPU task, the timeout, cuBLAS ------------------------------------------------------------------------


def test_a_candidates_task_carries_its_build_and_the_measuring(cubin_without_parameters):
    space = SearchSpace(TINY)
    config = space.seeds[2]
    task = kernel_task(space, config, compiled(config), H200, PROBLEM, seed=7, warmup=2, repeats=9)
    launch = space.launch(config, H200, PROBLEM)
    assert (task.grid, task.block, task.entry, task.cubin) == (launch.grid, launch.block, config.name, b"cubin")
    assert (task.seed, task.warmup, task.repeats, task.problem, task.race) == (7, 2, 9, PROBLEM, ())
    contract = finish_build(space, config, compiled(config), H200)  # a contract's grid, worked out for the problem
    assert Measuring(PROBLEM, 7, 2, 9).task(contract) == task


def test_the_candidate_timeout_allows_fifty_times_cublas_for_every_launch():
    measuring = Measuring(PROBLEM, warmup=5, repeats=20)
    assert measuring.timeout_s(2.0) == pytest.approx(15.0 + 50.0 * (5 + 20 + 4) * 2.0 / 1e3)
    assert measuring.timeout_s(20.0) > measuring.timeout_s(2.0) > 15.0


def test_a_candidate_runs_within_the_timeout_its_cublas_time_sets():
    worker = StubWorker(measurement(1.0))
    measuring = Measuring(PROBLEM, warmup=1, repeats=3)
    assert run_candidate(worker, "task", measuring, cublas_ms=4.0) == measurement(1.0)
    assert worker.runs == [("task", measuring.timeout_s(4.0))]


def test_cublas_is_the_reference_and_its_failure_stops_the_caller():
    measuring = Measuring(PROBLEM, seed=3, warmup=1, repeats=2)
    worker = StubWorker(measurement(0.5))
    assert run_cublas(worker, measuring) == measurement(0.5)
    (task, timeout_s), = worker.runs
    assert task == measuring.cublas_task() and timeout_s == CUBLAS_TIMEOUT_S
    with pytest.raises(SearchError, match="^cuBLAS reference failed: timeout: no answer$"):
        run_cublas(StubWorker(Failure(FailureClass.TIMEOUT.value, "no answer")), measuring)


def test_the_recorder_stores_measurements_and_failures_under_its_study(tmp_path):
    from autotune.results import ResultStore

    space = SearchSpace(TINY)
    with ResultStore(f"sqlite:///{tmp_path}/r.db") as store:
        recorder = Recorder(store, ENV, PROBLEM, "a/study/cross")
        recorder.cublas(measurement(2.0))
        assert recorder.outcome(space, space.seeds[0], measurement(1.0)) is not None
        assert recorder.outcome(space, space.seeds[1], Failure(FailureClass.FAULT.value, "bad")) is None
        (best,) = store.best(ENV.gpu_key, PROBLEM)
        assert best.config_name == space.seeds[0].name and best.median_ms == pytest.approx(1.0)
        assert store.failure_counts(ENV.gpu_key, PROBLEM) == {FailureClass.FAULT.value: 1}
        assert store.cublas_reference(ENV.gpu_key, PROBLEM) == pytest.approx(2.0)


# -- where a search stands -----------------------------------------------------------------------------------


def test_the_fastest_candidate_keeps_its_task_unraced_with_a_full_warm_up():
    from autotune.gpu.race import race_stages
    from autotune.gpu.tasks import KernelTask
    from autotune.search.objective import make_objective
    from autotune.search.standing import Standing

    standing = Standing(make_objective("time"))
    assert standing.race(((1, 1.5),)) == ()  # nothing to race against yet
    raced = KernelTask(b"", "k", (1, 1, 1), (32, 1, 1), 0, PROBLEM, 0, 0, 20, race=race_stages(1.0, ((1, 2.0),)))
    assert standing.measured("k", raced, 3.0, None, None, warmup=5) == (3.0,)
    assert standing.best == (3.0, "k") and standing.best_task[1].race == () and standing.best_task[1].warmup == 5
    standing.measured("slower", raced, 4.0, None, None, warmup=5)
    assert standing.best == (3.0, "k") and standing.race(((1, 1.5),))[0].limit_ms == pytest.approx(4.5)


# -- starting a search -------------------------------------------------------------------------------------


def test_the_gpu_asked_for_must_be_the_one_attached():
    from autotune.search.start import attached_gpu_spec, check_attached, simulated

    check_attached(H200, ENV)  # the fake GPU answers to its real model
    check_attached(None, ENV)
    with pytest.raises(GpuMismatchError, match="--gpu t4 does not match"):
        check_attached(GPUS["t4"], ENV)
    assert attached_gpu_spec(None, ENV, "auto").key == "h200-fake" == simulated(H200, "fake").key
    assert simulated(simulated(H200, "fake"), "fake").key == "h200-fake" and simulated(H200, "cupy") is H200


def test_the_family_is_the_one_named_or_the_best_the_gpu_can_run():
    from autotune.search.start import choose_family

    assert choose_family(str(TINY), "f32", H200).family == "tiny"
    with pytest.raises(InputError, match="--family .*a family for f16 \\(tiny serves f32\\)"):
        choose_family(str(TINY), "f16", H200)
    with pytest.raises(InputError, match="--dtype 'f8'"):
        choose_family(None, "f8", H200)
    assert choose_family(None, "f32", H200).dtype == "f32"


class PrefetchingPool:
    """Notes what a search's start asks to compile ahead."""

    jobs = 5

    def __init__(self):
        self.prefetched = []

    def prefetch(self, source, arch=None):
        self.prefetched.append(source.entry)


def test_the_opening_is_drawn_once_and_the_search_goes_on_from_its_draws(tmp_path):
    from autotune.search.draws import opening_size
    from autotune.search.sampler import Proposer
    from autotune.search.search import Search, SearchSettings
    from autotune.search.start import draw_opening

    space, settings = SearchSpace(TINY), SearchSettings(trials=8, seed=3)
    pool = PrefetchingPool()
    opening = draw_opening(pool, space, H200, PROBLEM, settings)
    assert pool.prefetched == [config.name for config in opening.configs] and len(opening.configs) == 5

    search = Search(space, H200, PROBLEM, lambda: None, StubWorker(None), settings, opening=opening)
    alone = Proposer(space, H200, PROBLEM, seed=3)  # draws its opening itself, as without a start
    assert alone.opening(opening_size(5, 8)) == list(opening.configs) == list(search.opening)
    taken = {config.name for config in opening.configs}
    assert [search.proposer.random(taken) for _ in range(3)] == [alone.random(taken) for _ in range(3)]
    assert search.proposer.rejected == alone.rejected


def test_a_search_starts_its_processes_and_compiles_its_opening_before_it_runs(tmp_path):
    from autotune.search.settings import SearchSettings
    from autotune.search.start import GpuRequest, SearchRequest, started_search

    seen = []
    request = SearchRequest(PROBLEM, str(TINY), GpuRequest(H200, "h200", backend="fake"),
                            SearchSettings(trials=2, jobs=2, seed=1), db=f"sqlite:///{tmp_path}/r.db")
    with started_search(request, on_environment=lambda search, env: seen.append(env.gpu_key)) as search:
        assert search.gpu.key == "h200-fake" and search.space.family == "tiny"
        assert search.opening == tuple(SearchSpace(TINY).seeds[:2])  # one per compile process
        assert not (tmp_path / "r.db").exists()  # the database opens once the search runs, its seeds compiling
        result = search.run()
    assert seen == ["h200-fake"] and result.evaluated == 2 and "/h200-fake/" in result.study_name
    assert (tmp_path / "r.db").exists()


# -- the Optuna storage ----------------------------------------------------------------------------------


def test_a_newer_optuna_schema_in_the_study_database_is_one_line(tmp_path):
    import optuna

    from autotune.search.study import StudyLedger, optuna_storage

    url = f"sqlite:///{tmp_path}/r.db"
    optuna.storages.RDBStorage(url).engine.dispose()
    with sqlite3.connect(tmp_path / "r.db") as connection:  # as a later Optuna leaves its tables
        connection.execute("UPDATE alembic_version SET version_num = 'v99.0.0.a'")
        connection.execute("UPDATE version_info SET library_version = '99.0.0'")
    with pytest.raises(DatabaseError) as raised:
        optuna_storage(url)
    message = str(raised.value)
    assert "\n" not in message and f"{tmp_path}/r.db" in message and "99.0.0" in message
    with pytest.raises(DatabaseError, match="set up by optuna 99.0.0"):
        StudyLedger(url, "s", ["minimize"], {}, budget=1)


def test_a_workers_hello_is_awaited_by_its_lane_alone_while_the_search_opens_its_study(tmp_path):
    """A worker begun early is started by one thread: its lane's, which runs cuBLAS first."""
    import threading

    from autotune.gpu.worker import GpuWorker
    from autotune.results import ResultStore
    from autotune.search.search import Search, SearchSettings

    asked_from = []

    class Watched:
        def __init__(self, worker):
            self.worker = worker

        def __getattr__(self, name):
            return getattr(self.worker, name)

        def environment(self):
            asked_from.append(threading.current_thread().name)
            return self.worker.environment()

    worker = GpuWorker(backend="fake")
    worker.begin()  # as a command starts it: its hello not read yet
    try:
        result = Search(SearchSpace(TINY), H200, PROBLEM, ResultStore(f"sqlite:///{tmp_path}/r.db"), Watched(worker),
                        SearchSettings(trials=2, jobs=2, seed=1)).run()
    finally:
        worker.close()
    assert asked_from == ["autotune-lane0"] and result.evaluated == 2
