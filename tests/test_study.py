"""The search loop with the fake GPU backend: budget, screening, resume, racing, closing measurement."""

import collections
import json
from pathlib import Path

import optuna
import pytest
import sqlalchemy

from autotune.errors import FailureClass
from autotune.gpu_specs import gpu_spec
from autotune.problem import GemmProblem
from autotune.results import ResultStore
from autotune.search.dispatch import RACE_MARGINS
from autotune.search.search import Search, SearchSettings
from autotune.search.study import evaluated_on_gpu, trial_params
from autotune.space.family import SearchSpace, load_space

TINY = Path(__file__).parent / "data" / "tiny.toml"  # kernels that compile in a fraction of a second


@pytest.fixture(scope="module")
def worker():
    from autotune.gpu.worker import GpuWorker

    with GpuWorker(backend="fake") as fake:
        yield fake


def study_trials(store: ResultStore, name: str) -> list:
    return optuna.load_study(study_name=name, storage=store.url).get_trials(deepcopy=False)


def test_rejected_configs_never_become_trials_and_a_rerun_resumes(tmp_path, worker):
    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    space, gpu, problem = SearchSpace(TINY), gpu_spec("h200"), GemmProblem(64, 64, 64)

    first = Search(space, gpu, problem, store, worker, SearchSettings(trials=12, jobs=2, seed=3)).run()
    assert first.evaluated == 12
    assert first.screened > 0  # the sampler drew configs the static rules reject...
    trials = study_trials(store, first.study_name)
    stages = collections.Counter(t.user_attrs["stage"] for t in trials)
    assert set(stages) <= {"gpu", "compile"} and stages["gpu"] == 12  # ...and none of them became a trial
    assert sum(evaluated_on_gpu(t) for t in trials) == 12
    assert all(space.check(space.config(trial_params(t)), gpu, problem).feasible for t in trials)
    assert FailureClass.REJECTED.value not in store.failure_counts("h200-fake", problem)
    candidates = {row.config_name for row in store.best("h200-fake", problem, limit=100)}
    assert len(candidates) == 12  # every GPU evaluation is a distinct config

    again = Search(space, gpu, problem, store, worker, SearchSettings(trials=12, jobs=2, seed=3)).run()
    assert again.evaluated == 12 and again.study_name == first.study_name  # nothing new to do
    assert len(study_trials(store, first.study_name)) == len(trials)

    more = Search(space, gpu, problem, store, worker, SearchSettings(trials=14, jobs=2, seed=3)).run()
    assert more.evaluated == 14
    assert len({row.config_name for row in store.best("h200-fake", problem, limit=100)}) == 14


def test_trials_carry_their_knobs_as_optuna_params_so_optunas_own_tools_read_the_study(tmp_path, worker):
    from optuna.distributions import CategoricalDistribution

    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    space, gpu, problem = SearchSpace(TINY), gpu_spec("h200"), GemmProblem(64, 64, 64)
    result = Search(space, gpu, problem, store, worker, SearchSettings(trials=12, jobs=2, seed=4)).run()
    study = optuna.load_study(study_name=result.study_name, storage=store.url)  # as optuna-dashboard opens it
    evaluated = [t for t in study.trials if evaluated_on_gpu(t)]
    assert len(evaluated) == 12
    for trial in evaluated:
        assert space.config(trial.params).name == trial.user_attrs["config"]
        assert trial.distributions["ROWS"] == CategoricalDistribution(space.knobs["ROWS"])
    importances = optuna.importance.get_param_importances(study)
    assert set(importances) == set(space.knobs) and abs(sum(importances.values()) - 1) < 1e-6


def test_a_study_whose_trials_hold_their_knobs_as_attributes_only_is_still_read(tmp_path):
    """Studies written while the knobs were user attributes only resume: TPE and the closing read them."""
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState

    from autotune.search.study import StudyLedger

    url = f"sqlite:///{tmp_path}/r.db"
    ResultStore(url).close()
    space, gpu = SearchSpace(TINY), gpu_spec("h200")
    old, new = [verdict.config for verdict in space.verdicts(gpu) if verdict.feasible][:2]
    distributions = {knob: CategoricalDistribution(values) for knob, values in space.knobs.items()}
    ledger = StudyLedger(url, "older", ["minimize"], distributions, budget=4)
    try:
        written_before = optuna.trial.create_trial(state=TrialState.COMPLETE, value=1.0, user_attrs={
            "stage": "gpu", "config": old.name, "params": old.as_dict()})
        ledger.storage.create_new_trial(ledger.study_id, template_trial=written_before)
        slot = ledger.reserve(new, device=0)
        ledger.finish(slot.trial_id, {}, (2.0,))
        view = ledger.view(fresh=True)
        assert view.taken == {old.name, new.name}
        assert [trial_params(t) for t in view.measured] == [old.as_dict(), new.as_dict()]
        assert [t.params for t in view.learnable] == [old.as_dict(), new.as_dict()]
    finally:
        ledger.close()


