import dataclasses
import json

import pytest
from conftest import assert_one_line_error, autotune

from autotune.gpu_specs import gpu_spec
from autotune.problem import GemmProblem
from autotune.records import Environment, Measurement, Timing
from autotune.results import ResultStore
from autotune.select.selection import build, build_table, held_out, judge, quality
from autotune.space.family import load_space

H200 = gpu_spec("h200")
ENV = Environment("h200", "NVIDIA H200", "sm_90", "580", "13.0", "13.0", "14.2.0")


def _m(problem, ms):
    return Measurement(Timing(ms, ms, ms, ms, ms, (ms,)), problem.tflops(ms), 0.1)


_CONFIG_KEYS = (1, 2, 3, 16, 32, 48, 64, 128, 256, 999)


def _config(key):
    """A distinct sgemm config per key, all of one tile geometry (so a time scales alike for each of them)."""
    space = load_space("sgemm")
    seed = space.seeds[0].as_dict()
    variants = [space.config(dict(seed, GROUP_M=g, PAD_A=a, PAD_B=b, LEAN_BUILD=lean))
                for g in (1, 8) for a in (0, 4) for b in (0, 4) for lean in (0, 1)]
    return variants[_CONFIG_KEYS.index(key)]


def _square(n):
    return GemmProblem(n, n, n)


def _add(store, problem, config, ms):
    store.add_measurement(ENV, problem, config, "h", _m(problem, ms), "s")


def _cublas(store, problem, ms):
    store.add_measurement(ENV, problem, None, None, _m(problem, ms), "s")


def _shape(problem):
    return problem.m, problem.n, problem.k


def _without(table, problem):
    """``table`` without the rule of ``problem``'s shape."""
    return dataclasses.replace(table, rules=tuple(r for r in table.rules if r.shape != _shape(problem)))


def test_nearest_shape_and_leave_one_out_quality(tmp_path):
    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    small, mid, big = _square(1024), _square(2048), _square(4096)
    # config 64 wins at 1024; config 128 wins at 2048 and 4096; 128 was also timed at 1024
    _add(store, small, _config(64), 1.0)
    _add(store, small, _config(128), 1.25)
    _add(store, mid, _config(128), 5.0)
    _add(store, big, _config(128), 40.0)
    _add(store, big, _config(256), 50.0)

    selection = build(store, H200, "h200", "f32")
    table = selection.table
    assert [r.shape for r in table.rules] == [_shape(small), _shape(mid), _shape(big)]
    assert [k.name for k in table.kernels] == [_config(128).name, _config(64).name]  # 128 covers every shape
    assert table.pick(*_shape(_square(1100))).rule.shape == _shape(small)
    assert table.pick(3000, 3000, 3000).rule.shape == _shape(big)
    assert _without(table, mid).pick(*_shape(mid)).rule.shape == _shape(big)  # equally far: the larger problem wins
    assert table.pick(64, 64, 64).kernel == _config(64).name

    report = {h.problem: h for h in held_out(selection)}
    assert report[small].config_name == _config(128).name and report[small].fraction_of_best == 1.0 / 1.25
    assert report[mid].fraction_of_best == 1.0 and report[big].fraction_of_best == 1.0
    assert build(store, H200, "h200", "f16").table.rules == ()


def test_a_pick_never_measured_there_is_unknown(tmp_path):
    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    _add(store, _square(512), _config(32), 1.0)
    _add(store, _square(4096), _config(256), 9.0)
    report = held_out(build(store, H200, "h200", "f32"))
    assert all(h.fraction_of_best is None and h.picked_from is not None for h in report)
    assert quality(report).measured == 0 and quality(report).unmeasured == 2


def test_the_cap_makes_a_shape_take_a_slower_chosen_kernel(tmp_path):
    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    shapes = [GemmProblem(m, 4096, 4096) for m in (16, 64, 256, 1024)]
    for i, problem in enumerate(shapes):
        _add(store, problem, _config(16 * (i + 1)), 1.0)  # each shape's own best
        _add(store, problem, _config(999), 1.25)  # one config measured everywhere
    table = build(store, H200, "h200", "f32", max_kernels=2).table
    assert len(table.kernels) == 2 and table.kernels[0].name == _config(999).name
    assert sorted(r.fraction_of_best for r in table.rules) == [0.8, 0.8, 0.8, 1.0]
    assert all(r.best_ms == 1.0 and r.ms in (1.0, 1.25) for r in table.rules)


