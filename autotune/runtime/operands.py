"""Arrays from any GPU library as operands: CuPy arrays, ``__cuda_array_interface__``, DLPack.

Nothing is copied: a PyTorch CUDA tensor is described by its data pointer and
strides (a Parameter or a tensor that requires grad included), anything else
becomes a CuPy view of the same memory. An array in host memory (NumPy, a CPU
tensor) is refused with what to pass instead, and so is an output whose memory
overlaps an input's.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy

from autotune.problem import ELEMENTS

# The dtype of an array's element type, by its name: float32 -> f32, float16 -> f16, bfloat16 -> bf16 (a
# PyTorch tensor; CuPy and NumPy have no bfloat16, and bf16 bit patterns in uint16 are not taken for it).
_DTYPES = {element.array_dtype: name for name, element in ELEMENTS.items()}
TAKEN = ", ".join(element.array_dtype for element in ELEMENTS.values())  # for messages


class Operand(NamedTuple):
    """One matrix of a call, as the dispatcher sees it (a tuple: cheap to make on every call)."""

    array: Any  # what the device computes on: a cupy.ndarray or a torch.Tensor (a numpy.ndarray on the host device)
    shape: tuple[int, ...]
    element: Any  # the array's numpy dtype
    row_major: bool  # C-contiguous
    pointer: int
    device: int
    column_major: bool = False  # F-contiguous and not C-contiguous: the transpose of a row-major matrix (W.T)

    @property
    def dtype(self) -> str | None:
        """``"f32"``, ``"f16"`` or ``"bf16"``; None for a dtype no tuned kernel takes."""
        return _DTYPES.get(self.dtype_name)

    @property
    def dtype_name(self) -> str:
        """``"float32"``, ``"bfloat16"``, ...: for messages."""
        return str(self.element).removeprefix("torch.")

    @property
    def itemsize(self) -> int:
        return self.array.itemsize


def refuse_host_memory(value: Any, what: str) -> None:
    """Raise InputError, saying what to pass instead, for an array in host memory: a NumPy array (or
    anything with ``__array_interface__`` and no ``__cuda_array_interface__``) or a PyTorch CPU tensor."""
    from autotune.errors import InputError

    if is_torch(value) and getattr(getattr(value, "device", None), "type", None) == "cpu":
        raise InputError(what, "a PyTorch tensor on the CPU", "a CUDA tensor: x.cuda() moves it to the GPU")
    if isinstance(value, numpy.ndarray) or (hasattr(value, "__array_interface__")
                                            and not hasattr(value, "__cuda_array_interface__")):
        raise InputError(what, f"{type(value).__module__}.{type(value).__name__} (host memory)",
                         "a GPU array: cupy.asarray(x) copies a NumPy array to the GPU")


def refuse_unscaled(dtype_name: str) -> None:
    """InputError for a dtype no GEMM here multiplies without more arguments: fp8 needs scales."""
    if "float8" in dtype_name:
        from autotune.errors import InputError

        raise InputError("dtype", dtype_name.removeprefix("torch."), "float32, float16 or bfloat16 (an fp8 GEMM "
                         "needs scales: torch._scaled_mm)")


def flat_rows(value: Any, what: str) -> Any:
    """``value`` (``... x cols``, C-contiguous) as one ``rows x cols`` matrix, a view of the same memory;
    a matrix, or None, as it is. InputError where no view can be made (the rows are not laid out one
    after another)."""
    shape = getattr(value, "shape", None)
    if shape is None or len(shape) <= 2:
        return value
    from autotune.errors import InputError

    contiguous = value.is_contiguous() if is_torch(value) else getattr(getattr(value, "flags", None),
                                                                         "c_contiguous", False)
    if not contiguous:
        raise InputError(f"{what}.shape", tuple(shape), "a matrix, or a C-contiguous array of more dimensions "
                         "(its rows are one matrix's): .contiguous() makes one")
    return value.reshape(-1, shape[-1])


def refuse_autograd(*values: Any) -> None:
    """InputError for a PyTorch tensor that requires grad while grad mode is on: :func:`autotune.gemm` records
    nothing for autograd (``autotune.torch.gemm`` does; under ``torch.no_grad()`` or ``inference_mode`` any
    tensor is taken)."""
    if not any(is_torch(value) and value.requires_grad for value in values):
        return
    import torch

    if torch.is_grad_enabled():
        from autotune.errors import InputError

        raise InputError("a, b", "a tensor that requires grad (grad mode is on)",
                         "autotune.torch.gemm, which autograd can differentiate, or a call under "
                         "torch.no_grad() or torch.inference_mode()")


def overlaps(x: Operand, y: Operand) -> bool:
    """Whether the memory ranges of two operands' elements overlap (they are on one device)."""
    if x.array is None or y.array is None or x.device != y.device:
        return False
    (x_low, x_high), (y_low, y_high) = _extent(x), _extent(y)
    return x_low < y_high and y_low < x_high


def _extent(operand: Operand) -> tuple[int, int]:
    """The first byte of ``operand``'s elements and the byte past its last."""
    array = operand.array
    if operand.row_major and len(operand.shape) == 2:  # one block of rows x cols elements
        rows, cols = operand.shape
        return operand.pointer, operand.pointer + rows * cols * operand.itemsize
    low = high = operand.pointer
    for size, stride in zip(array.shape, _byte_strides(array)):
        if size == 0:
            return operand.pointer, operand.pointer
        low, high = low + min(0, (size - 1) * stride), high + max(0, (size - 1) * stride)
    return low, high + array.itemsize


def _byte_strides(array: Any) -> tuple[int, ...]:
    if is_torch(array):
        return tuple(stride * array.itemsize for stride in array.stride())
    return array.strides


def describe(array: Any, device: int, pointer: int) -> Operand:
    """An Operand for an array with numpy-like ``shape``, ``dtype`` and ``flags``."""
    row_major = array.flags.c_contiguous
    return Operand(array, array.shape, array.dtype, row_major, pointer, device,
                   not row_major and array.flags.f_contiguous)


def is_torch(value: Any) -> bool:
    return type(value).__module__.startswith("torch")


def torch_operand(tensor: Any, what: str) -> Operand:
    """An Operand for a PyTorch CUDA tensor, read from the tensor itself (pointer, strides, device): no
    CuPy view, so a Parameter or a tensor that requires grad is described like any other."""
    refuse_host_memory(tensor, what)
    element = torch_element(tensor.dtype)
    row_major = tensor.is_contiguous()
    return Operand(tensor, tuple(tensor.shape), element, row_major, tensor.data_ptr(), tensor.device.index,
                   not row_major and tensor.dim() == 2 and tensor.t().is_contiguous())


def torch_element(dtype: Any) -> Any:
    """The numpy dtype of a torch dtype tuned kernels take (float32, float16), else the torch dtype itself."""
    name = str(dtype).removeprefix("torch.")
    return numpy.dtype(name) if name in ("float32", "float16") else dtype


def as_cupy(value: Any, what: str):
    """A CuPy view of ``value`` (a CuPy array, an object with ``__cuda_array_interface__`` or DLPack).

    Raises:
        InputError: an array in host memory, or anything else that is not a GPU array.
    """
    refuse_host_memory(value, what)
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