def test_clearly_slower_candidates_stop_timing_early_and_contenders_get_every_launch(tmp_path, worker):
    from autotune.gpu.fake_backend import FakeBackend

    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    space, gpu, problem = SearchSpace(TINY), gpu_spec("h200"), GemmProblem(256, 256, 256)
    result = Search(space, gpu, problem, store, worker, SearchSettings(trials=16, jobs=2, repeats=12)).run()
    assert result.raced > 0
    with sqlalchemy.create_engine(store.url).connect() as connection:
        rows = connection.execute(sqlalchemy.text(
            "SELECT k.name, m.samples_json FROM measurements m JOIN kernels k ON k.id = m.kernel_id "
            "WHERE m.study = :study"), {"study": result.study_name}).all()
    samples = collections.defaultdict(list)
    for name, samples_json in rows:
        samples[name].append(len(json.loads(samples_json)))
    margins = dict(RACE_MARGINS)  # launches -> margin of the stage that stops there
    raced = [name for name, counts in samples.items() if counts[0] in margins]
    assert len(raced) == result.raced and {samples[name][0] for name in raced} > {1}  # stopped at a stage or later
    best_ms = result.best.timing.median_ms
    for name in raced:  # stopped only when that much slower than a candidate measured before
        ms = problem.flops / (FakeBackend.kernel_tflops(name) * 1e9)
        assert ms > margins[samples[name][0]] * best_ms
    assert samples[result.best_config.name][0] == 12  # the winner got every launch


class RecordingWorker:
    """Passes tasks to a real (fake-backend) worker and records their kinds in order."""

    def __init__(self, worker):
        self.worker, self.kinds, self.tasks = worker, [], []

    def run(self, task, timeout_s):
        self.kinds.append(type(task).__name__)
        self.tasks.append(task)
        return self.worker.run(task, timeout_s=timeout_s)

    def __getattr__(self, name):
        return getattr(self.worker, name)


def test_closing_measurement_alternates_cublas_and_the_best_config(tmp_path, worker):
    from autotune.search.closing import FINAL_ROUNDS

    recording = RecordingWorker(worker)
    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    result = Search(load_space("sgemm"), gpu_spec("h200"), GemmProblem(64, 64, 64), store, recording,
                    SearchSettings(trials=3, jobs=2, seed=1)).run()
    tail = recording.kinds[-2 * FINAL_ROUNDS:]
    assert tail == ["CublasTask", "KernelTask"] * FINAL_ROUNDS
    closing = recording.tasks[-2 * FINAL_ROUNDS + 1::2]
    assert all(task.race == () and task.warmup == SearchSettings().warmup for task in closing)  # no racing there
    samples = len(result.best.timing.samples_ms)
    assert samples >= FINAL_ROUNDS and samples % FINAL_ROUNDS == 0  # every round's launches pooled


def test_pooled_measurement_merges_every_launch():
    from autotune.records import Measurement, Timing
    from autotune.search.evaluate import pooled

    problem = GemmProblem(128, 128, 128)
    runs = [Measurement(Timing.from_samples([1.0, 2.0, 3.0]), 0.0, 0.2, 1980, 0, 50),
            Measurement(Timing.from_samples([4.0, 5.0, 6.0]), 0.0, 0.7, 1500, 4, 61)]
    merged = pooled(problem, runs)
    assert merged.timing.samples_ms == (1.0, 2.0, 3.0, 4.0, 5.0, 6.0) and merged.timing.median_ms == 3.5
    assert merged.tflops == pytest.approx(problem.tflops(3.5))
    assert (merged.max_error, merged.sm_clock_mhz, merged.throttle_reasons, merged.temperature_c) == (0.7, 1500, 4, 61)


