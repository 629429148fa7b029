from autotune.db import ResultStore
from autotune.problem import GemmProblem
from autotune.records import Environment, Measurement, Timing
from autotune.select import build, held_out
from autotune.space import Config

ENV = Environment("h200", "NVIDIA H200", "sm_90", "580", "13.0", "13.0", "14.2.0")


def _m(problem, ms):
    return Measurement(Timing(ms, ms, ms, ms, ms, (ms,)), problem.tflops(ms), 0.1)


def _config(name_value):
    return Config("sgemm", (("BM", name_value),))


def _square(n):
    return GemmProblem(n, n, n)


def test_nearest_shape_and_held_out_quality(tmp_path):
    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    small, mid, big = _square(1024), _square(2048), _square(4096)
    # config 64 wins at 1024; config 128 wins at 2048 and 4096; 128 was also timed at 1024
    store.add_measurement(ENV, small, _config(64), "h", _m(small, 1.0), "s")
    store.add_measurement(ENV, small, _config(128), "h", _m(small, 1.25), "s")
    store.add_measurement(ENV, mid, _config(128), "h", _m(mid, 5.0), "s")
    store.add_measurement(ENV, big, _config(128), "h", _m(big, 40.0), "s")
    store.add_measurement(ENV, big, _config(256), "h", _m(big, 50.0), "s")

    table, times = build(store, "h200", "f32")
    assert [e.problem for e in table.entries] == [small, mid, big]
    assert table.pick(_square(1100)).problem == small
    assert table.pick(GemmProblem(3000, 3000, 3000)).problem == big
    assert table.pick(mid, exclude=mid).problem == big  # equally far: the larger problem wins
    assert table.pick(_square(64), exclude=None).config_name == _config(64).name

    report = {h.problem: h for h in held_out(table, times)}
    assert report[small].config_name == _config(128).name and report[small].fraction_of_best == 1.0 / 1.25
    assert report[mid].fraction_of_best == 1.0 and report[big].fraction_of_best == 1.0
    assert build(store, "h200", "f16")[0].entries == ()


def test_a_pick_never_measured_there_is_unknown(tmp_path):
    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    store.add_measurement(ENV, _square(512), _config(32), "h", _m(_square(512), 1.0), "s")
    store.add_measurement(ENV, _square(4096), _config(256), "h", _m(_square(4096), 9.0), "s")
    table, times = build(store, "h200", "f32")
    report = held_out(table, times)
    assert all(h.fraction_of_best is None and h.picked_from is not None for h in report)
