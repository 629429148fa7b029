"""``autotune sweep`` with the fake GPU backend: searches per shape, warm start, resume, cross measurement."""

import collections
import dataclasses
import json
import signal
import subprocess
import time
from pathlib import Path

import optuna
import pytest
import sqlalchemy
from conftest import autotune, autotune_process

from autotune.gpu_specs import gpu_spec
from autotune.problem import GemmProblem
from autotune.records import Environment, Measurement, Timing
from autotune.results import ResultStore
from autotune.search.search import SearchSettings, study_name
from autotune.search.study import evaluated_on_gpu
from autotune.search.sweep import Sweep, SweepProgress, SweepSettings, warm_start_configs
from autotune.space.family import SearchSpace

HERE = Path(__file__).parent
TINY = HERE / "data" / "tiny.toml"  # kernels that compile in a fraction of a second
KEY = "h200-fake"
GPU = dataclasses.replace(gpu_spec("h200"), key=KEY)  # what the CLI searches the fake GPU as
ENV = Environment(KEY, "NVIDIA H200 (fake)", "sm_90-fake", "0.0 (fake)", "0.0", "0.0", "none")


def sweep_args(shapes: Path, db: str, trials: int, top: int) -> list[str]:
    return ["sweep", "--gpu", "h200", "--shapes", str(shapes), "--family", str(TINY), "--trials", str(trials),
            "--top", str(top), "--backend", "fake", "--db", db, "--jobs", "1"]


def shape_file(tmp_path: Path, *shapes: str) -> Path:
    path = tmp_path / "shapes.txt"
    path.write_text("# a few small shapes\n" + "\n".join(shapes) + "\n")
    return path


def evaluated_per_study(url: str) -> dict[str, int]:
    storage = optuna.storages.RDBStorage(url)
    return {study.study_name: sum(evaluated_on_gpu(t) for t in storage.get_all_trials(study._study_id))
            for study in storage.get_all_studies()}


def kernel_results(url: str) -> list[tuple[str, int, int, int, str]]:
    """(kernel, m, n, k, study) of every candidate measurement and failure."""
    query = ("SELECT kernels.name, problems.m, problems.n, problems.k, {t}.study FROM {t} "
             "JOIN kernels ON {t}.kernel_id = kernels.id JOIN problems ON {t}.problem_id = problems.id")
    with sqlalchemy.create_engine(url).connect() as connection:
        return [tuple(row) for t in ("measurements", "failures")
                for row in connection.execute(sqlalchemy.text(query.format(t=t)))]


def measurement(ms: float, problem: GemmProblem) -> Measurement:
    return Measurement(Timing(ms, ms, ms, ms, ms, (ms,)), problem.tflops(ms), 0.1)


@pytest.fixture(scope="module")
def worker():
    from autotune.gpu.worker import GpuWorker

    with GpuWorker(backend="fake") as fake:
        yield fake


@pytest.fixture(scope="module")
def pool():
    from autotune.kernel.compile import CompilePool

    with CompilePool(1) as compile_pool:  # one process: candidates reach the GPU in the order proposed
        yield compile_pool


# -- warm start -------------------------------------------------------------------------------


def test_warm_start_takes_the_best_configs_of_the_nearest_tuned_shapes_of_the_family(tmp_path):
    space = SearchSpace(TINY)
    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    near, far, other_dtype = GemmProblem(64, 64, 64), GemmProblem(2048, 2048, 2048), GemmProblem(96, 64, 64, "f16")
    config = lambda rows, cols, skew: space.config({"ROWS": rows, "COLS": cols, "UNROLL": 1, "SKEW": skew})  # noqa: E731
    for ms, skew in ((0.3, 1), (0.1, 2), (0.2, 3), (0.4, 0)):
        store.add_measurement(ENV, near, config(2, 1, skew), space.template_hash, measurement(ms, near), None)
    store.add_measurement(ENV, far, config(1, 4, 1), space.template_hash, measurement(1.0, far), None)
    store.add_measurement(ENV, other_dtype, config(4, 1, 1), space.template_hash, measurement(0.01, other_dtype), None)
    closer_but_other_family = GemmProblem(100, 64, 64)
    store.add_measurement(ENV, closer_but_other_family, dataclasses.replace(config(1, 2, 1), family="sgemm"),
                          "other", measurement(0.01, closer_but_other_family), None)

    problem = GemmProblem(128, 64, 64)
    one = warm_start_configs(store, space, KEY, problem, neighbours=1, per_neighbour=3)
    assert one == [config(2, 1, 2), config(2, 1, 3), config(2, 1, 1)]  # the nearest tuned shape's best three
    two = warm_start_configs(store, space, KEY, problem, neighbours=2, per_neighbour=3)
    assert two == one + [config(1, 4, 1)]  # then the next nearest's
    assert warm_start_configs(store, space, "h100", problem) == []  # another GPU's results: none


