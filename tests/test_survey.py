"""The pruned whole-space check agrees with checking every config one by one."""

import collections

import pytest

from autotune.gpu_specs import gpu_spec
from autotune.problem import GemmProblem
from autotune.space.family import SearchSpace, load_space
from autotune.space.survey import survey


def _one_by_one(space, gpu, problem):
    verdicts = list(space.verdicts(gpu, problem))
    reasons = collections.Counter(v.reason for v in verdicts if not v.feasible)
    return [v for v in verdicts if v.feasible], reasons


def _reason_counts(checked):
    """Per-reason counts from a survey: each group's example stands for reasons that differ in numbers only."""
    return sorted(r.count for r in checked.rejections)


@pytest.mark.parametrize("family, gpu", [("hgemm_wmma", "t4"), ("hgemm_wmma", "h200"), ("coarse_f16", "a100"),
                                         ("tiled_f32", "t4")])
def test_survey_matches_checking_every_config(family, gpu):
    space, spec = load_space(family), gpu_spec(gpu)
    problem = GemmProblem(4096, 4096, 4096, space.dtype)
    feasible, reasons = _one_by_one(space, spec, problem)
    checked = survey(space, spec, problem)
    assert [v.config for v in checked.feasible] == [v.config for v in feasible]
    assert [v.values for v in checked.feasible] == [v.values for v in feasible]
    assert checked.rejected == space.size - len(feasible) == sum(reasons.values())
    for rejection in checked.rejections:
        assert rejection.example in reasons


SPACE = """
family = "order"
dtype = "f32"
template = "none.cu.j2"

[knobs]
A = [1, 2]
B = [1, 2, 3]
C = [1, 2]

[derived]
BC = "B * C"

[[rules]]
require = "BC != 6"
reason = "B*C is {BC}"

[[rules]]
require = "A != 2"
reason = "A is {A} (with C {C})"

[launch]
block = "32"
grid_x = "1"
grid_y = "1"
smem_bytes = "A * 40000"
opt_in = "0"
dynamic_smem = "0"
"""


def test_a_config_breaking_two_rules_counts_under_the_first_in_file_order(tmp_path):
    """Rule 2 reads only A (knob 1), but rule 1 reads B and C: A=2 subtrees cannot be cut before rule 1 ran."""
    path = tmp_path / "order.toml"
    path.write_text(SPACE)
    space, gpu = SearchSpace(path), gpu_spec("t4")
    checked = survey(space, gpu)
    counts = {r.example.split(" is ")[0]: r.count for r in checked.rejections}
    assert counts == {"B*C": 2, "A": 5}  # (A, B=3, C=2) for both A; then the other five A=2 configs
    assert [dict(v.config.params) for v in checked.feasible] == [
        {"A": 1, "B": b, "C": c} for b in (1, 2, 3) for c in (1, 2) if b * c != 6
    ]
    feasible, reasons = _one_by_one(space, gpu, None)
    assert [v.config for v in checked.feasible] == [v.config for v in feasible]
    assert sorted(reasons.values()) == [2, 2, 3]  # "B*C is 6" twice; rule 2 names C: 3 with C 1, 2 with C 2


def test_the_shared_memory_rule_runs_last_and_splits_by_limit(tmp_path):
    path = tmp_path / "order.toml"
    path.write_text(SPACE.replace('require = "A != 2"', 'require = "A != 3"'))
    space = SearchSpace(path)
    checked = survey(space, gpu_spec("t4"))  # A=2 asks 80000 B of static shared memory: over 48 KB
    smem = [r for r in checked.rejections if r.example.startswith("smem ")]
    assert len(smem) == 1 and smem[0].count == 5 and smem[0].example == "smem 78.1 KB > 48 KB (t4)"
    assert checked.rejected == 2 + 5


def test_a_limited_survey_stops_at_the_first_feasible_configs():
    space = load_space("hgemm_mma")
    first = survey(space, gpu_spec("h200"), limit=1).feasible
    assert len(first) == 1 and first[0].config == next(iter(survey(space, gpu_spec("h200"), limit=3).feasible)).config
    assert survey(space, gpu_spec("t4"), limit=1).feasible == []  # mma.sync needs sm_80