LAYER = (4096, 4096)
TRAIN = [GemmProblem(64, *LAYER), GemmProblem(1024, *LAYER)]
HELD = [GemmProblem(128, *LAYER), GemmProblem(2048, *LAYER), GemmProblem(4096, *LAYER), GemmProblem(1536, *LAYER)]


def _held_out_fixture(store):
    """Training shapes 64 (config 1 best) and 1024 (config 2 best); held out: 128 (nearest 64: config 1 at 1.5,
    best 1.2, cuBLAS 1.0), 2048 (nearest 1024: config 2 not measured there), 4096 (nothing measured) and 1536
    (nearest 1024: config 2 at 3.0, best 1.5, cuBLAS 3.0)."""
    a, b, c = _config(1), _config(2), _config(3)
    _add(store, TRAIN[0], a, 1.0)
    _add(store, TRAIN[0], b, 2.0)
    _add(store, TRAIN[1], b, 2.0)
    _add(store, TRAIN[1], a, 4.0)
    _cublas(store, TRAIN[1], 2.5)
    _add(store, HELD[0], a, 1.5)
    _add(store, HELD[0], c, 1.2)  # c is fastest here, but held-out shapes never build the table
    _cublas(store, HELD[0], 1.0)
    _add(store, HELD[1], c, 3.0)
    _add(store, HELD[3], b, 3.0)
    _add(store, HELD[3], c, 1.5)
    _cublas(store, HELD[3], 3.0)


def test_held_out_report_numbers(tmp_path):
    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    _held_out_fixture(store)
    shapes = [(p.m, p.n, p.k) for p in HELD]
    selection = build(store, H200, "h200", "f32", hold_out=shapes)
    assert selection.training == ((64, 4096, 4096), (1024, 4096, 4096))
    assert {k.name for k in selection.table.kernels} == {_config(1).name, _config(2).name}
    report = judge(selection, shapes)
    first, second, third, fourth = report
    assert (first.config_name, first.pick_ms, first.best_ms, first.cublas_ms) == (_config(1).name, 1.5, 1.2, 1.0)
    assert first.fraction_of_best == pytest.approx(0.8) and first.ratio_to_cublas == pytest.approx(1 / 1.5)
    assert second.picked_from == TRAIN[1] and second.pick_ms is None and second.best_ms == 3.0
    assert third.best_ms is None and third.picked_from == TRAIN[1]
    assert fourth.fraction_of_best == 0.5 and fourth.ratio_to_cublas == 1.0
    q = quality(report)
    assert (q.shapes, q.measured, q.unmeasured, q.no_results) == (4, 2, 1, 1)
    assert q.geomean_fraction_of_best == pytest.approx(0.4 ** 0.5) and q.worst_fraction_of_best == 0.5
    assert q.geomean_ratio_to_cublas == pytest.approx((1 / 1.5) ** 0.5)
    assert q.worst_ratio_to_cublas == pytest.approx(1 / 1.5)