def test_a_sweep_tries_the_neighbours_best_configs_first_and_skips_infeasible_ones(tmp_path, worker, pool):
    space = SearchSpace(TINY)
    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    neighbour = GemmProblem(64, 64, 64)
    infeasible = space.config({"ROWS": 8, "COLS": 8, "UNROLL": 1, "SKEW": 1})  # 64 outputs per thread
    assert not space.check(infeasible, GPU, neighbour).feasible
    best = [space.config({"ROWS": 1, "COLS": 2, "UNROLL": 1, "SKEW": skew}) for skew in (3, 1)]
    assert not {config.name for config in best} & {seed.name for seed in space.seeds}
    for ms, config in ((0.05, infeasible), (0.1, best[0]), (0.2, best[1])):
        store.add_measurement(ENV, neighbour, config, space.template_hash, measurement(ms, neighbour), None)

    problem = GemmProblem(128, 64, 64)
    result = Sweep(space, GPU, [problem], store, worker, pool,
                   SweepSettings(trials=6, top=0, neighbours=1, search=SearchSettings(jobs=1))).run()
    assert result.complete and result.shapes[0].warm_start == 3 and result.shapes[0].evaluated == 6

    trials = optuna.load_study(study_name=study_name(space, KEY, problem), storage=store.url).get_trials()
    first = [t.user_attrs["config"] for t in sorted(trials, key=lambda t: t.number) if evaluated_on_gpu(t)]
    assert first[:2] == [config.name for config in best]  # before the space's seeds
    assert first[2:5] == [seed.name for seed in space.seeds]
    assert infeasible.name not in first


# -- the command line: searches, cross measurement, rerun ---------------------------------------


def test_sweep_command_searches_each_shape_then_times_the_best_configs_at_every_shape(tmp_path):
    url = f"sqlite:///{tmp_path}/results.db"
    shapes = shape_file(tmp_path, "64x64x64", "128x64x64", "64x128x32")
    problems = [GemmProblem(64, 64, 64), GemmProblem(128, 64, 64), GemmProblem(64, 128, 32)]
    space = SearchSpace(TINY)
    first = autotune(*sweep_args(shapes, url, trials=8, top=5))
    assert first.returncode == 0, first.stderr

    names = [study_name(space, KEY, problem) for problem in problems]
    assert evaluated_per_study(url) == {name: 8 for name in names}  # the studies autotune search would use
    for problem in problems:  # a line per shape, then the summary table
        assert f"{problem.shape}: best " in first.stderr and "x cuBLAS, 8 evaluations" in first.stderr
        assert any(line.startswith(problem.shape) and "tiny_" in line for line in first.stdout.splitlines())
    assert "[shapes 3/3]" in first.stderr and "ETA" in first.stderr

    results = kernel_results(url)
    cross = [(name, (m, n, k)) for name, m, n, k, study in results if study.endswith("/cross")]
    searched = collections.defaultdict(set)  # what each shape's own search measured
    for name, m, n, k, study in results:
        if not study.endswith("/cross"):
            searched[(m, n, k)].add(name)
    top = []
    storage = optuna.storages.RDBStorage(url)
    for name in names:
        trials = storage.get_all_trials(storage.get_study_id_from_name(name))
        measured = sorted((t for t in trials if t.state == optuna.trial.TrialState.COMPLETE), key=lambda t: t.values[0])
        top += [t.user_attrs["config"] for t in measured[:5] if t.user_attrs["config"] not in top]
    expected = {(config, (p.m, p.n, p.k)) for config in top for p in problems if config not in searched[(p.m, p.n, p.k)]}
    assert expected and sorted(cross) == sorted(expected)  # each missing pair once, as an ordinary result row
    assert f"{len(expected)} (config, shape) pairs measured" in first.stdout

    at = (128, 64, 64)
    query = autotune("query", "--gpu", KEY, "--shape", "128x64x64", "--db", url, "--limit", "100", "--json")
    assert query.returncode == 0, query.stderr
    assert {row["config"] for row in json.loads(query.stdout)} == searched[at] | {c for c, s in cross if s == at}

    again = autotune(*sweep_args(shapes, url, trials=8, top=5))
    assert again.returncode == 0, again.stderr
    assert again.stderr.count("(done earlier)") == 3
    assert "0 (config, shape) pairs measured" in again.stdout
    assert kernel_results(url) == results  # nothing searched or measured again
    assert evaluated_per_study(url) == {name: 8 for name in names}