def test_a_template_that_never_compiles_stops_the_search_with_nvrtcs_error(tmp_path, worker):
    from autotune.data_files import data_dir
    from autotune.errors import SearchError
    from autotune.space.family import SearchSpace, space_path

    templates = tmp_path / "templates"
    templates.mkdir()
    source = (data_dir("templates") / "sgemm.cu.j2").read_text()
    (templates / "sgemm.cu.j2").write_text(source.replace("extern \"C\"", "this_is_not_cuda;\nextern \"C\"", 1))
    text = space_path("sgemm").read_text()
    (tmp_path / "sgemm.toml").write_text('template_dir = "templates"\n' + text)
    space = SearchSpace(tmp_path / "sgemm.toml")
    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    problem = GemmProblem(64, 64, 64)

    with pytest.raises(SearchError, match=r"sgemm.cu.j2 does not compile .* 4 candidates in a row .*\.cu\(\d+\): error"):
        Search(space, gpu_spec("h200"), problem, store, worker,
               SearchSettings(trials=20, jobs=2, seed=1, max_compile_errors=4)).run()
    assert store.failure_counts("h200-fake", problem)[FailureClass.COMPILE_ERROR.value] == 4  # each one recorded


def test_the_result_says_where_the_time_went(tmp_path, worker):
    from autotune.cli.search import time_spent_text

    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    result = Search(SearchSpace(TINY), gpu_spec("h200"), GemmProblem(64, 64, 64), store, worker,
                    SearchSettings(trials=6, jobs=2, seed=1)).run()
    spent = result.time_spent
    assert spent["compile"]["count"] >= 6  # every evaluated candidate was compiled (cache or not)
    assert spent["record"]["count"] >= 6 and spent["slots"]["count"] >= 6
    assert spent["propose"]["count"] >= 6
    parts = sum(spent[name]["seconds"] for name in ("propose", "slots", "record", "closing"))
    assert 0 < parts <= spent["wall"]["seconds"]  # the main thread's parts fit in the wall time
    assert 0 < spent["gpu busy"]["seconds"] <= spent["wall"]["seconds"]
    assert time_spent_text(spent).startswith(f"time: {spent['wall']['seconds']:.1f} s; GPU busy")


def compile_for_ten_minutes(source, arch=None):
    """A compile that takes ten minutes (run in a compile process)."""
    import time

    time.sleep(600)


class PoolSlowAfter:
    """A compile pool whose first ``fast`` compiles are real and every later one takes ten minutes."""

    stops_unfinished = True

    def __init__(self, jobs: int, fast: int):
        from autotune.kernel.compile import CompilePool

        self.pool, self.fast, self.jobs = CompilePool(jobs), fast, jobs
        self.slow: list = []  # the futures of the ten-minute compiles
        self.pids: set[int] = set()  # the compile processes

    def submit(self, source, arch=None):
        if self.fast > 0:
            self.fast -= 1
            return self.pool.submit(source, arch)
        future = self.pool._executor.submit(compile_for_ten_minutes, source, arch)
        self.slow.append(future)
        self.pids.update(process.pid for process in self.pool._children())
        return future

    def warm_up(self):
        self.pool.warm_up()

    def close(self, wait: bool = True):
        self.pool.close(wait)


def test_a_finished_search_waits_for_no_compile_it_will_not_use(tmp_path, worker):
    import time

    from test_pipeline import _ended

    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    pool = PoolSlowAfter(jobs=2, fast=3)  # 3 evaluations need 3 compiles; compiling ahead starts more
    pool.warm_up()
    started = time.monotonic()
    try:
        result = Search(SearchSpace(TINY), gpu_spec("h200"), GemmProblem(64, 64, 64), store, worker,
                        SearchSettings(trials=3, jobs=2, seed=1), pool=pool).run()
        pool.close()  # as the command line's exit does
        finished = time.monotonic() - started
    finally:
        pool.pool.terminate()
    assert result.evaluated == 3
    assert pool.slow and not any(future.done() and not future.cancelled() and future.exception() is None
                                 for future in pool.slow)  # ten-minute compiles were under way, never finished
    assert finished < 300  # seconds even on a loaded machine; a search that waited for them would take ten minutes
    assert pool.pids and all(_ended(pid) for pid in pool.pids)  # and their processes are gone


