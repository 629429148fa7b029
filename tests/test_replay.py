"""The replay benchmark without a GPU: a synthetic table of the tiny family, its backend and compile pool,
and whole searches replayed over it (bench/replay.py), TPE, random and genetic."""

import dataclasses
import functools
import hashlib
import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))

import brute_force  # noqa: E402
import replay  # noqa: E402

from autotune.errors import FailureClass  # noqa: E402
from autotune.gpu.race import RaceStage  # noqa: E402
from autotune.gpu.replay_backend import ReplayBackend, ReplayTable, ReplayTableError  # noqa: E402
from autotune.gpu.tasks import CublasTask, KernelTask  # noqa: E402
from autotune.gpu_specs import gpu_spec  # noqa: E402
from autotune.kernel.build import compile_result, finish_build  # noqa: E402
from autotune.kernel.render import render  # noqa: E402
from autotune.problem import GemmProblem  # noqa: E402
from autotune.records import Failure, Failure as GpuFailure, Measurement, Resources, Timing  # noqa: E402,F811
from autotune.search.replay_pool import ReplayPool  # noqa: E402
from autotune.space.family import SearchSpace  # noqa: E402
from autotune.space.survey import feasible_configs  # noqa: E402

TINY = Path(__file__).parent / "data" / "tiny.toml"  # 160 feasible configs at 64^3 on the H200
H200, PROBLEM = gpu_spec("h200"), GemmProblem(64, 64, 64)
CUBLAS_MS = 0.004
RESOURCES = Resources(registers=40, smem_static=0, smem_dynamic=0, spill_stores=0, spill_loads=0, stack_frame=0)


def _fraction(name: str) -> float:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little") / 2**32


def _ms(config) -> float:
    """A landscape TPE can learn: more outputs per thread and more unrolling are faster, plus noise."""
    return 0.01 * (1.6 - 0.03 * config["ROWS"] * config["COLS"] - 0.02 * config["UNROLL"]) * (1 + 0.1 * _fraction(config.name))


@pytest.fixture(scope="module")
def table_path(tmp_path_factory):
    """Every feasible tiny config but a few: some failed to compile, some gave wrong answers, the rest timed."""
    space = SearchSpace(TINY)
    configs = feasible_configs(space, H200, PROBLEM)
    sub = brute_force.SubSpace(str(TINY), "h200", PROBLEM, {})
    lines = [brute_force.problem_row("tiny64", sub, {}), {"kind": "cublas", "ms": CUBLAS_MS},
             {"kind": "cublas", "ms": CUBLAS_MS * 1.5}, {"kind": "cublas", "ms": CUBLAS_MS * 0.5}]
    for i, config in enumerate(configs):
        if i % 40 == 39:
            continue  # not in the table
        if i % 23 == 5:
            lines.append(brute_force.config_row(config, Failure("compile_error", "error: no"), "build", None, 0.4))
        elif i % 17 == 3:
            lines.append(brute_force.config_row(config, Failure("wrong_answer", "off by 2"), "gpu", RESOURCES, 0.4))
        else:
            ms = _ms(config)
            timing = Timing(ms, ms, ms, ms, ms, (ms,))
            lines.append(brute_force.config_row(config, Measurement(timing, 1.0, 0.0, resources=RESOURCES), "gpu",
                                                RESOURCES, 0.4))
    path = tmp_path_factory.mktemp("replay") / "replay_tiny64.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _task(entry: str, race=()) -> KernelTask:
    return KernelTask(b"", entry, (1, 1, 1), (256, 1, 1), 0, PROBLEM, 0, 2, 10, race=race)


def test_the_table_reads_back_what_brute_force_wrote(table_path):
    table = ReplayTable.load(table_path)
    assert table.problem == PROBLEM and table.gpu == "h200" and table.cublas_ms == CUBLAS_MS  # the median run
    assert len(table.rows) == 156 and len(table.measured) < 156
    name, ms = table.best
    assert ms == min(table.measured.values()) and table.measured[name] == ms


