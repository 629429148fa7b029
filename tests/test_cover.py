import itertools
import math
import random

import pytest

from autotune.errors import InputError
from autotune.select.cover import choose


def _geomean(times, kernels):
    scores = []
    for row in times.values():
        measured = [row[k] for k in kernels if k in row]
        scores.append(min(row.values()) / min(measured) if measured else 0.0)
    return math.prod(scores) ** (1 / len(scores))


def test_one_kernel_that_is_best_everywhere_is_all_it_takes():
    times = {"s1": {"a": 1.0, "b": 2.0, "all": 1.0}, "s2": {"b": 1.0, "all": 1.0}, "s3": {"a": 3.0, "all": 3.0}}
    cover = choose(times)
    assert cover.kernels == ("all",) and set(cover.rules.values()) == {"all"} and cover.geomean == 1.0


def test_the_greedy_cover_finds_the_best_pair_of_a_small_matrix():
    times = {
        "s1": {"a": 1.0, "b": 1.5, "c": 1.1, "d": 4.0},
        "s2": {"a": 3.0, "b": 1.0, "c": 1.2, "d": 1.1},
        "s3": {"a": 1.0, "b": 2.0, "d": 2.0},
        "s4": {"b": 1.0, "c": 1.0, "d": 1.3},
    }
    cover = choose(times, max_kernels=2)
    best_pair = max(itertools.combinations("abcd", 2), key=lambda pair: _geomean(times, pair))
    assert set(cover.kernels) == set(best_pair) == {"a", "b"}
    assert cover.geomean == pytest.approx(_geomean(times, best_pair))
    assert cover.rules == {"s1": "a", "s2": "b", "s3": "a", "s4": "b"}


def test_every_shape_gets_a_measured_kernel_before_any_gets_a_faster_one():
    times = {"s1": {"x": 1.0, "y": 1.1}, "s2": {"x": 1.0, "y": 1.1}, "s3": {"y": 5.0, "z": 1.0}}
    assert choose(times, max_kernels=1).kernels == ("y",)  # slower than x, but measured at every shape
    assert choose(times, max_kernels=2).rules == {"s1": "y", "s2": "y", "s3": "z"}
    # a third place adds x; y is then no shape's fastest, so it is dropped and its place stays free
    three = choose(times, max_kernels=3)
    assert three.kernels == ("z", "x") and three.rules == {"s1": "x", "s2": "x", "s3": "z"}
    assert three.geomean == 1.0 and three.served("x") == 2


def test_the_cap_is_kept_and_what_it_leaves_out_has_no_rule():
    times = {f"s{i:02}": {f"own{i:02}": 1.0} for i in range(20)}
    cover = choose(times)
    assert len(cover.kernels) == 16 and cover.geomean == 0.0
    assert sum(rule is None for rule in cover.rules.values()) == 4
    assert all(cover.rules[s] in (None, f"own{s[1:]}") for s in times)


def test_no_config_is_added_that_improves_nothing():
    times = {"s1": {"a": 1.0, "b": 1.0, "c": 2.0}, "s2": {"a": 1.0, "c": 1.5}}
    cover = choose(times)
    assert cover.kernels == ("a",)  # b ties with a at s1 only; the tie goes to the name that sorts first


def test_the_same_matrix_in_any_order_gives_the_same_cover():
    rng = random.Random(7)
    times = {(m, 4096, 4096): {f"c{j}": rng.choice([1.0, 1.5, 2.0, 3.0]) for j in range(12) if rng.random() < 0.6}
             for m in (1, 16, 64, 256, 1024, 4096)}
    first = choose(times, max_kernels=3)
    for _ in range(5):
        shuffled_shapes = list(times.items())
        rng.shuffle(shuffled_shapes)
        shuffled = {shape: dict(rng.sample(list(row.items()), len(row))) for shape, row in shuffled_shapes}
        assert choose(shuffled, max_kernels=3) == first
    assert len(first.kernels) <= 3 and all(first.rules[s] in first.kernels for s in times if first.rules[s])


def test_empty_input_and_a_bad_cap():
    assert choose({}).kernels == () and choose({"s": {}}).rules == {"s": None}
    with pytest.raises(InputError, match="--max-kernels"):
        choose({"s": {"a": 1.0}}, max_kernels=0)


def test_a_shape_with_a_floor_is_never_uncovered_and_is_covered_only_where_that_gains_the_most():
    """A floor is a shape's score with no config chosen (what another library scores there): one kernel slot
    goes to the shape whose gain over its floor is largest, not to covering the floored shape first."""
    times = {"s1": {"a": 1.0, "b": 2.0}, "s2": {"a": 1.0, "b": 4.0}, "rows": {"c": 1.0}}
    low = choose(times, max_kernels=2, floors={"rows": 0.9})  # c gains 1/0.9 at rows; b gains nothing
    assert low.kernels == ("a", "c")
    high = choose({**times, "s3": {"b": 1.0, "a": 2.0}}, max_kernels=2, floors={"rows": 0.9})
    assert high.kernels == ("a", "b") and high.rules["rows"] is None  # b gains 2x at s3: more than c's 1.11x
    uncovered = choose({**times, "s3": {"b": 1.0, "a": 2.0}}, max_kernels=2)  # no floor: rows must be covered
    assert "c" in uncovered.kernels