def test_the_seeds_compile_while_the_study_opens(tmp_path, worker, monkeypatch):
    from autotune.search import search as study_module

    compiling_when_opened = []

    class Ledger(study_module.StudyLedger):
        def __init__(self, *args, **kwargs):
            compiling_when_opened.append([config.name for config in search.compiles.compiling.values()])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(study_module, "StudyLedger", Ledger)
    space = SearchSpace(TINY)
    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    search = Search(space, gpu_spec("h200"), GemmProblem(64, 64, 64), store, worker,
                    SearchSettings(trials=2, jobs=2, seed=1))
    result = search.run()
    assert compiling_when_opened == [[seed.name for seed in space.seeds[:2]]]  # as many as there are processes
    evaluated = {t.user_attrs["config"] for t in study_trials(store, result.study_name) if evaluated_on_gpu(t)}
    assert evaluated == {seed.name for seed in space.seeds[:2]}  # and they are the first evaluated


def test_cublas_runs_while_the_study_opens(tmp_path, worker, monkeypatch):
    """The reference needs no study: it runs on the GPU while the study opens, not after."""
    import threading

    from autotune.gpu.tasks import CublasTask
    from autotune.search import search as study_module

    cublas_started = threading.Event()
    started_while_opening = []

    class WatchedWorker:
        def __getattr__(self, name):
            return getattr(worker, name)

        def run(self, task, *args, **kwargs):
            if isinstance(task, CublasTask):
                cublas_started.set()
            return worker.run(task, *args, **kwargs)

    class Ledger(study_module.StudyLedger):
        def __init__(self, *args, **kwargs):
            started_while_opening.append(cublas_started.wait(timeout=60))  # at once, unless the machine is loaded
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(study_module, "StudyLedger", Ledger)
    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    search = Search(SearchSpace(TINY), gpu_spec("h200"), GemmProblem(64, 64, 64), store, WatchedWorker(),
                    SearchSettings(trials=2, jobs=2, seed=1))
    result = search.run()
    assert started_while_opening == [True]
    assert result.evaluated == 2 and result.cublas is not None


def test_the_seeds_compile_before_the_database_opens(tmp_path, worker):
    space = SearchSpace(TINY)
    compiling_when_opened = []

    def open_store():
        compiling_when_opened.append([config.name for config in search.compiles.compiling.values()])
        return ResultStore(f"sqlite:///{tmp_path}/r.db")

    search = Search(space, gpu_spec("h200"), GemmProblem(64, 64, 64), open_store, worker,
                    SearchSettings(trials=2, jobs=2, seed=1))
    result = search.run()
    assert compiling_when_opened == [[seed.name for seed in space.seeds[:2]]]
    assert result.evaluated == 2 and search.store.url.endswith("r.db")


def test_compile_processes_beyond_the_seeds_start_on_random_configs_the_command_line_can_draw_too(tmp_path, worker):
    """The opening fills every compile process before the study opens, and the command line, drawing
    from the same seed, starts the same compiles (the pool then hands them to the search)."""
    from autotune.search.draws import FeasibleDraws, opening_size

    space, gpu, problem = SearchSpace(TINY), gpu_spec("h200"), GemmProblem(64, 64, 64)
    compiling_when_opened = []

    def open_store():
        compiling_when_opened.append([config.name for config in search.compiles.compiling.values()])
        return ResultStore(f"sqlite:///{tmp_path}/r.db")

    search = Search(space, gpu, problem, open_store, worker, SearchSettings(trials=8, jobs=5, seed=3))
    drawn = FeasibleDraws(space, gpu, problem, 3).opening(opening_size(5, 8))  # --seed 3 alone, one process
    result = search.run()
    assert len(drawn) == 5 and compiling_when_opened == [[config.name for config in drawn]]
    assert [config.name for config in drawn[:3]] == [seed.name for seed in space.seeds]  # 3 seeds, 2 random
    assert result.evaluated == 8


class SlowWorker(RecordingWorker):
    """A GPU behind the compiles: it runs its first candidate only once more than a lane's share of candidates
    (READY_PER_LANE) waits for it (however slowly a loaded machine compiles; for two minutes at most), and takes
    0.3 s per candidate."""

    search = None  # the BacklogSearch it serves

    def run(self, task, timeout_s):
        import time

        from autotune.search.compiling import READY_PER_LANE

        if type(task).__name__ == "KernelTask":
            deadline = time.monotonic() + 120
            while max((total for total, _ in self.search.backlog), default=0) <= READY_PER_LANE \
                    and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.3)
        return super().run(task, timeout_s)


