"""The whole search space checked at once, skipping what a rule already rejects.

Checking configs one by one costs every rule for every combination of knob
values, and spaces run past ten million combinations. :func:`survey` walks the
combinations as a tree, one knob per level in the space file's order, and
applies each rule as soon as the knobs it reads (directly, through derived
values, or in its reason) are bound: a subtree a rule rejects is counted, not
visited. A config is rejected for the first rule in file order that it breaks
(the shared-memory rule last), as :meth:`SearchSpace.check` rejects it, so a
rule that breaks at a node where an earlier rule still waits for a deeper knob
cannot reject the subtree by itself: below that node only the waiting earlier
rules are applied, over only the knobs they read, and how they split such a
subtree is worked out once for each combination of the values they read.
Where, once a knob's value has passed the rules ready with it, nothing below
reads that knob (neither the rules still waiting nor a derived value computed
deeper), the subtrees of its values differ only in that value and the derived
values it makes: the first is walked, the others are copies. The feasible
configs come in the same order as iterating the space, and each group of
rejections is counted and named by its first config in that order.

Applying a rule before an earlier one could meet an error (a derived value
that divides by zero, read by a rule) that checking in order never meets, and
skipping knobs could miss one that it does meet. So the derived values are
first evaluated over every combination of the knobs they read; where one
fails (or that takes too long), and where a rule fails during the walk, the
space is walked again applying the rules strictly in file order, which meets
the error that checking configs in order meets.

A walk is bounded: past WORK_BUDGET steps (knob values bound, verdicts made) it
stops with :class:`SpaceTooLarge`. It lists only the feasible configs asked for
(``keep``: their positions among the feasible ones; ``spread``: an evenly spaced
sample, its spacing found as the walk goes); the others are counted,
those in a subtree where every config passes without being visited, so that a
space of 10**10 configs that its rules hardly cut is counted at the cost of its
first knobs.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import gc
import itertools
import math
import operator
import string
from collections.abc import Iterable, Iterator
from typing import Any

from autotune.errors import SpaceError
from autotune.gpu_specs import GpuSpec
from autotune.problem import ELEMENTS, GemmProblem
from autotune.progress import ProgressCallback, no_progress
from autotune.space.family import LAYOUT_NAMES, Config, Rule, SearchSpace, Verdict

_CONTEXT = ("gpu", "problem", *LAYOUT_NAMES)  # bound before any knob
TRIAL_BUDGET = 250_000  # derived-value evaluations spent on showing that none fails, before a pruned walk
WORK_BUDGET = 10_000_000  # steps of one walk (knob values bound, verdicts made), about a minute; sgemm takes 4 million
PROGRESS_STEPS = 1 << 16  # steps between two reports to a progress callback
CHECKING = "checking configs"  # what survey reports its progress as


class SpaceTooLarge(SpaceError):
    """Checking a space against its rules takes more than WORK_BUDGET steps."""


@dataclasses.dataclass
class Rejection:
    """Configs one rule rejected: how many, and the first reason given."""

    example: str
    count: int = 0


@dataclasses.dataclass
class Survey:
    feasible: list[Verdict]  # those listed: all of them, unless a limit or ``keep`` said otherwise
    rejections: list[Rejection]  # most common first; the shared-memory rule split by its limit
    feasible_count: int  # every feasible config walked, listed or not

    @property
    def rejected(self) -> int:
        return sum(r.count for r in self.rejections)


def survey(space: SearchSpace, gpu: GpuSpec, problem: GemmProblem | None = None,
           limit: int | None = None, keep: Iterable[int] | None = None, spread: int | None = None,
           progress: ProgressCallback = no_progress) -> Survey:
    """Every config of ``space`` on ``gpu``: the feasible ones, and rejection counts per rule.

    With ``limit``, the walk stops at that many feasible configs (the counts then cover only
    the configs before the last one found): ``limit=1`` asks cheaply whether the GPU can run
    the family at all. With ``keep``, only the feasible configs at those positions (0 for the
    first feasible config in enumeration order) are listed; ``keep=()`` counts them only. With
    ``spread`` (not with ``keep``), an evenly spaced sample of them is listed, in one walk that also
    counts them all: those at the multiples of the smallest power of two that leaves at most
    ``2 * spread`` (so at least ``spread``, or all where there are fewer).
    ``progress`` hears how many of the space's configs are judged (``checking configs``), every
    PROGRESS_STEPS steps of the walk.

    Raises:
        SpaceTooLarge: the walk takes more than WORK_BUDGET steps.
    """
    element = ELEMENTS[space.dtype]
    if gpu.arch < element.min_arch:  # as SearchSpace.check says it of each config
        return Survey([], [Rejection(f"{space.dtype} needs sm_{element.min_arch} or newer ({gpu.key} is "
                                     f"sm_{gpu.arch})", space.size)], 0)
    plan = _Plan(space, space.rules_for(problem))
    context = {"gpu": gpu, "problem": problem, **space.layout_values()}
    if keep is not None and spread is not None:
        raise ValueError("survey takes keep or spread, not both")
    kept = _Positions(sorted(set(keep))) if keep is not None else _Spread(spread) if spread is not None else None
    progress(CHECKING, 0, space.size)
    with _no_cycle_collection():
        checked = None
        if _derived_values_cannot_fail(space, plan, context):
            try:
                checked = _PrunedWalk(space, plan, context, limit, kept, progress).run()
            except SpaceTooLarge:
                raise
            except Exception:  # noqa: BLE001 - a rule failed: the ordered walk raises what checking in order meets
                pass
        if checked is None:
            if kept is not None:
                kept = kept.fresh()
            checked = _OrderedWalk(space, plan, context, limit, kept, progress).run()
    progress(CHECKING, space.size, space.size)
    return checked


def feasible_configs(space: SearchSpace, gpu: GpuSpec, problem: GemmProblem | None = None,
                     limit: int | None = None) -> list[Config]:
    """The configs of ``space`` that pass every static rule on ``gpu``, in enumeration order (the first
    ``limit`` of them)."""
    return [verdict.config for verdict in survey(space, gpu, problem, limit).feasible]


@contextlib.contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """The garbage collector's cycle search paused: a walk makes hundreds of thousands of
    verdicts, none in a cycle, and searching them again and again for cycles costs a third
    of the walk."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


