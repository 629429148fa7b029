"""The whole search space checked at once, skipping what a rule already rejects.

Checking configs one by one costs every rule for every combination of knob
values, and spaces run past a million combinations. :func:`survey` walks the
combinations as a tree, one knob per level in the space file's order, and
applies each rule as soon as the knobs it reads (directly, through derived
values, or in its reason) are bound: a subtree a rule rejects is counted, not
visited. Rules are still applied in file order and the shared-memory rule last,
so every config is rejected for the same reason as :meth:`SearchSpace.check`
gives it, and the feasible configs come in the same order as iterating the space.
"""

from __future__ import annotations

import dataclasses
import math
import string
from typing import Any

from autotune.gpus import GpuSpec
from autotune.problem import GemmProblem
from autotune.space import Config, Rule, SearchSpace, Verdict

_CONTEXT = ("gpu", "problem")  # bound before any knob


@dataclasses.dataclass
class Rejection:
    """Configs one rule rejected: how many, and the first reason given."""

    example: str
    count: int = 0


@dataclasses.dataclass
class Survey:
    feasible: list[Verdict]
    rejections: list[Rejection]  # most common first; the shared-memory rule split by its limit

    @property
    def rejected(self) -> int:
        return sum(r.count for r in self.rejections)


def survey(space: SearchSpace, gpu: GpuSpec, problem: GemmProblem | None = None,
           limit: int | None = None) -> Survey:
    """Every config of ``space`` on ``gpu``: the feasible ones, and rejection counts per rule.

    With ``limit``, the walk stops at that many feasible configs (the counts then cover only
    the part walked): ``limit=1`` asks cheaply whether the GPU can run the family at all.
    """
    return _Walk(space, gpu, problem, limit).run()


def feasible_configs(space: SearchSpace, gpu: GpuSpec, problem: GemmProblem | None = None) -> list[Config]:
    """The configs of ``space`` that pass every static rule on ``gpu``, in enumeration order."""
    return [verdict.config for verdict in survey(space, gpu, problem).feasible]


class _Walk:
    def __init__(self, space: SearchSpace, gpu: GpuSpec, problem: GemmProblem | None, limit: int | None):
        self.space, self.gpu, self.limit = space, gpu, limit
        self.knobs = list(space.knobs.items())
        level = {name: i for i, (name, _) in enumerate(self.knobs)}
        for name, expression in space.derived.items():  # a derived value is ready with its last knob
            level[name] = max((level.get(n, -1) for n in expression.names), default=-1)
        self.derived_at: list[list[str]] = [[] for _ in range(len(self.knobs) + 1)]
        for name in space.derived:
            self.derived_at[level[name] + 1].append(name)
        # (level, check): a check can run once the knobs up to its level are bound.
        self.checks: list[tuple[int, Rule | None]] = [
            (max((level.get(n, -1) for n in rule.require.names | _fields(rule.reason)), default=-1), rule)
            for rule in space.rules
        ]
        self.checks.append((max((level.get(n, -1) for n in space.smem_names), default=-1), None))
        self.below = [math.prod(len(values) for _, values in self.knobs[d:]) for d in range(len(self.knobs) + 1)]
        self.names: dict[str, Any] = {"gpu": gpu, "problem": problem}
        self.feasible: list[Verdict] = []
        self.groups: dict[Any, Rejection] = {}

    def run(self) -> Survey:
        self._derive(0)
        self._visit(0, 0)
        rejections = sorted(self.groups.values(), key=lambda r: -r.count)
        return Survey(self.feasible, rejections)

    def _visit(self, depth: int, check: int) -> None:
        """Bind knob ``depth`` onwards; checks before index ``check`` have passed."""
        while check < len(self.checks) and self.checks[check][0] < depth:
            rule = self.checks[check][1]
            if rule is None:
                reason = self.space.smem_violation(self.names, self.gpu)
                key = ("smem", reason.split(" KB > ")[-1]) if reason else None
            else:
                reason = self.space.rule_violation(rule, self.names)
                key = check
            if reason is not None:
                self.groups.setdefault(key, Rejection(reason)).count += self.below[depth]
                return
            check += 1
        if depth == len(self.knobs):
            params = tuple((name, self.names[name]) for name, _ in self.knobs)
            values = {k: v for k, v in self.names.items() if k not in _CONTEXT}
            self.feasible.append(Verdict(Config(self.space.family, params), values, None))
            return
        name, values = self.knobs[depth]
        for value in values:
            if self.limit is not None and len(self.feasible) >= self.limit:
                return
            self.names[name] = value
            self._derive(depth + 1)
            self._visit(depth + 1, check)

    def _derive(self, depth: int) -> None:
        for name in self.derived_at[depth]:
            self.names[name] = self.space.derived[name](self.names)


def _fields(reason: str) -> set[str]:
    """The names a reason's format fields read: ``{gpu.key}`` reads ``gpu``."""
    fields = set()
    for _, field, _, _ in string.Formatter().parse(reason):
        if field:
            fields.add(field.split(".")[0].split("[")[0])
    return fields
