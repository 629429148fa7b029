"""A Screen says what SearchSpace.check says of each candidate, for every shipped space, and raises what it raises."""

import random

import pytest

from autotune.errors import SpaceError
from autotune.gpu_specs import GPUS
from autotune.problem import GemmProblem
from autotune.space.family import SearchSpace, load_space, shipped_families
from autotune.space.screen import Screen
from autotune.space.survey import feasible_configs

GPU_KEYS = ("h200", "a100", "t4")
# a square problem, one of no whole tiles, one of few rows, and one of one row (what the GEMV families serve)
SHAPES = ((4096, 4096, 4096), (777, 1333, 555), (16, 4096, 4096), (1, 4096, 14336))
RANDOM_DRAWS = 200  # uniform draws per space, GPU and problem: nearly all infeasible
LISTED = 30  # feasible configs listed per space, GPU and problem, each also moved by one knob


def _candidates(space, gpu, problem, rng):
    """Knob values to screen (every config of a small space, else uniform draws), the first feasible configs
    (with their ``[specialize]`` knobs as listed, which the problem may set otherwise), and those with one knob
    moved (near the rules' edges); and how many of the space's configs are feasible, of none, one or more."""
    if space.size <= RANDOM_DRAWS:
        drawn = [config.as_dict() for config in space]
    else:
        chosen = [knob for knob in space.knobs if knob not in space.specialized]
        drawn = [{knob: rng.choice(space.knobs[knob]) for knob in chosen} for _ in range(RANDOM_DRAWS)]
    listed = [config.as_dict() for config in feasible_configs(space, gpu, problem, limit=LISTED)]
    moved = []
    for values in listed:
        knob = rng.choice(list(space.knobs))
        moved.append({**values, knob: rng.choice(space.knobs[knob])})
    return drawn + listed + moved, len(listed)


def _reference(space, gpu, problem, values):
    return space.check(space.for_problem(space.config(values), gpu, problem), gpu, problem).feasible


@pytest.mark.parametrize("family", shipped_families())
def test_a_screen_admits_what_check_finds_feasible(family):
    rng = random.Random(family)
    for dtype in load_space(family).dtypes:
        for layout in load_space(family).layouts:
            space = load_space(family, dtype, layout)
            for key in GPU_KEYS:
                gpu = GPUS[key]
                for shape in SHAPES:
                    problem = GemmProblem(*shape, dtype, layout)
                    screen = Screen(space, gpu, problem)
                    candidates, feasible = _candidates(space, gpu, problem, rng)
                    verdicts = []
                    for values in candidates:
                        expected = _reference(space, gpu, problem, values)
                        where = f"{space.config(values).name} on {key} at {problem.shape}"
                        assert screen.admits(values) == expected, where
                        set_up = space.for_problem(space.config(values), gpu, problem)
                        assert screen.set_up(values) == (tuple(set_up.as_dict().values()), expected), where
                        as_given = space.check(space.config(values), gpu, problem).feasible
                        assert screen.passes(values) == as_given, where
                        verdicts.append(expected)
                    assert any(verdicts) == (feasible > 0), f"{space.family} {dtype} {layout} on {key}"
                    if space.size > RANDOM_DRAWS:  # a space of few configs may have none infeasible
                        assert not all(verdicts), f"{space.family} {dtype} {layout} on {key}: none infeasible"


def _space_file(tmp_path, derived, rules=(), knobs="A = [1, 2, 4]", more=""):
    path = tmp_path / "screened.toml"
    path.write_text(
        'family = "screened"\ndtype = "f32"\ntemplate = "sgemm.cu.j2"\n'
        f'[knobs]\n{knobs}\n'
        '[derived]\n' + "".join(f'{name} = "{text}"\n' for name, text in derived.items())
        + '[launch]\nblock = "32"\ngrid_x = "1"\ngrid_y = "1"\nsmem_bytes = "0"\nopt_in = "0"\ndynamic_smem = "0"\n'
        + "".join(f'[[rules]]\nrequire = "{require}"\nreason = "r"\n' for require in rules) + more
    )
    return SearchSpace(path)


def _error(call):
    with pytest.raises(SpaceError) as raised:
        call()
    return str(raised.value)


@pytest.mark.parametrize("derived, rules", [
    ({"D": "4 // (A - 1)", "E": "D + 1"}, ()),  # a derived value reads a division by zero: at A 1
    ({"D": "4 // (A - 1)"}, ("D > 1",)),  # a rule reads it
])
def test_a_screen_raises_what_check_raises_every_time(tmp_path, derived, rules):
    space = _space_file(tmp_path, derived, rules)
    gpu, problem = GPUS["h200"], GemmProblem(64, 64, 64, "f32")
    screen = Screen(space, gpu, problem)
    assert screen.admits({"A": 2}) == _reference(space, gpu, problem, {"A": 2})
    expected = _error(lambda: space.check(space.config({"A": 1}), gpu, problem))
    for _ in range(2):  # an error is never remembered
        assert _error(lambda: screen.admits({"A": 1})) == expected
        assert _error(lambda: screen.passes({"A": 1})) == expected
    assert screen.admits({"A": 4}) == _reference(space, gpu, problem, {"A": 4})


def test_a_screen_raises_what_the_build_the_problem_sets_raises(tmp_path):
    """W is set by the problem, to 1 where A divides M: the derived values of that build divide by zero."""
    space = _space_file(tmp_path, {"D": "A // (1 - W)", "E": "D * 2"}, knobs="A = [16, 48]\nW = [0, 1]",
                        more='[defaults]\nW = 0\n[specialize]\nW = "problem.m % A == 0"\n')
    gpu, problem = GPUS["h200"], GemmProblem(64, 64, 64, "f32")
    screen = Screen(space, gpu, problem)
    assert screen.admits({"A": 48}) and _reference(space, gpu, problem, {"A": 48})
    expected = _error(lambda: _reference(space, gpu, problem, {"A": 16}))
    assert _error(lambda: screen.admits({"A": 16})) == expected
    assert screen.passes({"A": 16, "W": 0})  # as given: W 0


def test_a_float_and_an_integer_of_equal_value_are_told_apart(tmp_path):
    """F is 2 with W 0 and 2.0 with W 1: equal, but the rule tells them apart, so it is never remembered by F."""
    space = _space_file(tmp_path, {"F": "A / 1 if W else A"}, ("F * 2**60 + 1 > F * 2**60",),
                        knobs="A = [2, 4]\nW = [0, 1]")
    gpu, problem = GPUS["h200"], GemmProblem(64, 64, 64, "f32")
    screen = Screen(space, gpu, problem)
    for values in ({"A": 2, "W": 0}, {"A": 2, "W": 1}, {"A": 4, "W": 1}, {"A": 4, "W": 0}):
        assert screen.admits(values) == _reference(space, gpu, problem, values) == (values["W"] == 0)