def test_cross_from_times_other_shapes_best_configs_there_and_never_searches_them(tmp_path):
    url = f"sqlite:///{tmp_path}/results.db"
    train = shape_file(tmp_path, "64x64x64", "128x64x64")
    held = tmp_path / "held.txt"
    held.write_text("96x64x64\n")
    assert autotune(*sweep_args(train, url, trials=6, top=0)).returncode == 0
    before = kernel_results(url)
    studies = set(evaluated_per_study(url))
    second = autotune(*sweep_args(held, url, trials=6, top=2), "--cross-from", str(train))
    assert second.returncode == 0, second.stderr
    assert "96x64x64: not searched; cuBLAS" in second.stderr

    storage = optuna.storages.RDBStorage(url)
    top = set()
    for problem in (GemmProblem(64, 64, 64), GemmProblem(128, 64, 64)):
        trials = storage.get_all_trials(storage.get_study_id_from_name(study_name(SearchSpace(TINY), KEY, problem)))
        measured = sorted((t for t in trials if t.state == optuna.trial.TrialState.COMPLETE), key=lambda t: t.values[0])
        top |= {t.user_attrs["config"] for t in measured[:2]}
    after = kernel_results(url)
    held_rows = [(name, study) for name, m, n, k, study in after if (m, n, k) == (96, 64, 64)]
    assert all(study.endswith("/cross") for _, study in held_rows)  # measured, never searched
    assert {name for name, _ in held_rows} == top  # the training shapes' best, there
    assert set(evaluated_per_study(url)) == studies  # no study of the held-out shape
    assert [row for row in after if (row[1], row[2], row[3]) != (96, 64, 64)] == before  # training shapes untouched
    store = ResultStore(url)
    assert store.cublas_reference(KEY, GemmProblem(96, 64, 64)) is not None  # cuBLAS timed there, for the table


def test_cross_from_needs_configs_to_time(tmp_path):
    shapes = shape_file(tmp_path, "64x64x64")
    result = autotune(*sweep_args(shapes, f"sqlite:///{tmp_path}/results.db", trials=6, top=0),
                      "--cross-from", str(shapes))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("autotune: error: invalid --top 0: expected a number >= 1")