def _random_space(tmp_path, seed):
    """A small space whose rules read random knobs and derived values, the shared-memory rule last."""
    import random

    rng = random.Random(seed)
    knobs = [f"K{i}" for i in range(rng.randint(3, 6))]
    lines = ['family = "mixed"', 'dtype = "f32"', 'template = "none.cu.j2"', "[knobs]"]
    lines += [f"{knob} = {sorted(rng.sample(range(1, 6), rng.randint(2, 3)))}" for knob in knobs]
    derived = {"D0": f"{rng.choice(knobs)} * {rng.choice(knobs)}", "D1": f"D0 + {rng.choice(knobs)}",
               "LAST": f"{knobs[-1]} + 1"}  # read by no rule: the configs' values still hold it
    lines += ["[derived]", *(f'{name} = "{text}"' for name, text in derived.items())]
    lines += ["[launch]", 'block = "32"', 'grid_x = "1"', 'grid_y = "1"', 'dynamic_smem = "0"',
              f'smem_bytes = "{rng.choice(knobs)} * 13000 + {rng.choice(knobs)} * 1000"',
              f'opt_in = "{rng.choice(knobs)} % 2"']
    for i in range(rng.randint(2, 6)):
        names = rng.sample([*knobs, "D0", "D1"], rng.randint(1, 3))
        require = f"({' + '.join(names)}) % {rng.randint(2, 4)} != 0"
        lines += ["[[rules]]", f'require = "{require}"', f'reason = "r{i}: {" ".join("{" + n + "}" for n in names)}"']
    path = tmp_path / f"mixed{seed}.toml"
    path.write_text("\n".join(lines) + "\n")
    return SearchSpace(path)


def _expected(space, gpu, limit=None):
    """Checking configs one by one: the feasible ones up to ``limit``, and each group (first rule in file
    order, the shared-memory rule by its limit) with its first reason and count, most common first."""
    feasible, groups = [], {}
    for verdict in space.verdicts(gpu):
        if limit is not None and len(feasible) >= limit:
            break
        if verdict.feasible:
            feasible.append(verdict)
            continue
        key = verdict.reason.split(":")[0] if verdict.reason.startswith("r") else verdict.reason.split(" KB > ")[-1]
        groups.setdefault(key, [verdict.reason, 0])[1] += 1
    return feasible, sorted(((example, count) for example, count in groups.values()), key=lambda g: -g[1])


@pytest.mark.parametrize("seed", range(40))
def test_survey_of_a_random_space_matches_checking_every_config(tmp_path, seed):
    space, gpu = _random_space(tmp_path, seed), gpu_spec("t4")
    for limit in (None, 1, 3):
        feasible, groups = _expected(space, gpu, limit)
        checked = survey(space, gpu, limit=limit)
        assert [v.config for v in checked.feasible] == [v.config for v in feasible]
        assert [v.values for v in checked.feasible] == [v.values for v in feasible]
        assert [(r.example, r.count) for r in checked.rejections] == groups


ZERO_DIVISION = """
family = "zero"
dtype = "f32"
template = "none.cu.j2"

[knobs]
A = [0, 1, 2]
B = [1, 2]
C = [1, 2]

[derived]
INV = "6 // A"

[[rules]]
require = "A > 0 or C > 5"
reason = "A is {A}"

[[rules]]
require = "INV > 3"
reason = "6 // A is {INV}"

[launch]
block = "32"
grid_x = "1"
grid_y = "1"
smem_bytes = "0"
opt_in = "0"
dynamic_smem = "0"
"""


def test_a_rule_that_fails_only_where_an_earlier_rule_rejects_does_not_stop_the_survey(tmp_path):
    """At A=0 the second rule compares None (6 // 0) with 2, but checking in order never gets there:
    the first rule, waiting for C, rejects every A=0 config."""
    path = tmp_path / "zero.toml"
    path.write_text(ZERO_DIVISION)
    space, gpu = SearchSpace(path), gpu_spec("t4")
    checked = survey(space, gpu)
    assert [(r.example, r.count) for r in checked.rejections] == [("A is 0", 4), ("6 // A is 3", 4)]
    assert [v.config["A"] for v in checked.feasible] == [1] * 4


def test_a_derived_value_that_fails_where_checking_in_order_reaches_it_fails_the_survey(tmp_path):
    """At A=0, B=2 the last rule (reading B) rejects before the first (reading C) is ready; a pruned walk
    need not bind C there, but checking in order computes INV + C (None + 1) and fails."""
    from autotune.errors import SpaceError

    text = ZERO_DIVISION.replace('INV = "6 // A"', 'INV = "6 // A"\nLATE = "INV + C"')
    text = text.replace('require = "INV > 3"\nreason = "6 // A is {INV}"', 'require = "B < 2"\nreason = "B is {B}"')
    path = tmp_path / "late.toml"
    path.write_text(text)
    with pytest.raises(SpaceError, match="LATE"):
        survey(SearchSpace(path), gpu_spec("t4"))
