"""The runtime's routes without a GPU: the prepared cuBLAS call's arguments, and CuPy routes on a stand-in
device (launches recorded, cuBLAS recorded): pointers, a new output, an overlapping ``out`` or another current
device sent back to the full path."""

from __future__ import annotations

import ctypes
import sys
import types

import numpy
import pytest

from autotune.runtime import routes
from autotune.runtime.dispatch import Decision
from autotune.runtime.operands import Operand

CUDA_R_16F, CUBLAS_OP_N, CUBLAS_OP_T, COMPUTE_32F, GEMM_DEFAULT = 2, 0, 1, 68, -1


@pytest.fixture
def cublas_calls(monkeypatch):
    """cuBLAS's gemmEx as CuPy exposes it, recording its arguments and the two scalars its pointers hold."""
    calls = []

    def gemm_ex(handle, *arguments):
        alpha, beta = (ctypes.c_float.from_address(arguments[5]).value,
                       ctypes.c_float.from_address(arguments[12]).value)
        calls.append((handle, arguments, alpha, beta))

    fake = types.SimpleNamespace(gemmEx=gemm_ex, setPointerMode=lambda handle, mode: calls.append(("mode", mode)))
    monkeypatch.setitem(sys.modules, "cupy_backends.cuda.libs.cublas", fake)
    import cupy_backends.cuda.libs

    monkeypatch.setitem(vars(cupy_backends.cuda.libs), "cublas", fake)  # no lazy load of libcublas
    import cupy

    monkeypatch.setattr(cupy.cuda.device, "get_cublas_handle", lambda: 42)
    return calls


@pytest.mark.parametrize("transpose_b", [False, True])
def test_the_prepared_cublas_call_is_the_row_major_product_as_cublas_s_column_major_one(cublas_calls, transpose_b):
    from autotune.gpu.measure import CublasCall

    m, n, k = 3, 5, 7
    call = CublasCall(m, n, k, CUDA_R_16F, transpose_b=transpose_b)
    call(1000, 2000, 3000)
    call(1000, 2000, 3000, alpha=0.5, beta=2.0)
    assert cublas_calls[0] == ("mode", 0) and cublas_calls[2] == ("mode", 0)  # host pointer mode
    for (handle, arguments, alpha, beta), scalars in zip(cublas_calls[1::2], ((1.0, 0.0), (0.5, 2.0))):
        # C^T = B^T A^T in column-major terms: B first (transposed back where it is stored n x k), ld = row length
        assert handle == 42 and (alpha, beta) == scalars
        assert arguments[:5] == (CUBLAS_OP_T if transpose_b else CUBLAS_OP_N, CUBLAS_OP_N, n, m, k)
        assert arguments[6:9] == (2000, CUDA_R_16F, k if transpose_b else n)
        assert arguments[9:12] == (1000, CUDA_R_16F, k)
        assert arguments[13:] == (3000, CUDA_R_16F, n, COMPUTE_32F, GEMM_DEFAULT)


class _Array:
    """What a CuPy route reads of an array: its data pointer and device."""

    def __init__(self, pointer: int, shape=(), device: int = 0):
        self.data = types.SimpleNamespace(ptr=pointer, device_id=device)
        self.shape = shape


class _Device:
    """A CupyDevice stand-in: CuPy's current device and stream, new arrays at fresh addresses, launches recorded."""

    def __init__(self):
        self.index, self.current, self.launches, self.next = 0, 0, [], 1 << 20
        runtime = types.SimpleNamespace(getDevice=lambda: self.current)
        self.cupy = types.SimpleNamespace(
            cuda=types.SimpleNamespace(runtime=runtime, get_current_stream=lambda: types.SimpleNamespace(ptr=77)),
            empty=self._empty)

    def _empty(self, shape, dtype):
        self.next += 1 << 20
        return _Array(self.next, shape)

    def launch_pointers(self, *arguments):
        self.launches.append(arguments)


def _operands(m, n, k, element=numpy.dtype("float16"), b_row_major=True):
    shapes = ((m, k), (k, n), (m, n))
    return [Operand(numpy.empty(shape, element), shape, element, row_major, 0, 0, not row_major)
            for shape, row_major in zip(shapes, (True, b_row_major, True))]


def test_a_cupy_kernel_route_launches_by_pointers_and_leaves_what_it_cannot_take_to_the_full_path():
    device, kernel = _Device(), object()
    m, n, k = 4, 8, 16
    decision = Decision("f16", (m, n, k), kernel, None, "", "")
    route = routes.route_for(device, "sm_90", *_operands(m, n, k), decision)
    assert type(route) is routes.CupyKernel
    a, b = _Array(0x1000), _Array(0x2000)  # a: 128 bytes, b: 256 bytes
    new = route(a, b, None, 1.0, 0.0)
    assert new.shape == (m, n)
    out = _Array(0x3000)
    assert route(a, b, out, 0.5, 1.0) is out
    assert device.launches == [(kernel, "sm_90", (m, n, k), 77, 0x1000, 0x2000, new.data.ptr, 2, 1.0, 0.0),
                               (kernel, "sm_90", (m, n, k), 77, 0x1000, 0x2000, 0x3000, 2, 0.5, 1.0)]
    assert route(a, b, _Array(0x1000 + 128 - 16), 1.0, 0.0) is None  # out starts in a's last 16 bytes
    assert route(a, b, _Array(0x2000 - 63), 1.0, 0.0) is None  # out's 64 bytes end inside b
    assert route(a, b, _Array(0x2000 - 64), 1.0, 0.0) is not None  # out ends where b starts
    device.current = 1
    assert route(a, b, None, 1.0, 0.0) is None  # another device is current: the full path switches to it
    assert len(device.launches) == 3


def test_a_cupy_cublas_route_is_one_prepared_call_and_other_dtypes_or_layouts_take_the_full_path(cublas_calls):
    device = _Device()
    m, n, k = 4, 8, 16
    decision = Decision("f16", (m, n, k), None, None, "", "")
    route = routes.route_for(device, None, *_operands(m, n, k, b_row_major=False), decision)  # b = W.T
    assert type(route) is routes.CupyCublas
    out = route(_Array(0x1000), _Array(0x2000), None, 2.0, 0.0)
    (handle, arguments, alpha, beta), = [call for call in cublas_calls if call[0] != "mode"]
    assert arguments[0] == CUBLAS_OP_T and (arguments[6], arguments[9], arguments[13]) == (0x2000, 0x1000,
                                                                                          out.data.ptr)
    assert (alpha, beta) == (2.0, 0.0)
    float64 = _operands(m, n, k, numpy.dtype("float64"))
    assert routes.route_for(device, None, *float64, decision) is None  # cuBLAS through CuPy's matmul each time
    strided = _operands(m, n, k)
    strided[1] = strided[1]._replace(row_major=False)  # neither row- nor column-major
    assert routes.route_for(device, None, *strided, decision) is None
