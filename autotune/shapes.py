"""Named sets of GEMM shapes, shape files, and which shape is nearest: what a sweep tunes, what a table is
judged on, and how both find the tuned shape nearest to another.

A shape set is a list of ``(m, n, k)``. ``llm`` holds the projections of common
transformer layers (A is tokens x hidden, B the weight), with M, the token count,
from 1 (decoding one sequence) to 16384 (a long prefill); ``llm-held-out`` holds
other layers and other token counts, never used to build a table, on which its
picks are judged; ``grid`` is a coarse grid of tall, wide, long-K and square
shapes. A shape file holds one shape per line in ``--shape`` syntax (``4096`` or
``MxNxK``); ``#`` starts a comment.
"""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

from autotune.errors import InputError
from autotune.problem import parse_shape

Shape = tuple[int, int, int]

MAX_SWEEP_FLOPS = 2**40  # shapes above this cost seconds per candidate: left out of the built-in sets

# (N, K) of one projection: (output features, input features).
LLM_LAYERS: tuple[tuple[int, int], ...] = (
    (4096, 4096),    # attention output, 4096 hidden (Llama-3-8B, Mistral-7B)
    (6144, 4096),    # fused QKV with grouped-query attention, 4096 hidden
    (14336, 4096),   # MLP up / gate, 4096 hidden
    (4096, 14336),   # MLP down, 4096 hidden
)
LLM_TOKENS: tuple[int, ...] = (1, 4, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384)

HELD_OUT_LAYERS: tuple[tuple[int, int], ...] = (
    (11008, 4096),   # MLP up / gate, Llama-2-7B
    (4096, 11008),   # MLP down, Llama-2-7B
    (5120, 5120),    # attention output, 5120 hidden (Llama-2-13B)
)
HELD_OUT_TOKENS: tuple[int, ...] = (2, 8, 32, 128, 512, 2048, 8192)

GRID_SIZES: tuple[int, ...] = (256, 1024, 4096)
GRID_LONG_K: tuple[int, ...] = (16384,)


def _affordable(shapes) -> list[Shape]:
    return [s for s in shapes if 2 * s[0] * s[1] * s[2] <= MAX_SWEEP_FLOPS]


def llm_shapes() -> list[Shape]:
    """Every LLM_TOKENS count against every LLM_LAYERS projection (the affordable ones)."""
    return _affordable((m, n, k) for n, k in LLM_LAYERS for m in LLM_TOKENS)


def held_out_shapes() -> list[Shape]:
    """Other layers at other token counts; two token counts per layer (alternating), so the set stays small."""
    shapes = []
    for i, (n, k) in enumerate(HELD_OUT_LAYERS):
        shapes += [(m, n, k) for m in HELD_OUT_TOKENS[i % 2::2]]
    return _affordable(shapes)


def grid_shapes() -> list[Shape]:
    """M, N and K over GRID_SIZES (tall, wide and square), plus long-K shapes of small M x N."""
    shapes = list(itertools.product(GRID_SIZES, repeat=3))
    shapes += [(m, n, k) for m in GRID_SIZES[:2] for n in GRID_SIZES[:2] for k in GRID_LONG_K]
    return _affordable(shapes)


SHAPE_SETS = {"llm": llm_shapes, "llm-held-out": held_out_shapes, "grid": grid_shapes}


_WRITTEN_OUT = re.compile(r"\s*\d+(x\d+x\d+)?\s*(,\s*\d+(x\d+x\d+)?\s*)*")  # shapes, not a file name


def read_shapes(spec: str) -> list[Shape]:
    """The shapes of a set name (``llm``, ``llm-held-out``, ``grid``), of a shape file, or written out
    (``4096x4096x1024,77x4096x14336``: shapes separated by commas), in order, without repeats."""
    if spec in SHAPE_SETS:
        return SHAPE_SETS[spec]()
    path = Path(spec)
    if not path.is_file() and _WRITTEN_OUT.fullmatch(spec):
        try:
            return list(dict.fromkeys(parse_shape(text.strip()) for text in spec.split(",")))
        except InputError as error:
            raise InputError("--shapes", spec, error.valid) from None
    if not path.is_file():
        raise InputError("--shapes", spec, f"a shape file, shapes written out (4096,77x4096x14336) or one of "
                                           f"{', '.join(SHAPE_SETS)}")
    shapes: list[Shape] = []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            shape = parse_shape(text)
        except InputError as error:
            raise InputError(f"{spec}:{number}", text, error.valid) from None
        if shape not in shapes:
            shapes.append(shape)
    if not shapes:
        raise InputError("--shapes", spec, "a file with at least one shape (4096 or MxNxK per line)")
    return shapes


def nearest(items, shape: tuple[int, int, int], shape_of):
    """The item whose tuned shape (``shape_of(item)``) is nearest to ``shape``: the least
    |log m - log m'| + |log n - log n'| + |log k - log k'| (rounded to 9 decimals), a tie going
    to the larger tuned shape, then to the earlier item. The one rule of every selection table."""

    def key(item):
        tuned = shape_of(item)
        distance = sum(abs(math.log(x) - math.log(y)) for x, y in zip(tuned, shape))
        return round(distance, 9), -tuned[0] * tuned[1] * tuned[2]

    return min(items, key=key)


CARRIED_FACTOR = 2  # a tuned kernel's time is carried from the nearest tuned shape no farther than this, per axis


def farther_than_carried(there: tuple[int, int, int], here: tuple[int, int, int]) -> bool:
    """Whether ``here`` is more than CARRIED_FACTOR times ``there``, or less than 1 / CARRIED_FACTOR of it, on some
    axis (in integers, as the C library compares them). On the H200, every kernel carried 4x or 8x along an axis
    ran 7-35% slower than its carried time predicted (bench/NOTES.md, "How far a tuned kernel's time carries")."""
    return any(a > CARRIED_FACTOR * b or b > CARRIED_FACTOR * a for a, b in zip(here, there))
