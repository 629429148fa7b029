"""Search spaces: knobs and their values, static rules, and Config values."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Config:
    """One point of a search space: a frozen, hashable value with a deterministic name.

    The name is the kernel symbol, the database key and the dedup key at once.
    """

    family: str
    params: tuple[tuple[str, int], ...]  # (knob, value) in the space file's knob order

    @property
    def name(self) -> str:
        return self.family + "_" + "_".join(f"{knob.lower()}{value}" for knob, value in self.params)

    def as_dict(self) -> dict[str, int]:
        return dict(self.params)

    def __getitem__(self, knob: str) -> int:
        return self.as_dict()[knob]