def test_table_hold_out_from_the_command_line(tmp_path):
    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    _held_out_fixture(store)
    shape_file = tmp_path / "held.txt"
    shape_file.write_text("# held-out shapes\n" + "\n".join(p.shape for p in HELD) + "\n")
    db = store.url
    result = autotune("table", "--gpu", "h200", "--db", db, "--hold-out", str(shape_file), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["training_shapes"] == ["64x4096x4096", "1024x4096x4096"] and len(data["kernels"]) == 2
    assert [r["fraction_of_best"] for r in data["rules"]] == [1.0, 1.0]
    assert {k["kernel"]: k["rules"] for k in data["kernels"]} == {"k1": 1, "k2": 1}
    held = data["held_out"]
    assert held["from"] == str(shape_file)
    assert [h["pick_ms"] for h in held["shapes"]] == [1.5, None, None, 3.0]
    assert held["quality"]["measured"] == 2 and held["quality"]["worst_fraction_of_best"] == 0.5

    text = autotune("table", "--gpu", "h200", "--db", db, "--hold-out", str(shape_file))
    assert text.returncode == 0, text.stderr
    assert "2 kernels (at most 16) for 2 training shapes" in text.stdout
    assert "held-out picks measured on 2 of 4 shapes" in text.stdout and "best/pick geomean 0.632, worst 0.500" in text.stdout
    assert "1 with no measured pick; 1 with no results at all" in text.stdout
    assert "128x4096x4096" in text.stdout and "0.800x" in text.stdout

    named = autotune("table", "--gpu", "h200", "--db", db, "--hold-out", "llm-held-out")
    assert named.returncode == 0 and "held-out picks measured on 0 of" in named.stdout
    assert_one_line_error(autotune("table", "--gpu", "h200", "--db", db, "--hold-out", "nope"),
                          "--hold-out 'nope'", "llm-held-out")
    assert_one_line_error(autotune("table", "--gpu", "h200", "--db", db, "--max-kernels", "0"), "--max-kernels")


def _sgemm_configs(count):
    """``count`` distinct valid sgemm configs (the seeds with other GROUP_M and PAD_A values)."""
    space = load_space("sgemm")
    configs = {}
    for seed in space.seeds:
        for group_m in (1, 8):
            for pad_a in (0, 4):
                config = space.config(dict(seed.as_dict(), GROUP_M=group_m, PAD_A=pad_a))
                configs[config.name] = config
    assert len(configs) >= count
    return [configs[name] for name in sorted(configs)][:count]


def test_an_export_of_twenty_tuned_shapes_has_at_most_sixteen_kernels(tmp_path):
    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    configs = _sgemm_configs(21)
    shapes = [GemmProblem(m, n, 4096) for m in (16, 64, 256, 1024, 4096) for n in (1024, 2048, 4096, 8192)]
    for problem, own in zip(shapes, configs):
        _add(store, problem, own, 1.0)
        _add(store, problem, configs[-1], 1.1)  # measured at every shape
        _cublas(store, problem, 1.05)
    table = build_table(store, ("f32",), gpu="h200")
    f32 = table.dtypes["f32"]
    assert len(f32.rules) == 20 and len(f32.kernels) == 16
    assert {r.kernel for r in f32.rules} == {k.name for k in f32.kernels}
    assert sum(r.ms == 1.1 for r in f32.rules) == 5 and all(r.best_ms == 1.0 for r in f32.rules)

    result = autotune("export", "--gpu", "h200", "--db", store.url, "--dtype", "f32", "--format", "json",
                      "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    data = json.loads((tmp_path / "out" / "autotune_table_h200.json").read_text())
    assert data["schema_version"] == 2
    assert len(data["dtypes"]["f32"]["kernels"]) == 16 and len(data["dtypes"]["f32"]["rules"]) == 20


def _seed(**knobs):
    space = load_space("sgemm")
    return next(s for s in space.seeds if all(s.as_dict()[k] == v for k, v in knobs.items()))


def test_a_shape_gets_the_kernel_whose_time_scales_best_from_the_nearest_tuned_shape(tmp_path):
    # On 132 SMs, 1024x2048 is 128 blocks of 128x128 (one turn) and 512 of 64x64 (4 turns); 1152x2048 is
    # 144 (2 turns) and 576 (5 turns). The 128x128 kernel, fastest at 1024, doubles; the 64x64 one grows 5/4.
    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    large, small = _seed(BM=128, BN=128, BK=8), _seed(BM=64, BN=64)
    tuned, near, far = GemmProblem(1024, 2048, 4096), GemmProblem(1152, 2048, 4096), GemmProblem(256, 256, 256)
    _add(store, tuned, large, 1.0)
    _add(store, tuned, small, 1.2)
    _add(store, far, small, 0.01)
    _add(store, far, large, 0.02)
    _add(store, near, large, 2.1)  # held out
    _add(store, near, small, 1.45)

    selection = build(store, H200, "h200", "f32", hold_out=[(1152, 2048, 4096)])
    table = selection.table
    assert {k.name for k in table.kernels} == {large.name, small.name}
    assert table.pick(*_shape(tuned)).kernel == large.name  # at a tuned shape: its fastest
    pick = table.pick(*_shape(near))
    assert pick.rule.shape == _shape(tuned) and pick.kernel == small.name
    assert judge(selection, [(1152, 2048, 4096)])[0].fraction_of_best == 1.0
    assert table.pick(1000, 2048, 4096).kernel == large.name  # still one turn of 128x128

    f32 = build_table(store, ("f32",), gpu="h200").dtypes["f32"]  # the exported table picks alike
    assert f32.sms == H200.sms and f32.pick(1152, 2048, 4096).kernel == small.name
    assert f32.pick(1024, 2048, 4096).kernel == large.name


def test_a_kernel_built_for_whole_tiles_is_picked_as_its_build_for_any_shape_where_tiles_are_partial(tmp_path):
    """Held-out quality judges what a table would launch: at a shape of partial tiles that is the any-shape
    build of a kernel tuned at a shape of whole ones, whose measurement there counts."""
    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    space = load_space("sgemm")
    tuned, partial = _square(4096), GemmProblem(4000, 4096, 4096)  # rows cut (N or K cut: cuBLAS)
    whole = space.for_problem(_config(128), H200, tuned)
    assert whole["WHOLE_TILES"] == 1
    _add(store, tuned, whole, 2.7)
    _add(store, partial, space.for_any_problem(whole), 2.6)

    selection = build(store, H200, "h200", "f32")
    table = selection.table
    assert table.pick(*_shape(tuned)).kernel == whole.name
    pick = _without(table, partial).pick(*_shape(partial))
    assert pick.rule.shape == _shape(tuned) and pick.kernel == space.for_any_problem(whole).name
    report = {h.problem: h for h in held_out(selection)}
    assert report[partial].config_name == space.for_any_problem(whole).name
    assert report[partial].fraction_of_best == 1.0  # measured there: its build for any shape is that shape's best


def _retimed(store, problem, config, ms):
    store.add_measurement(ENV, problem, config, "h", _m(problem, ms), "retime")


def test_a_shape_measured_again_is_judged_by_its_rounds_medians_alone(tmp_path):
    """The search's luckiest measurement of config 64 (0.8 ms, below cuBLAS's 0.9) is not what the table picks by
    once the shape was measured again: config 64's rounds (0.95, 1.0, 1.2 ms: median 1.0) lose to cuBLAS's
    (0.9, 0.92, 0.88: median 0.9), config 128's (0.85 median) beat it, and config 256, measured only by the search
    (0.5 ms), does not compete there."""
    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    shape, other = _square(1024), _square(2048)
    _add(store, shape, _config(64), 0.8)
    _add(store, shape, _config(128), 0.87)
    _add(store, shape, _config(256), 0.5)
    _cublas(store, shape, 0.7)
    for ms in (0.95, 1.0, 1.2):
        _retimed(store, shape, _config(64), ms)
    for ms in (0.85, 0.84, 0.9):
        _retimed(store, shape, _config(128), ms)
    for ms in (0.9, 0.92, 0.88):
        store.add_measurement(ENV, shape, None, None, _m(shape, ms), "retime")
    _add(store, other, _config(64), 3.0)  # a shape never measured again: its best measurements, as ever
    _add(store, other, _config(64), 2.5)
    _cublas(store, other, 4.0)

    rows = store.retimed("h200", shape)
    assert [(r.config_name, r.median_ms, r.cublas_median_ms) for r in rows] == [
        (_config(128).name, 0.85, 0.9), (_config(64).name, 1.0, 0.9)]
    assert store.retimed("h200", other) == []
    selection = build(store, H200, "h200", "f32")
    measured = selection.results.shapes[_shape(shape)]
    assert measured.ms == {_config(128).name: 0.85, _config(64).name: 1.0}
    assert measured.cublas_ms == 0.9 and measured.best_config == _config(128).name
    assert selection.results.shapes[_shape(other)].ms == {_config(64).name: 2.5}
    rule = next(r for r in selection.table.rules if r.shape == _shape(shape))
    assert rule.kernel == _config(128).name and rule.ms == 0.85 and rule.cublas_ms == 0.9


def test_retime_measures_each_shape_s_fastest_configs_in_rounds_and_the_table_then_picks_by_them(tmp_path):
    """End to end with the fake backend: a search, then `autotune retime` stores top x rounds candidates and
    rounds cuBLAS measurements per shape, once (a second run skips the shape), and bad input is one line."""
    db = f"sqlite:///{tmp_path}/r.db"
    searched = autotune("search", "--gpu", "h200", "--shape", "256", "--trials", "6", "--backend", "fake",
                        "--db", db, "--jobs", "1")
    assert searched.returncode == 0, searched.stderr
    first = autotune("retime", "--gpu", "h200", "--dtype", "f32", "--top", "2", "--rounds", "3",
                     "--backend", "fake", "--db", db, "--jobs", "1")
    assert first.returncode == 0, first.stderr
    assert "1 shapes measured again" in first.stdout
    store = ResultStore(db)
    problem = GemmProblem(256, 256, 256)
    best = [row.config_name for row in store.best("h200-fake", problem, limit=2)]
    rows = store.retimed("h200-fake", problem)
    assert sorted(row.config_name for row in rows) == sorted(best)
    with store.session() as session:
        from sqlalchemy import func, select

        from autotune.results.models import Measurement as Stored
        counts = {study: dict(session.execute(select(Stored.implementation, func.count()).where(Stored.study == study)
                                              .group_by(Stored.implementation)).all())
                  for study in ("retime", "retime-back-to-back")}
    assert counts == {"retime": {"candidate": 2 * 3, "cublas": 3}, "retime-back-to-back": {"candidate": 2 * 3, "cublas": 3}}
    flushed = {row.config_name: row.median_ms for row in store.best("h200-fake", problem, limit=2)}
    for row in rows:  # the fake backend's kernels run 1.1x slower back to back, its cuBLAS not: the worse ratio
        assert row.median_ms == pytest.approx(flushed[row.config_name] * 1.1)
        assert row.ratio_to_cublas == pytest.approx(row.cublas_median_ms / row.median_ms)
    assert store.cublas_reference("h200-fake", problem) == pytest.approx(rows[0].cublas_median_ms)
    again = autotune("retime", "--gpu", "h200", "--dtype", "f32", "--top", "2", "--backend", "fake", "--db", db,
                     "--jobs", "1")
    assert again.returncode == 0 and "0 shapes measured again" in again.stdout and "1 before" in again.stdout
    third = autotune("retime", "--gpu", "h200", "--dtype", "f32", "--top", "3", "--rounds", "2", "--backend", "fake",
                     "--db", db, "--jobs", "1")  # only the config not measured again before, with cuBLAS
    assert third.returncode == 0 and "1 shapes measured again (1 configs compiled" in third.stdout, third.stdout
    best = [row.config_name for row in store.best("h200-fake", problem, limit=3)]
    assert sorted(row.config_name for row in store.retimed("h200-fake", problem)) == sorted(best)
    for bad, value in (("--rounds", "0"), ("--top", "0"), ("--dtype", "f8"), ("--layout", "tn")):
        args = {"--dtype": "f32", "--rounds": "2", "--top": "1", "--layout": "row", bad: value}
        result = autotune("retime", "--gpu", "h200", "--backend", "fake", "--db", db,
                          *(item for pair in args.items() for item in pair))
        assert_one_line_error(result, value)
    nothing = autotune("retime", "--gpu", "h200", "--dtype", "f16", "--backend", "fake", "--db", db, "--jobs", "1")
    assert_one_line_error(nothing, "f16")


def test_the_fastest_configs_to_measure_again_are_distinct_and_built_where_they_run(tmp_path):
    """A config recorded under two template versions is one config; top counts distinct configs, fastest first."""
    from autotune.search.planned import fastest_configs

    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    shape = _square(1024)
    store.add_measurement(ENV, shape, _config(64), "old-template", _m(shape, 0.9), "s")
    _add(store, shape, _config(64), 1.0)
    _add(store, shape, _config(128), 1.1)
    _add(store, shape, _config(256), 1.2)
    chosen = fastest_configs(store, "h200", shape, shape, H200, {"sgemm"}, 2)
    assert [config.name for _, config in chosen] == [_config(64).name, _config(128).name]
    assert fastest_configs(store, "h200", shape, shape, H200, {"hgemm_wgmma"}, 2) == []  # no family of those


def test_the_configs_to_measure_again_keep_one_that_runs_twice_the_rows(tmp_path):
    """Where the fastest configs are all builds for few rows, the fastest that runs twice the shape's rows joins
    them: the table carries the shape's times that far, and would otherwise leave those rows no kernel."""
    from autotune.search.planned import fastest_configs

    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    shape = GemmProblem(4, 14336, 4096)
    gemv = load_space("sgemm_gemv")
    few = [gemv.config({"MAX_M": 4, "COL_THREADS": 32, "VEC": 4, "K_GROUPS": 8, "UNROLL": 4, "A_ROWS": 512,
                        "SPLIT_K": split, "STREAM_B": 1}) for split in (8, 4, 2)]
    for i, config in enumerate(few):
        assert gemv.check(config, H200, shape).feasible
        store.add_measurement(ENV, shape, config, gemv.template_hash, _m(shape, 0.05 + 0.001 * i), "s")
    general = load_space("sgemm").for_problem(_config(64), H200, shape)
    store.add_measurement(ENV, shape, general, load_space("sgemm").template_hash, _m(shape, 0.09), "s")
    chosen = [config for _, config in fastest_configs(store, "h200", shape, shape, H200, {"sgemm", "sgemm_gemv"}, 2)]
    assert chosen == [*few[:2], general]
    two = GemmProblem(2, 14336, 4096)  # the 4-row builds run twice its rows: nothing joins them
    for i, config in enumerate([*few, general]):
        store.add_measurement(ENV, two, config, "h", _m(two, 0.05 + 0.01 * i), "s")
    chosen = [config for _, config in fastest_configs(store, "h200", two, two, H200, {"sgemm", "sgemm_gemv"}, 2)]
    assert chosen == few[:2]


@pytest.mark.parametrize("cublas_ms", [0.1, 0.085])
def test_a_table_keeps_a_kernel_for_the_rows_it_carries_a_few_row_shape_to(tmp_path, cublas_ms):
    """A shape tuned with 4-row builds carries its times to 5-8 rows: the table keeps the fastest kernel measured
    there that runs them where it beats cuBLAS there (and only then), so 5 rows run it rather than cuBLAS."""
    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    shape = GemmProblem(4, 14336, 4096)
    gemv = load_space("sgemm_gemv")
    few = [gemv.config({"MAX_M": 4, "COL_THREADS": 32, "VEC": 4, "K_GROUPS": 8, "UNROLL": 4, "A_ROWS": 512,
                        "SPLIT_K": split, "STREAM_B": 1}) for split in (8, 4)]
    for i, config in enumerate(few):
        store.add_measurement(ENV, shape, config, gemv.template_hash, _m(shape, 0.05 + 0.001 * i), "s")
    sgemm = load_space("sgemm")
    general = sgemm.for_problem(_config(64), H200, shape)
    store.add_measurement(ENV, shape, general, sgemm.template_hash, _m(shape, 0.09), "s")
    _cublas(store, shape, cublas_ms)
    table = build(store, H200, "h200", "f32").table
    assert table.pick(4, 14336, 4096).kernel == few[0].name and not table.pick(4, 14336, 4096).cublas
    five = table.pick(5, 14336, 4096)
    if cublas_ms > 0.09:
        assert not five.cublas and five.kernel == general.name
    else:
        assert five.cublas and five.unserved and general.name not in {k.name for k in table.kernels}


def test_a_retimed_kernel_is_judged_by_the_worse_of_its_flushed_and_back_to_back_ratios(tmp_path):
    """Back to back a kernel may fall behind cuBLAS it beat flushed: its time is raised to that ratio. A better
    ratio back to back changes nothing, and no other reading (best, the cuBLAS reference) sees those rounds."""
    from autotune.results import RETIMED, RETIMED_BACK_TO_BACK

    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    shape = _square(4096)
    hot, cool = _config(64), _config(128)
    for study, hot_ms, cool_ms, cublas_ms in ((RETIMED, 1.0, 1.1, 1.2), (RETIMED_BACK_TO_BACK, 0.5, 0.4, 0.55)):
        for _ in range(3):
            store.add_measurement(ENV, shape, hot, "h", _m(shape, hot_ms), study)
            store.add_measurement(ENV, shape, cool, "h", _m(shape, cool_ms), study)
            store.add_measurement(ENV, shape, None, None, _m(shape, cublas_ms), study)
    rows = {row.config_name: row for row in store.retimed("h200", shape)}
    # hot: 1.2x cuBLAS flushed, 1.1x back to back -> its time 1.0 * 1.2 / 1.1; cool: 1.09x flushed, 1.375x back
    # to back -> its flushed time as it is
    assert rows[hot.name].median_ms == pytest.approx(1.0 * 1.2 / 1.1)
    assert rows[hot.name].ratio_to_cublas == pytest.approx(1.1)
    assert rows[cool.name].median_ms == pytest.approx(1.1)
    assert {row.config_name: row.median_ms for row in store.best("h200", shape)} == {hot.name: 1.0, cool.name: 1.1}
    assert store.cublas_reference("h200", shape) == pytest.approx(1.2)
    assert store.retimed_both_ways("h200", shape) == {hot.name, cool.name}
    store.add_measurement(ENV, shape, _config(32), "h", _m(shape, 0.9), RETIMED)  # flushed only
    assert store.retimed_both_ways("h200", shape) == {hot.name, cool.name}