class _Plan:
    """What each derived value and check reads, and at which depth of the walk it is ready.

    Depth ``d`` is the node where knobs ``0..d-1`` are bound; checks are the rules in file
    order, then the shared-memory rule (None).
    """

    def __init__(self, space: SearchSpace, rules: list[Rule]):
        self.knobs = list(space.knobs.items())
        # choices[depth]: (value, (knob, value)) for each value of the knob; configs share the pair
        self.choices = [[(value, (name, value)) for value in values] for name, values in self.knobs]
        self.below = [math.prod(len(values) for _, values in self.knobs[d:]) for d in range(len(self.knobs) + 1)]
        # reads[name]: the knobs (by position) a name reads, through derived values too
        self.reads: dict[str, frozenset[int]] = {name: frozenset({i}) for i, (name, _) in enumerate(self.knobs)}
        needs: dict[str, set[str]] = {}  # a derived value and those it reads, directly or not
        for name, expression in space.derived.items():
            self.reads[name] = _union(self.reads.get(n, frozenset()) for n in expression.names)
            needs[name] = {name}.union(*(needs.get(n, ()) for n in expression.names))
        self.derived_at: list[list[str]] = [[] for _ in range(len(self.knobs) + 1)]
        for name in space.derived:  # a derived value is ready with its last knob
            self.derived_at[max(self.reads[name], default=-1) + 1].append(name)
        # from this depth on no derived value waits for a knob
        self.settled = max((depth for depth, names in enumerate(self.derived_at) if names), default=0)
        self.checks: list[Rule | None] = [*rules, None]
        check_names = [rule.require.names | _fields(rule.reason) for rule in rules] + [space.smem_names]
        self.check_knobs = [_union(self.reads.get(n, frozenset()) for n in names) for names in check_names]
        self.levels = [max(knobs, default=-1) for knobs in self.check_knobs]  # ready at depth level + 1
        # derived_for[check][depth]: the derived values the check reads that are ready at depth
        self.derived_for = [[[name for name in ready if name in needed] for ready in self.derived_at]
                            for needed in (set().union(*(needs.get(n, ()) for n in names)) for names in check_names)]
        # read_deeper[depth]: the knobs read by derived values computed below depth + 1
        self.read_deeper = [_union(self.reads[name] for names in self.derived_at[depth + 2:] for name in names)
                            for depth in range(len(self.knobs))]
        self._bound_reads: dict[tuple[tuple[int, ...], int], Any] = {}
        self._forgets: dict[tuple[int, tuple[int, ...]], bool] = {}

    def forgets(self, depth: int, checks: tuple[int, ...]) -> bool:
        """Whether below knob ``depth`` nothing reads it: not ``checks``, nor a derived value that
        waits for a deeper knob (the derived values it makes are computed with it)."""
        key = (depth, checks)
        if key not in self._forgets:
            self._forgets[key] = depth not in self.read_deeper[depth] and all(
                depth not in self.check_knobs[c] for c in checks)
        return self._forgets[key]

    def bound_reads(self, checks: tuple[int, ...], depth: int) -> Any:
        """A function giving the values of the knobs before ``depth`` that ``checks`` read."""
        key = (checks, depth)
        if key not in self._bound_reads:
            knobs = sorted(k for k in _union(self.check_knobs[c] for c in checks) if k < depth)
            names = [self.knobs[k][0] for k in knobs]
            self._bound_reads[key] = operator.itemgetter(*names) if names else (lambda _: ())
        return self._bound_reads[key]


