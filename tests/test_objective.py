import pytest

from autotune.errors import InputError
from autotune.search.objective import FLOOR_MARGIN, Point, make_objective, pareto_front


def test_time_objective_never_asks_for_energy():
    objective = make_objective("time")
    assert objective.directions == ("minimize",) and not objective.uses_energy
    assert not objective.wants_window(1.0)
    assert objective.values(2.5, None) == (2.5,)


def test_energy_windows_only_where_they_can_win():
    objective = make_objective("energy")
    assert objective.wants_window(1.0)  # nothing known yet
    objective.observe(1.0, 500.0, power_w=500.0)  # 1 ms at 500 W = 500 mJ
    floor = 500.0 * FLOOR_MARGIN  # 400 W
    assert objective.wants_window(1.2)  # 1.2 ms x 400 W = 480 mJ could beat 500 mJ
    assert not objective.wants_window(1.3)  # 520 mJ cannot
    assert objective.values(2.0, None) == (2.0 * floor,)  # the lower bound stands in
    assert objective.values(2.0, 700.0) == (700.0,)


def test_edp_uses_energy_times_time():
    objective = make_objective("edp")
    objective.observe(2.0, 1000.0, power_w=500.0)  # EDP 2000
    assert objective.values(2.0, 1000.0) == (2000.0,)
    assert objective.wants_window(2.2)  # 2.2 x 400 x 2.2 = 1936 < 2000
    assert not objective.wants_window(2.3)


def test_pareto_windows_for_points_the_front_does_not_dominate():
    objective = make_objective("pareto")
    assert objective.directions == ("minimize", "minimize")
    objective.observe(1.0, 700.0, power_w=700.0)  # fast, power-capped
    objective.observe(2.0, 800.0, power_w=400.0)
    # floor = 320 W: a 1.5 ms kernel could use 480 mJ, below both: measure it
    assert objective.wants_window(1.5)
    # a 3 ms kernel uses at least 960 mJ: dominated by (2.0, 800)
    assert not objective.wants_window(3.0)
    assert objective.values(1.5, 600.0) == (1.5, 600.0)


def test_pareto_front():
    points = [Point(1.0, 700.0), Point(2.0, 800.0), Point(1.5, 600.0), Point(3.0, 500.0), Point(1.0, 700.0)]
    assert pareto_front(points) == [Point(1.0, 700.0), Point(1.5, 600.0), Point(3.0, 500.0)]


def test_unknown_objective_lists_choices():
    with pytest.raises(InputError, match="'speed'.*time, energy, edp, pareto"):
        make_objective("speed")


def test_energy_before_any_window_is_an_error():
    with pytest.raises(ValueError):
        make_objective("energy").values(1.0, None)
