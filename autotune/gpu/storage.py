"""Elements as device arrays hold them: each dtype's storage (:class:`~autotune.problem.ElementType`).

A dtype NumPy and CuPy have (float32, float16) is stored as itself. bf16, which they lack, is stored
as the bit patterns of its elements in uint16: the upper half of the fp32 word, rounded to nearest
even. Every function here takes NumPy or CuPy arrays alike (only ``view``, ``astype`` and integer
arithmetic), so the conversions are checked offline.
"""

from __future__ import annotations

from typing import Any

from autotune.problem import ElementType

BF16_NAN_BITS = 0x7FC0  # a quiet NaN in bf16


def stored_as_bits(element: ElementType) -> bool:
    """Whether device arrays hold ``element`` as the bit patterns of an integer type (bf16)."""
    return element.storage != element.array_dtype


def narrow(values: Any, element: ElementType) -> Any:
    """fp32 ``values`` as arrays of ``element`` store them: cast, or for bf16 rounded to nearest even into
    uint16 bit patterns (NaN stays a NaN; no input here is one)."""
    if not stored_as_bits(element):
        return values.astype(element.storage)
    bits = values.astype("float32").view("uint32")
    rounded = (bits + (((bits >> 16) & 1) + 0x7FFF)) >> 16  # add half an ulp, and one more bit on a tie to odd
    return rounded.astype("uint16")


def widen(stored: Any, element: ElementType) -> Any:
    """fp32 values of arrays stored as ``element`` keeps them (:func:`narrow`); exact for every dtype here. An
    fp32 array is returned as it is (no copy): copy the result before writing into it."""
    if not stored_as_bits(element):
        return stored.astype("float32", copy=False)
    return (stored.astype("uint32") << 16).view("float32")


def fill_nan(out: Any, element: ElementType) -> None:
    """Poison ``out`` with NaN in ``element``'s storage, so that an element a kernel leaves unwritten fails."""
    out.fill(BF16_NAN_BITS if stored_as_bits(element) else float("nan"))
