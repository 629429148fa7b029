"""Arrays from any GPU library as operands: CuPy arrays, ``__cuda_array_interface__``, DLPack.

Nothing is copied: a PyTorch CUDA tensor becomes a CuPy view of the same memory.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy

_DTYPES = {numpy.dtype(numpy.float32): "f32", numpy.dtype(numpy.float16): "f16"}


class Operand(NamedTuple):
    """One matrix of a call, as the dispatcher sees it (a tuple: cheap to make on every call)."""

    array: Any  # what the device computes on: a cupy.ndarray (a numpy.ndarray on the host device)
    shape: tuple[int, ...]
    element: Any  # the array's numpy dtype
    row_major: bool  # C-contiguous
    pointer: int
    device: int

    @property
    def dtype(self) -> str | None:
        """``"f32"`` or ``"f16"``; None for a dtype no tuned kernel takes."""
        return _DTYPES.get(self.element)

    @property
    def dtype_name(self) -> str:
        """``"float32"``, ``"bfloat16"``, ...: for messages."""
        return str(self.element)


def describe(array: Any, device: int, pointer: int) -> Operand:
    """An Operand for an array with numpy-like ``shape``, ``dtype`` and ``flags``."""
    return Operand(array, array.shape, array.dtype, array.flags.c_contiguous, pointer, device)


def is_torch(value: Any) -> bool:
    return type(value).__module__.startswith("torch")


def as_cupy(value: Any, what: str):
    """A CuPy view of ``value`` (a CuPy array, an object with ``__cuda_array_interface__`` or DLPack)."""
    cupy = _cupy()
    if type(value) is cupy.ndarray or isinstance(value, cupy.ndarray):
        return value
    if hasattr(value, "__cuda_array_interface__"):
        return cupy.asarray(value)
    from autotune.errors import InputError

    if hasattr(value, "__dlpack__"):
        try:
            return cupy.from_dlpack(value)
        except (TypeError, ValueError, BufferError, RuntimeError) as error:
            raise InputError(what, type(value).__name__, f"a GPU array ({error})") from None
    raise InputError(what, type(value).__name__,
                     "a CuPy array, or a GPU array with __cuda_array_interface__ or DLPack (a PyTorch CUDA tensor)")


_CUPY = None


def _cupy():
    global _CUPY
    if _CUPY is None:
        import cupy

        _CUPY = cupy
    return _CUPY