def test_the_backend_answers_times_failures_and_unknown_configs_as_the_table_says(table_path):
    backend = ReplayBackend(table=str(table_path))
    table = backend.table
    name, ms = table.best
    answer = backend.run(_task(name))
    assert isinstance(answer, Measurement) and answer.timing.median_ms == ms and len(answer.timing.samples_ms) == 10
    slow = max(table.measured, key=table.measured.get)
    raced = backend.run(_task(slow, race=(RaceStage(3, ms * 1.2),)))
    assert raced.timing.median_ms == table.measured[slow] and len(raced.timing.samples_ms) == 3  # stopped at its stage
    wrong = next(row for row in table.rows.values() if row.failure == "wrong_answer")
    assert backend.run(_task(wrong.config)) == GpuFailure("wrong_answer", "off by 2")
    missing = backend.run(_task("tiny_rows9"))
    assert isinstance(missing, Failure) and missing.failure_class == FailureClass.LAUNCH_ERROR.value
    assert backend.run(CublasTask(PROBLEM, 0, 2, 10)).timing.median_ms == CUBLAS_MS
    assert "replay" in backend.hello()["name"] and backend.hello()["simulated"]


def test_the_pool_builds_from_the_table_and_fails_what_failed_to_build(table_path):
    table, space = ReplayTable.load(table_path), SearchSpace(TINY)
    configs = {c.name: c for c in feasible_configs(space, H200, PROBLEM)}
    broken = next(row for row in table.rows.values() if row.failure == "compile_error")
    fine = table.best[0]
    huge = dataclasses.replace(table.rows[fine], resources=dataclasses.replace(RESOURCES, registers=300))
    table.rows[huge.config] = huge
    with ReplayPool(table, jobs=2) as pool:
        built = finish_build(space, configs[fine], compile_result(pool.submit(render(space, configs[fine], H200))),
                             H200, PROBLEM)
        assert isinstance(built, Failure) and built.failure_class == "resource"  # ptxas's report fails it again
        table.rows[fine] = dataclasses.replace(huge, resources=RESOURCES)
        built = finish_build(space, configs[fine], compile_result(pool.submit(render(space, configs[fine], H200))),
                             H200, PROBLEM)
        assert built.entry == fine and built.resources.registers == 40
        failed = finish_build(space, configs[broken.config],
                              compile_result(pool.submit(render(space, configs[broken.config], H200))), H200, PROBLEM)
        assert failed == Failure("compile_error", "error: no")


def test_a_bad_table_is_one_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"kind": "cublas", "ms": -1}\n')
    with pytest.raises(ReplayTableError, match="line 1: ms -1: expected a positive number"):
        ReplayTable.load(path)
    path.write_text('{"kind": "cublas", "ms": 1}\n')
    with pytest.raises(ReplayTableError, match="no problem line"):
        ReplayTable.load(path)


def test_the_report_counts_evaluations_to_within_3_percent_and_its_percentiles():
    times = {"a": 1.10, "b": 1.02, "c": 1.0, "d": 1.5}
    assert replay.evaluations_to(["d", "x", "a", "b", "c"], times, 1.03) == 4  # x failed: an evaluation still
    assert replay.evaluations_to(["d", "a"], times, 1.03) is None
    runs = [replay.Run("warm", "tpe", seed, 20, to, to == 3, None, 0.0)
            for seed, to in enumerate([3, 10, None, 5, 7])]
    (row,) = replay.summarize(runs)
    assert row["median_to_within"] == 7 and row["p90_to_within"] is None  # 3 5 7 10 never
    assert row["reached"] == 0.8 and row["found_best"] == 0.2
    (row,) = replay.summarize(runs[:2] + runs[3:])
    assert row["median_to_within"] == 5 and row["p90_to_within"] == 10 and not replay.meets_targets(row)


