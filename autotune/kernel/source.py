"""The CUDA source of one config: what rendering makes and compiling takes.

A module of its own, so that a compile process, which receives sources, loads
neither Jinja nor the search spaces.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class KernelSource:
    """CUDA source for one config; ``entry`` is its ``extern "C"`` symbol, ``target`` the NVRTC
    target it is meant for (``sm_90``, ``sm_90a``; empty when the compiler is told), ``headers``
    the files of its family's folder that it includes, as (name, text), handed to NVRTC in memory."""

    entry: str
    code: str
    template_hash: str
    target: str = ""
    headers: tuple[tuple[str, str], ...] = ()