def _derived_values_cannot_fail(space: SearchSpace, plan: _Plan, context: dict[str, Any]) -> bool:
    """Whether every derived value evaluates without an error for every combination of the knobs
    it reads (False too where that takes more than :data:`TRIAL_BUDGET` evaluations)."""
    if sum(math.prod(len(plan.knobs[k][1]) for k in plan.reads[name]) for name in space.derived) > TRIAL_BUDGET:
        return False
    tables: dict[str, dict[tuple[int, ...], Any]] = {}  # each derived value per combination of its knobs
    try:
        for name, expression in space.derived.items():
            knobs = sorted(plan.reads[name])
            knob_names = [plan.knobs[k][0] for k in knobs]
            inputs = [(n, [knobs.index(k) for k in sorted(plan.reads[n])])
                      for n in expression.names if n in space.derived]
            table = tables[name] = {}
            for combo in itertools.product(*(plan.knobs[k][1] for k in knobs)):
                names = {**context, **dict(zip(knob_names, combo))}
                for derived, picks in inputs:
                    names[derived] = tables[derived][tuple(map(combo.__getitem__, picks))]
                table[combo] = expression(names)
    except Exception:  # noqa: BLE001 - any failure: walk in file order, which meets it where checking in order does
        return False
    return True


class _Positions:
    """The feasible configs to list: those at the given positions (sorted)."""

    def __init__(self, positions: list[int]):
        self.positions = positions

    def fresh(self) -> _Positions:
        return self

    def any_in(self, start: int, count: int) -> bool:
        """Whether a position in ``[start, start + count)`` is listed."""
        return bisect.bisect_left(self.positions, start) < bisect.bisect_left(self.positions, start + count)

    def offsets(self, start: int, count: int) -> Iterator[int]:
        """The offsets from ``start`` of the positions listed in ``[start, start + count)``, in order."""
        positions = self.positions
        for index in range(bisect.bisect_left(positions, start), bisect.bisect_left(positions, start + count)):
            yield positions[index] - start

    def listed(self, feasible: list[Verdict], position: int) -> None:
        """The config at ``position`` was appended to ``feasible``."""