def test_searches_replayed_over_the_table_end_to_end(table_path, tmp_path):
    runs = replay.replay(table_path, tmp_path, seeds=[0, 1], evaluations=16, compiles=["warm"],
                         samplers=["tpe", "random"], jobs=2, gpu_time=False)
    table = ReplayTable.load(table_path)
    best_name, best_ms = table.best
    assert [(run.sampler, run.seed) for run in runs] == [("tpe", 0), ("tpe", 1), ("random", 0), ("random", 1)]
    for run in runs:
        assert run.evaluations == len(run.order) == 16 and len(set(run.order)) == 16
        first = next((i for i, name in enumerate(run.order, 1) if table.measured.get(name, math.inf) <= best_ms * 1.03),
                     None)
        assert run.to_within == first
        assert run.found_best == (best_name in run.order)
    assert runs[0].order[:3] == runs[2].order[:3] == tuple(seed.name for seed in SearchSpace(TINY).seeds)
    summary = json.loads((tmp_path / "replay_summary.json").read_text())
    assert [(row["compiles"], row["sampler"], row["searches"]) for row in summary["settings"]] == [
        ("warm", "tpe", 2), ("warm", "random", 2)]
    orders = [json.loads(line) for line in (tmp_path / "replay_orders.jsonl").read_text().splitlines()]
    assert [tuple(line["order"]) for line in orders] == [run.order for run in runs]
    assert "tpe" in (tmp_path / "replay_summary.txt").read_text()


def test_a_genetic_search_replays_past_its_opening(table_path, tmp_path):
    (run,) = replay.replay(table_path, tmp_path, seeds=[0], evaluations=24, compiles=["warm"], samplers=["genetic"],
                           jobs=2, gpu_time=False)
    assert run.sampler == "genetic" and run.evaluations == len(set(run.order)) == 24
    assert "genetic" in (tmp_path / "replay_summary.txt").read_text()


def test_a_replay_without_seeds_opens_with_none_of_them(table_path, tmp_path):
    seeds = {seed.name for seed in SearchSpace(TINY).seeds}
    (run,) = replay.replay(table_path, tmp_path, seeds=[0], evaluations=8, compiles=["warm"], samplers=["random"],
                           jobs=2, gpu_time=False, with_seeds=False)
    assert run.evaluations == 8 and not seeds & set(run.order[:3])
    assert json.loads((tmp_path / "replay_summary.json").read_text())["with_seeds"] is False
    assert "no seeds in the opening" in (tmp_path / "replay_summary.txt").read_text()


def test_the_backend_is_a_worker_backend(table_path):
    from autotune.gpu.worker import GpuWorker

    with GpuWorker(backend=functools.partial(ReplayBackend, table=str(table_path))) as worker:
        assert worker.environment().gpu_key.endswith("-fake")
        assert worker.run(CublasTask(PROBLEM, 0, 2, 10), timeout_s=30).timing.median_ms == CUBLAS_MS


def test_an_xz_table_reads_as_its_text(table_path, tmp_path):
    import lzma

    packed = tmp_path / "table.jsonl.xz"
    packed.write_bytes(lzma.compress(table_path.read_bytes()))
    assert ReplayTable.load(packed).measured == ReplayTable.load(table_path).measured
    packed.write_bytes(b"not xz")
    with pytest.raises(ReplayTableError, match="cannot read replay table"):
        ReplayTable.load(packed)


def test_a_replay_searches_the_knob_values_its_table_holds(table_path, tmp_path):
    """A space file widened after its table was measured (a value no row holds) is searched as measured."""
    lines = [json.loads(line) for line in table_path.read_text().splitlines()]
    narrow = tmp_path / "narrow.jsonl"
    narrow.write_text("".join(json.dumps(line) + "\n" for line in lines
                              if line["kind"] != "config" or line["knobs"]["SKEW"] != 3))
    table = ReplayTable.load(narrow)
    space = replay.table_space(table, SearchSpace(TINY))
    assert space.knobs["SKEW"] == (0, 1, 2) and space.knobs["ROWS"] == SearchSpace(TINY).knobs["ROWS"]
    assert space.template_hash == SearchSpace(TINY).template_hash  # the family's configs, names and studies
    (run,) = replay.replay(narrow, tmp_path / "out", seeds=[0], evaluations=24, compiles=["warm"], samplers=["tpe"],
                           jobs=2, gpu_time=False)
    assert run.evaluations == 24 and all(name in table.rows for name in run.order)
