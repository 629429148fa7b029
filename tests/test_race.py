"""Race stages: where a clearly slower candidate's timing stops."""

import pytest

from autotune.gpu.race import RaceStage, lost_race, race_stages


def test_stages_are_margins_over_the_best():
    assert race_stages(2.0, ((1, 1.5), (10, 1.05))) == (RaceStage(1, 3.0), RaceStage(10, 2.1))


def test_a_race_is_lost_only_at_a_stage_with_the_median_over_its_limit():
    race = (RaceStage(1, 3.0), RaceStage(3, 2.4))
    assert lost_race([3.1], race)
    assert not lost_race([2.9], race)
    assert lost_race([2.0, 2.5, 9.0], race)  # the median, 2.5, is over 2.4
    assert not lost_race([2.0, 2.3, 9.0], race)  # one slow launch does not lose it
    assert not lost_race([9.0, 9.0], race)  # no stage stops at two launches
    assert not lost_race([], race) and not lost_race([9.0], ())


def test_a_stage_needs_a_launch():
    with pytest.raises(ValueError, match="at least 1 launch"):
        RaceStage(0, 1.0)