class BacklogSearch(Search):
    """Notes, at each compile it starts, the candidates waiting for the GPU: all, and those TPE proposed."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        compiles, submit = self.compiles, self.compiles.submit

        def noting_the_backlog(pool, config):
            self.backlog.append((len(compiles.ready), compiles.proposed_waiting()))
            submit(pool, config)

        compiles.submit = noting_the_backlog


class CompilesFirstWorker(RecordingWorker):
    """A GPU far behind the compiles (as a warm cubin cache makes it): it starts each candidate only
    once no compile is in flight (two minutes at most, however slowly a loaded machine compiles)."""

    search = None  # the Search it serves

    def run(self, task, timeout_s):
        import time

        if type(task).__name__ == "KernelTask":
            deadline = time.monotonic() + 120
            while self.search.compiles.compiling and time.monotonic() < deadline:
                time.sleep(0.005)
        return super().run(task, timeout_s)


@pytest.mark.parametrize("sampler", ["tpe", "genetic"])
def test_random_draws_in_flight_count_against_the_opening_and_what_follows_it_is_tpes(tmp_path, worker, sampler):
    """However far the compiles run ahead of the GPU, the opening is n_startup configs (seeds, then
    random draws); every config evaluated after it is a TPE proposal (or a child) made from its results."""
    from autotune.search.draws import N_STARTUP

    gpu_first = CompilesFirstWorker(worker)
    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    search = Search(SearchSpace(TINY), gpu_spec("h200"), GemmProblem(64, 64, 64), store, gpu_first,
                    SearchSettings(trials=N_STARTUP + 8, jobs=2, seed=1, sampler=sampler))
    gpu_first.search = search
    result = search.run()
    assert result.evaluated == N_STARTUP + 8
    assert search.proposer.opened == N_STARTUP
    evaluated = [t.user_attrs["config"] for t in study_trials(store, result.study_name) if evaluated_on_gpu(t)]
    assert [name in search.proposer.learned for name in evaluated] == [False] * N_STARTUP + [True] * 8


def test_a_backlog_of_seeds_never_pauses_the_compiles_and_one_of_proposals_does(tmp_path, worker):
    from autotune.search.compiling import READY_PER_LANE

    space = SearchSpace(TINY)
    warm = [config for config in space if config not in space.seeds][:8]  # seeds too, given in advance
    slow = SlowWorker(worker)
    search = BacklogSearch(space, gpu_spec("h200"), GemmProblem(64, 64, 64),
                           ResultStore(f"sqlite:///{tmp_path}/r.db"), slow,
                           SearchSettings(trials=24, jobs=2, seed=1), warm_start=warm)
    search.backlog, slow.search = [], search
    result = search.run()
    assert result.evaluated == 24
    assert max(total for total, _ in search.backlog) > READY_PER_LANE  # seeds piled up; compiling went on
    assert all(proposed < READY_PER_LANE for _, proposed in search.backlog)  # proposals never did


def test_a_search_s_seed_fixes_its_opening_and_its_first_gpu_its_stream(tmp_path, worker):
    """--seed N on one process: the sampler's seed is N, so a search's opening is the one N draws and
    two searches with the same seed (on databases of their own) open alike; a search on GPU 1 draws a
    stream of its own."""
    import random

    from autotune.search.draws import N_STARTUP, FeasibleDraws, stream_seed

    class OnDevice(RecordingWorker):
        device = 1

    space, gpu, problem = SearchSpace(TINY), gpu_spec("h200"), GemmProblem(64, 64, 64)

    def opening(seed: int, run: str) -> list[str]:
        store = ResultStore(f"sqlite:///{tmp_path}/{run}.db")
        result = Search(space, gpu, problem, store, worker, SearchSettings(trials=N_STARTUP, jobs=2, seed=seed)).run()
        return sorted(t.user_attrs["config"] for t in study_trials(store, result.study_name) if evaluated_on_gpu(t))

    first = opening(5, "a")
    drawn = FeasibleDraws(space, gpu, problem, seed=5).opening(N_STARTUP)
    assert first == sorted(config.name for config in drawn)
    assert opening(5, "b") == first and opening(6, "c") != first
    on_gpu1 = Search(space, gpu, problem, lambda: None, OnDevice(worker), SearchSettings(seed=5))
    assert on_gpu1.proposer.rng.getstate() == random.Random(stream_seed(5, 1)).getstate() \
        != random.Random(5).getstate()