class _Spread:
    """The feasible configs to list: those at the multiples of ``stride``, a power of two that doubles (and
    drops every other config listed) whenever more than ``2 * wanted`` are listed."""

    def __init__(self, wanted: int):
        self.wanted = max(wanted, 1)
        self.stride = 1
        self.positions: list[int] = []  # of the configs listed

    def fresh(self) -> _Spread:
        return _Spread(self.wanted)

    def any_in(self, start: int, count: int) -> bool:
        return -(-start // self.stride) * self.stride < start + count

    def offsets(self, start: int, count: int) -> Iterator[int]:
        position = -(-start // self.stride) * self.stride
        while position < start + count:  # the stride may grow between two configs
            yield position - start
            position += self.stride

    def listed(self, feasible: list[Verdict], position: int) -> None:
        self.positions.append(position)
        if len(self.positions) > 2 * self.wanted:
            self.stride *= 2
            kept = [i for i, at in enumerate(self.positions) if at % self.stride == 0]
            feasible[:] = [feasible[i] for i in kept]
            self.positions = [self.positions[i] for i in kept]


class _Walk:
    """What both walks share: the names bound so far, the feasible configs, the rejection groups."""

    def __init__(self, space: SearchSpace, plan: _Plan, context: dict[str, Any], limit: int | None,
                 keep: _Positions | _Spread | None, progress: ProgressCallback = no_progress):
        self.space, self.plan, self.limit = space, plan, limit
        self.keep = keep  # which feasible configs to list; None: all
        self.gpu = context["gpu"]
        self.names: dict[str, Any] = dict(context)
        self.pairs: list[tuple[str, int] | None] = [None] * len(plan.knobs)  # (knob, value) of the knobs bound
        self.feasible: list[Verdict] = []
        self.found = 0  # feasible configs walked, listed or not
        self.groups: dict[Any, Rejection] = {}
        self.work = 0
        self.progress = progress
        self._checkpoint = min(PROGRESS_STEPS, WORK_BUDGET)  # the step count where _step looks up next

    def _result(self) -> Survey:
        return Survey(self.feasible, sorted(self.groups.values(), key=lambda r: -r.count), self.found)

    def _step(self, steps: int = 1) -> None:
        self.work += steps
        if self.work > self._checkpoint:
            self._look_up()

    def _look_up(self) -> None:
        """Every PROGRESS_STEPS steps: report how many configs are judged, or stop past WORK_BUDGET steps."""
        if self.work <= WORK_BUDGET:
            self._checkpoint = min(self.work + PROGRESS_STEPS, WORK_BUDGET)
            judged = self.found + sum(rejection.count for rejection in self.groups.values())
            self.progress(CHECKING, min(judged, self.space.size - 1), self.space.size)
        else:
            raise SpaceTooLarge(f"{self.space.family}: checking its {self.space.size} configs against its rules "
                                f"takes more than {WORK_BUDGET} steps (fewer knob values, or rules that cut earlier)")

    def _kept(self, count: int) -> bool:
        """Whether any of the next ``count`` feasible configs is to be listed."""
        return self.keep is None or self.keep.any_in(self.found, count)

    def _rejection(self, check: int) -> tuple[Any, str | None] | None:
        """(group, reason) where ``check`` rejects the names bound, else None. The reason is
        left out (None) where its group already has an example."""
        rule = self.plan.checks[check]
        if rule is None:
            reason = self.space.smem_violation(self.names, self.gpu)
            return (("smem", reason.split(" KB > ")[-1]), reason) if reason else None
        if rule.require(self.names):
            return None
        return check, None if check in self.groups else rule.reason_format.format(self.names)

    def _count(self, group: Any, reason: str | None, count: int) -> None:
        rejection = self.groups.get(group)
        if rejection is None:
            rejection = self.groups[group] = Rejection(reason)
        rejection.count += count

    def _derive(self, depth: int) -> None:
        for name in self.plan.derived_at[depth]:
            self.names[name] = self.space.derived[name](self.names)

    def _bind(self, depth: int, value: int, pair: tuple[str, int]) -> None:
        """Knob ``depth`` takes ``value``, and the derived values that waited for it are computed."""
        self._step()
        self.names[pair[0]] = value
        self.pairs[depth] = pair
        self._derive(depth + 1)

    def _full(self) -> bool:
        return self.limit is not None and self.found >= self.limit

    def _accept_below(self, depth: int) -> None:
        """Every config below the knobs bound up to ``depth`` is feasible: list them, in order (those kept)."""
        plan = self.plan
        if not self._kept(plan.below[depth]):
            self.found += plan.below[depth] if self.limit is None else min(plan.below[depth], self.limit - self.found)
            return
        if depth < plan.settled:
            for value, pair in plan.choices[depth]:
                if self._full():
                    return
                self._bind(depth, value, pair)
                self._accept_below(depth + 1)
            return
        bound = tuple(self.pairs[:depth])
        values = {name: value for name, value in self.names.items() if name not in _CONTEXT}
        choices = [[pair for _, pair in choices] for choices in plan.choices[depth:]]
        count = plan.below[depth] if self.limit is None else min(plan.below[depth], max(self.limit - self.found, 0))
        if self.keep is None:
            rest = enumerate(itertools.islice(itertools.product(*choices), count))
        else:
            rest = ((offset, _nth_product(choices, offset)) for offset in self.keep.offsets(self.found, count))
        family, other_dtype, layout = self.space.family, self.space.other_dtype, self.space.layout
        for offset, pairs in rest:
            self._step()
            config_values = values.copy()
            config_values.update(pairs)
            self.feasible.append(Verdict(Config(family, bound + pairs, other_dtype, layout), config_values, None))
            if self.keep is not None:
                self.keep.listed(self.feasible, self.found + offset)
        self.found += count


class _OrderedWalk(_Walk):
    """Checks strictly in file order: a check waits for every check before it."""

    def run(self) -> Survey:
        self._derive(0)
        self._visit(0, 0)
        return self._result()

    def _visit(self, depth: int, check: int) -> None:
        """Bind knob ``depth`` onwards; checks before index ``check`` have passed."""
        plan = self.plan
        while check < len(plan.checks) and plan.levels[check] < depth:
            rejection = self._rejection(check)
            if rejection is not None:
                self._count(*rejection, plan.below[depth])
                return
            check += 1
        if depth == len(plan.knobs):
            self._accept_below(depth)
            return
        for value, pair in plan.choices[depth]:
            if self._full():
                return
            self._bind(depth, value, pair)
            self._visit(depth + 1, check)


class _PrunedWalk(_Walk):
    """Each check as soon as its knobs are bound; a subtree that a check rejects while earlier
    checks still wait is split between them over only the knobs those earlier checks read."""

    def run(self) -> Survey:
        # every name in the order the ordered walk first binds it, so feasible configs' values list alike
        for depth, (name, _) in enumerate(self.plan.knobs):
            self.names.update(dict.fromkeys(self.plan.derived_at[depth]))
            self.names[name] = None
        self.names.update(dict.fromkeys(self.plan.derived_at[-1]))
        self._splits: dict[Any, dict[Any, tuple[str | None, int]]] = {}
        self._derive(0)
        self._visit(0, *self._first_rejection(0, tuple(range(len(self.plan.checks)))))
        return self._result()

    def _visit(self, depth: int, rejection: tuple[Any, str | None] | None, waiting: tuple[int, ...]) -> None:
        """The subtree below the knobs bound up to ``depth``: ``rejection`` is the first check that
        rejects it (or None), ``waiting`` the checks before it not ready yet, in file order."""
        if rejection is not None:
            for group, (reason, count) in self._split(depth, waiting).items():
                self._count(*(rejection if group is None else (group, reason)), count)
            return
        if not waiting:
            self._accept_below(depth)
            return
        walked: dict[tuple[int, ...], tuple[list[Verdict], int, list[tuple[Rejection, int]]]] = {}
        for value, pair in self.plan.choices[depth]:
            if self._full():
                return
            self._bind(depth, value, pair)
            rejection, later = self._first_rejection(depth + 1, waiting)
            if rejection is not None or self.limit is not None or not self.plan.forgets(depth, later):
                self._visit(depth + 1, rejection, later)
            elif later in walked and not (self.keep is not None and self._kept(walked[later][1])):
                self._copy(depth, *walked[later])
            elif later in walked:  # configs to list lie in this subtree: walk it
                self._visit(depth + 1, None, later)
            else:  # the first value whose subtree the values after it may copy
                start, found = len(self.feasible), self.found
                before = {group: counted.count for group, counted in self.groups.items()}
                self._visit(depth + 1, None, later)
                walked[later] = (self.feasible[start:] if self.keep is None else [], self.found - found,
                                 [(counted, counted.count - before.get(group, 0))
                                  for group, counted in self.groups.items()])

    def _copy(self, depth: int, verdicts: list[Verdict], found: int, counts: list[tuple[Rejection, int]]) -> None:
        """The subtree of a value of knob ``depth`` that checks alike to an earlier value's (``found``
        feasible there, ``verdicts`` those listed, ``counts`` rejected per group): the same, with
        this value and the derived values it makes."""
        self._step(1 + len(verdicts))
        self.found += found
        pair = self.pairs[depth]
        changed = {pair[0]: pair[1], **{name: self.names[name] for name in self.plan.derived_at[depth + 1]}}
        family, other_dtype, layout = self.space.family, self.space.other_dtype, self.space.layout
        for verdict in verdicts:
            params = verdict.config.params
            values = verdict.values.copy()
            values.update(changed)
            config = Config(family, params[:depth] + (pair,) + params[depth + 1:], other_dtype, layout)
            self.feasible.append(Verdict(config, values, None))
        for rejection, count in counts:
            rejection.count += count

    def _first_rejection(self, depth: int, waiting: tuple[int, ...]) -> tuple[Any, tuple[int, ...]]:
        """The first of the ``waiting`` checks ready at ``depth`` that rejects the names bound (or None),
        and the checks before it that are not ready yet."""
        levels, later = self.plan.levels, []
        for check in waiting:
            if levels[check] >= depth:
                later.append(check)
            elif (rejection := self._rejection(check)) is not None:
                return rejection, tuple(later)  # the checks after it no longer matter
        return None, tuple(later)

    def _split(self, depth: int, earlier: tuple[int, ...]) -> dict[Any, tuple[str | None, int]]:
        """How the configs below ``depth``, rejected by a check that waits for the ``earlier`` ones,
        split between those (group: first reason, count) and it (None), in the order of their
        first configs; worked out once for each combination of the bound values they read."""
        plan = self.plan
        if not earlier:
            return {None: (None, plan.below[depth])}
        key = (depth, earlier, plan.bound_reads(earlier, depth)(self.names))
        split = self._splits.get(key)
        if split is not None:
            return split
        knob = min(k for check in earlier for k in plan.check_knobs[check] if k >= depth)
        skipped = plan.below[depth] // plan.below[knob]  # the knobs before it change nothing
        split = {}
        for value, pair in plan.choices[knob]:
            self._step()
            self.names[pair[0]] = value
            for check in earlier:  # only what these checks read: other derived values may read skipped knobs
                for name in plan.derived_for[check][knob + 1]:
                    self.names[name] = self.space.derived[name](self.names)
            rejection, later = self._first_rejection(knob + 1, earlier)
            for group, (reason, count) in self._split(knob + 1, later).items():
                if group is None and rejection is not None:
                    group, reason = rejection
                first = split.get(group)
                split[group] = (reason, count * skipped) if first is None else (first[0], first[1] + count * skipped)
        self._splits[key] = split
        return split


def _nth_product(choices: list[list[Any]], offset: int) -> tuple:
    """``itertools.product(*choices)``'s item at ``offset``."""
    picked = []
    for values in reversed(choices):
        offset, index = divmod(offset, len(values))
        picked.append(values[index])
    return tuple(reversed(picked))


def _union(sets) -> frozenset:
    return frozenset().union(*sets)


def _fields(reason: str) -> set[str]:
    """The names a reason's format fields read: ``{gpu.key}`` reads ``gpu``."""
    fields = set()
    for _, field, _, _ in string.Formatter().parse(reason):
        if field:
            fields.add(field.split(".")[0].split("[")[0])
    return fields
