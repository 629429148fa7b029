"""Screening many candidate configs of one space on one GPU and problem: the verdict of
:meth:`SearchSpace.check` at a fraction of its cost.

A search screens hundreds of candidates per proposal, most of which break a static
rule. Checking each one builds its Config twice (:meth:`SearchSpace.for_problem`),
computes every derived value twice and builds a Verdict; a :class:`Screen` builds
nothing and remembers the value of each expression (derived value, ``[specialize]``
expression, rule, shared-memory rule) by the values of the names it reads, which
repeat from candidate to candidate: ``THREADS`` of sgemm reads four knobs of few
values each. The GPU and the problem are fixed per Screen, so they are no part of
what an expression is remembered by.

What is computed, and in which order, is what ``check`` computes (every derived value,
then the rules in file order, then the shared-memory rule), so a space whose
expression raises SpaceError raises it here too; an error is never remembered.

A value is remembered by the values it reads, and Python's ``1 == 1.0 == True`` hash
alike: ``True`` and ``1`` behave alike in every expression (only the type of what
passes them through differs, never a truth or a number), but a float and an integer
of equal value may not (past 2**53), so an expression that reads a value that can be a
float (``/`` makes one, and ``problem.alpha`` is one) is computed every time.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import Any

from autotune.expression import GPU_FIELDS, PROBLEM_FIELDS, Expression
from autotune.gpu_specs import GpuSpec
from autotune.problem import ELEMENTS, GemmProblem
from autotune.space.family import Rule, SearchSpace

KnobValues = tuple[int, ...]  # a config's knob values in its space's knob order (Config.params less the names)
_CONTEXT = frozenset({"gpu", "problem"})  # fixed per Screen: no part of what a value is remembered by
_MISSING = object()


class Screen:
    """The static rules of ``space`` on ``gpu`` and ``problem``, for screening many candidates.

    Each method takes knob values as :meth:`SearchSpace.config` does (every knob, each one of its
    listed values; knobs with a ``[defaults]`` entry may be left out), assumed valid: they are not
    checked, so screen values drawn from the knobs' choices.

    Raises (every method):
        SpaceError: where :meth:`SearchSpace.check` of the same config raises it (an expression
            that cannot be computed, a shared-memory launch value that is not a whole number).
    """

    def __init__(self, space: SearchSpace, gpu: GpuSpec, problem: GemmProblem):
        self.space, self.gpu, self.problem = space, gpu, problem
        self._bound = {"gpu": gpu, "problem": problem, **space.layout_values(), **space.defaults}
        knobs = tuple(space.knobs)
        self._knob_values = operator.itemgetter(*knobs) if len(knobs) > 1 else lambda names: (names[knobs[0]],)
        self._runs_dtype = gpu.arch >= ELEMENTS[space.dtype].min_arch
        floats = _float_fields(gpu, problem)  # names that may hold a float: grows with the derived values
        self._derived = []
        self._rederived = []  # the derived values a [specialize] knob may change: those that read one, or read those
        specialized = set(space.specialized)
        for name, expression in space.derived.items():
            entry = (name, *_remembered(expression.names, expression, floats))
            self._derived.append(entry)
            if _may_be_float(expression, floats):
                floats.add(name)
            if specialized.intersection(expression.names):
                self._rederived.append(entry)
                specialized.add(name)
        self._specialized = [(knob, *_remembered(expression.names, _truth(expression), floats))
                             for knob, expression in space.specialized.items()]
        self._rules = [_remembered(rule.require.names, _passes_rule(space, rule), floats)
                       for rule in space.rules_for(problem)]
        self._smem = _remembered(space.smem_names, lambda names: space.smem_violation(names, gpu) is None, floats)

    def admits(self, values: dict[str, int]) -> bool:
        """Whether ``space.check(space.for_problem(space.config(values), gpu, problem), gpu, problem)``
        finds the config feasible."""
        return self._passes(self._set_up(values))

    def set_up(self, values: dict[str, int]) -> tuple[KnobValues, bool]:
        """The knob values (in the space's knob order) of ``space.for_problem(space.config(values), gpu,
        problem)``, and whether :meth:`SearchSpace.check` finds that config feasible."""
        names = self._set_up(values)
        return self._knob_values(names), self._passes(names)

    def passes(self, values: dict[str, int]) -> bool:
        """Whether ``space.check(space.config(values), gpu, problem)`` finds the config feasible: its
        ``[specialize]`` knobs as ``values`` give them, not as the problem sets them."""
        names = {**self._bound, **values}
        self._derive(names)
        return self._passes(names)

    def _set_up(self, values: dict[str, int]) -> dict[str, Any]:
        """The names ``check`` reads of the config ``for_problem`` makes of ``values``: the knob values
        with each ``[specialize]`` knob as the problem sets it, and the derived values of those."""
        names = {**self._bound, **values}
        self._derive(names)
        if self._specialized:
            set_by_problem = [(knob, _value(names, read, memo, compute))
                              for knob, read, memo, compute in self._specialized]
            changed = False
            for knob, value in set_by_problem:  # each computed from the values as given, as for_problem does
                if names[knob] != value:
                    names[knob] = value
                    changed = True
            if changed:  # the others read the same values as before: they would come out the same
                self._derive(names, self._rederived)
        return names

    def _derive(self, names: dict[str, Any], derived: list | None = None) -> None:
        """Every derived value in order (or those of ``derived``), into ``names`` (:meth:`SearchSpace.values`)."""
        for name, read, memo, compute in self._derived if derived is None else derived:
            if read is None:
                names[name] = compute(names)
                continue
            key = read(names)
            value = memo.get(key, _MISSING)
            if value is _MISSING:
                value = memo[key] = compute(names)
            names[name] = value

    def _passes(self, names: dict[str, Any]) -> bool:
        """What ``check`` says of the config of ``names``: its dtype runs on the GPU, then the rules in
        file order, then the shared-memory rule."""
        if not self._runs_dtype:
            return False
        for read, memo, compute in self._rules:  # _value, written out: this is the hot loop
            if read is None:
                passed = compute(names)
            else:
                key = read(names)
                passed = memo.get(key, _MISSING)
                if passed is _MISSING:
                    passed = memo[key] = compute(names)
            if not passed:
                return False
        read, memo, compute = self._smem
        return _value(names, read, memo, compute)


def _remembered(reads: frozenset[str], compute: Callable[[dict[str, Any]], Any], floats: set[str]
                ) -> tuple[Callable[[dict[str, Any]], Any] | None, dict, Callable[[dict[str, Any]], Any]]:
    """``(read, memo, compute)``: ``compute(names)``, which reads the names ``reads``, is remembered in ``memo``
    by ``read(names)``, the values of those that vary; ``read`` is None where one of them may be a float
    (computed every time)."""
    varying = sorted(reads - _CONTEXT)
    if floats.intersection(varying):
        return None, {}, compute
    read = operator.itemgetter(*varying) if varying else _nothing
    return read, {}, compute


def _value(names: dict[str, Any], read, memo: dict, compute) -> Any:
    """``compute(names)``, remembered in ``memo`` by ``read(names)`` (:func:`_remembered`)."""
    if read is None:
        return compute(names)
    key = read(names)
    value = memo.get(key, _MISSING)
    if value is _MISSING:
        value = memo[key] = compute(names)
    return value


def _nothing(names: dict[str, Any]) -> tuple:
    """The key of an expression that reads no name that varies."""
    return ()


def _truth(expression: Expression) -> Callable[[dict[str, Any]], int]:
    """A ``[specialize]`` knob's value as :meth:`SearchSpace.for_problem` sets it."""
    return lambda names: int(bool(expression(names)))


