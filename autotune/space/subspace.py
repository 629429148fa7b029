"""A family restricted to some of its knobs' values: a sub-space small enough to measure whole.

The restricted space is the family itself (its template, rules, launch, template hash and config
names), with fewer values per knob; its seeds are those of the family that lie inside it. A config
of the sub-space is a config of the family, so what is measured on one is a result of the other.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence

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


def pin(space: SearchSpace, pins: Mapping[str, Sequence[int]]) -> SearchSpace:
    """``space`` with the knobs of ``pins`` (``--pin KNOB=V,...``) limited to those values; a search over
    it keeps a study of its own (:attr:`SearchSpace.pins` names it), its results those of the family.

    Raises:
        InputError: (naming ``--pin``) an unknown knob or a value the knob does not have.
    """
    for knob, values in pins.items():
        if knob not in space.knobs:
            raise InputError("--pin", knob, "a knob of " + space.family + ": " + ", ".join(space.knobs))
        for value in values:
            if value not in space.knobs[knob]:
                raise InputError("--pin", f"{knob}={value}",
                                 f"a value of {knob}: " + ", ".join(map(str, space.knobs[knob])))
    pinned = restrict(space, pins)
    pinned.pins = dict(sorted({**space.pins, **{knob: pinned.knobs[knob] for knob in pins}}.items()))
    return pinned
