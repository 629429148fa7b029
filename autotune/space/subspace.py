"""A family restricted to some of its knobs' values: a sub-space small enough to measure whole.

The restricted space is the family itself (its template, rules, launch, template hash and config
names), with fewer values per knob; its seeds are those of the family that lie inside it. A config
of the sub-space is a config of the family, so what is measured on one is a result of the other.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping

from autotune.errors import InputError
from autotune.space.family import SearchSpace


def restrict(space: SearchSpace, values: Mapping[str, Iterable[int]]) -> SearchSpace:
    """``space`` with each knob named in ``values`` limited to those values (in the family's order).

    Raises:
        InputError: an unknown knob, a value the knob does not have, or no value at all.
    """
    knobs = dict(space.knobs)
    for knob, chosen in values.items():
        if knob not in knobs:
            raise InputError("knob", knob, ", ".join(space.knobs))
        chosen = set(chosen)
        if not chosen:
            raise InputError(knob, "no value", ", ".join(map(str, space.knobs[knob])))
        unknown = sorted(chosen - set(space.knobs[knob]))
        if unknown:
            raise InputError(knob, unknown[0], ", ".join(map(str, space.knobs[knob])))
        knobs[knob] = tuple(value for value in space.knobs[knob] if value in chosen)
    restricted = copy.copy(space)
    restricted.knobs = knobs
    restricted.seeds = [seed for seed in space.seeds if all(value in knobs[knob] for knob, value in seed.params)]
    return restricted