def _passes_rule(space: SearchSpace, rule: Rule) -> Callable[[dict[str, Any]], bool]:
    """Whether a rule holds, as :meth:`SearchSpace.check` asks it."""
    return lambda names: space.rule_violation(rule, names) is None


def _float_fields(gpu: GpuSpec, problem: GemmProblem) -> set[str]:
    """``gpu.FIELD`` and ``problem.FIELD`` (as written in an expression) whose value is a float."""
    contexts = (("gpu", gpu, GPU_FIELDS), ("problem", problem, PROBLEM_FIELDS))
    return {f"{context}.{field}" for context, value, fields in contexts
            for field in fields if isinstance(getattr(value, field), float)}


def _may_be_float(expression: Expression, floats: set[str]) -> bool:
    """Whether the expression's value can be a float: it divides with ``/``, writes a float, or reads a
    name or a field that can be one. (Every other operation of the language gives an integer or a truth
    of integers and truths, or None where it divides by zero.)"""
    if floats.intersection(expression.names):
        return True
    for node in ast.walk(ast.parse(expression.text, mode="eval")):
        if isinstance(node, ast.Div) or (isinstance(node, ast.Constant) and isinstance(node.value, float)):
            return True
        if isinstance(node, ast.Attribute) and f"{node.value.id}.{node.attr}" in floats:  # type: ignore[attr-defined]
            return True
    return False
