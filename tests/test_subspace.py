"""A family restricted to some knob values: the same configs, names and rules, fewer of them."""

from pathlib import Path

import pytest

from autotune.errors import InputError
from autotune.gpu_specs import gpu_spec
from autotune.problem import GemmProblem
from autotune.space.family import SearchSpace
from autotune.space.subspace import restrict
from autotune.space.survey import feasible_configs

TINY = Path(__file__).parent / "data" / "tiny.toml"
H200, PROBLEM = gpu_spec("h200"), GemmProblem(64, 64, 64)


def test_a_restricted_space_holds_the_familys_configs_with_those_values_and_its_seeds_inside():
    space = SearchSpace(TINY)
    sub = restrict(space, {"SKEW": [0], "UNROLL": [2, 1]})
    assert sub.knobs["SKEW"] == (0,) and sub.knobs["UNROLL"] == (1, 2) and sub.knobs["ROWS"] == space.knobs["ROWS"]
    whole = feasible_configs(space, H200, PROBLEM)
    inside = [c for c in whole if c["SKEW"] == 0 and c["UNROLL"] in (1, 2)]
    assert feasible_configs(sub, H200, PROBLEM) == inside  # the same names, rules and order
    assert sub.seeds == [seed for seed in space.seeds if seed["UNROLL"] in (1, 2)]
    assert sub.template_hash == space.template_hash and sub.family == space.family
    assert space.knobs["SKEW"] == (0, 1, 2, 3)  # the family is untouched


@pytest.mark.parametrize("values, fragment", [
    ({"TILT": [1]}, "'TILT'"),
    ({"ROWS": [3]}, "ROWS 3"),
    ({"ROWS": []}, "'no value'"),
])
def test_a_bad_restriction_is_one_line(values, fragment):
    with pytest.raises(InputError) as error:
        restrict(SearchSpace(TINY), values)
    assert fragment in str(error.value) and "\n" not in str(error.value)