def test_an_interrupted_sweep_reruns_to_exactly_its_trials_per_shape(tmp_path):
    url = f"sqlite:///{tmp_path}/results.db"
    shapes = shape_file(tmp_path, "64x64x64", "128x64x64", "64x128x32")
    args = sweep_args(shapes, url, trials=8, top=0)
    process = autotune_process(*args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as from a terminal
    deadline = time.monotonic() + 120
    for line in process.stderr:  # the first shape's line: the second shape's search starts
        assert time.monotonic() < deadline, "no progress line"
        if line.startswith("64x64x64: best"):
            break
    else:
        pytest.fail(f"the sweep ended before it could be interrupted: {process.communicate()}")
    process.send_signal(signal.SIGINT)  # at once: the next shapes' searches (a second or less with warm caches) are
    # cut in their opening or before they start, never after they end
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "run the same command again to resume" in err
    cut_short = evaluated_per_study(url)
    finished = sum(count == 8 for count in cut_short.values())
    assert 1 <= finished < 3 and sum(cut_short.values()) < 24, cut_short  # cut mid-search or between searches
    storage = optuna.storages.RDBStorage(url)
    assert not [t for s in storage.get_all_studies() for t in storage.get_all_trials(s._study_id)
                if t.state == optuna.trial.TrialState.RUNNING]  # its slots were given back

    rerun = autotune(*args)
    assert rerun.returncode == 0, rerun.stderr
    assert "64x64x64: best" in rerun.stderr and rerun.stderr.count("(done earlier)") == finished
    assert sorted(evaluated_per_study(url).values()) == [8, 8, 8]


@pytest.mark.parametrize("change, fragments", [
    ({"--shapes": "llama"}, ["--shapes 'llama'", "llm", "llm-held-out", "grid"]),
    ({"--shapes": "BAD_FILE"}, ["shapes.txt:3", "'12x34'", "MxNxK"]),
    ({"--family": "nope"}, ["'nope'"]),
    ({"--dtype": "f64"}, ["--dtype 'f64'", "f32", "f16"]),
    ({"--family": "hgemm_wmma"}, ["--family 'hgemm_wmma'", "f32"]),
    ({"--top": "-1"}, ["--top -1", ">= 0"]),
    ({"--trials": "0"}, ["--trials 0", "> 0"]),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, change, fragments):
    path = tmp_path / "shapes.txt"
    path.write_text("64\n128x64x64\n12x34\n")
    values = {"--gpu": "h200", "--shapes": "llm", "--backend": "fake", "--db": f"sqlite:///{tmp_path}/r.db", **change}
    if values["--shapes"] == "BAD_FILE":
        values["--shapes"] = str(path)
    result = autotune("sweep", *(item for pair in values.items() for item in pair))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert all(fragment in lines[0] for fragment in fragments), lines[0]
    assert not (tmp_path / "r.db").exists()


def test_eta_comes_from_the_pace_of_this_runs_evaluations():
    progress = SweepProgress(shapes_done=1, shapes_total=4, evaluated=30, target=100, measured_now=0, elapsed_s=5.0)
    assert progress.eta_s is None  # nothing measured in this run yet (the 30 are an earlier run's)
    progress.measured_now, progress.elapsed_s = 10, 20.0
    assert progress.eta_s == pytest.approx(20.0 / 10 * 70)


@pytest.mark.gpu
def test_on_the_gpu_each_cubin_verifies_at_the_other_shapes(tmp_path):
    """Cubins do not depend on the shape: the best kernels of one shape pass verification at the others."""
    from autotune.gpu.worker import GpuWorker
    from autotune.gpu_specs import GPUS
    from autotune.kernel.compile import CompilePool

    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    problems = [GemmProblem(256, 192, 64), GemmProblem(130, 320, 96), GemmProblem(64, 64, 200)]
    with GpuWorker() as worker, CompilePool(2) as compile_pool:
        gpu = GPUS[worker.environment().gpu_key]
        result = Sweep(SearchSpace(TINY), gpu, problems, store, worker, compile_pool,
                       SweepSettings(trials=8, top=4, search=SearchSettings(jobs=2, repeats=5))).run()
    assert result.complete and [outcome.evaluated for outcome in result.shapes] == [8, 8, 8]
    assert result.cross.measured > 0 and result.cross.failed == 0
    with sqlalchemy.create_engine(store.url).connect() as connection:
        errors = connection.execute(sqlalchemy.text(
            "SELECT max_error FROM measurements WHERE study LIKE '%/cross'")).scalars().all()
    assert len(errors) == result.cross.measured and max(errors) <= 1.0
