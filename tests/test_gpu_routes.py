"""The runtime's routes on a GPU: a repeated ``autotune.gemm`` of one layout (CuPy arrays and PyTorch tensors,
a tuned kernel and cuBLAS, ``b`` row-major and ``W.T``) takes the route kept for it and gives what the first
call gave; an ``out`` that overlaps an input is still refused."""

from __future__ import annotations

import cupy
import numpy
import pytest

import autotune
from autotune.errors import InputError
from autotune.runtime import routes

pytestmark = pytest.mark.gpu

CUBLAS_SHAPE = (33, 65, 129)  # n = 65: outside every tuned range, so cuBLAS


def _kernel_shape(dtype: str, layout: str) -> tuple[int, int, int]:
    """A tuned shape of the shipped table where ``autotune.gemm`` runs its kernel."""
    table = autotune.runtime.runtime_for(0).choice.table.for_layout(layout)[dtype]
    for rule in sorted(table.rules, key=lambda rule: rule.m * rule.n * rule.k):
        a, b = _operands(dtype, layout, rule.shape, seed=0)
        if not autotune.explain(a, b).uses_cublas:
            return rule.shape
    pytest.fail(f"the runtime runs cuBLAS at every {dtype} {layout} shape of the table")


def _operands(dtype: str, layout: str, shape, seed: int):
    m, n, k = shape
    rng = numpy.random.default_rng(seed)
    a = cupy.asarray(rng.standard_normal((m, k)), dtype=dtype_of(dtype))
    stored = (n, k) if layout == "nt" else (k, n)
    b = cupy.asarray(rng.standard_normal(stored) / 8, dtype=dtype_of(dtype))
    return a, (b.T if layout == "nt" else b)


def dtype_of(dtype: str):
    return {"f32": cupy.float32, "f16": cupy.float16}[dtype]


def _assert_close(got, a, b, alpha=1.0, beta=0.0, before=None):
    expected = alpha * (a.astype(cupy.float64) @ b.astype(cupy.float64))
    if beta:
        expected += beta * before.astype(cupy.float64)
    error = float(cupy.abs(got.astype(cupy.float64) - expected).max() / cupy.abs(expected).max())
    assert error < (2e-3 if got.dtype == cupy.float16 else 1e-5), error


def _route(a, b, out=None, beta=0.0):
    runtime = autotune.runtime.runtime_for(0)
    return runtime._routes.get(routes.layout_key(a, b, out, runtime.device.array_type, beta))


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("layout", ["row", "nt"])
@pytest.mark.parametrize("where", ["kernel", "cublas"])
def test_a_repeated_cupy_call_takes_its_route_and_gives_the_first_call_s_result(dtype, layout, where):
    if where == "kernel" and layout == "nt" and dtype == "f32":
        pytest.skip("no tuned f32 kernel of B stored N x K")
    shape = _kernel_shape(dtype, layout) if where == "kernel" else CUBLAS_SHAPE
    a, b = _operands(dtype, layout, shape, seed=1)
    first = autotune.gemm(a, b)
    route = _route(a, b)
    assert type(route) is (routes.CupyKernel if where == "kernel" else routes.CupyCublas)
    again = autotune.gemm(a, b)
    assert again.data.ptr != first.data.ptr
    assert cupy.array_equal(first, again)
    _assert_close(again, a, b)
    out = cupy.full(first.shape, cupy.nan, dtype=first.dtype)  # poisoned: every element must be written
    autotune.gemm(a, b, out=out)
    assert type(_route(a, b, out)) is type(route)
    autotune.gemm(a, b, out=out)  # the route's call, writing over the first
    _assert_close(out, a, b)
    before = cupy.asarray(numpy.random.default_rng(2).standard_normal(first.shape), dtype=first.dtype)
    scaled = before.copy()
    autotune.gemm(a, b, out=scaled, alpha=0.5, beta=2.0)
    _assert_close(scaled, a, b, 0.5, 2.0, before)
    kernel = autotune.explain(a, b, out).kernel  # with beta, a kernel that reads C slowly gives way to cuBLAS
    slow = kernel is not None and kernel.reads_c_slowly
    assert type(_route(a, b, scaled, beta=2.0)) is (routes.CupyCublas if slow else type(route))
    assert autotune.explain(a, b, out, beta=2.0).uses_cublas == (slow or where == "cublas")
    m, n, k = shape
    block = cupy.zeros(m * k + m * n, dtype=a.dtype)  # a, then an out whose first 16 bytes are a's last
    a_in_block = block[:m * k].reshape(m, k)
    a_in_block[...] = a
    autotune.gemm(a_in_block, b, out=out)  # the layout's route, made with an out apart from a
    assert type(_route(a_in_block, b, out)) is type(route)
    step = 16 // a.itemsize
    overlapping = block[m * k - step:m * k - step + m * n].reshape(m, n)
    with pytest.raises(InputError, match="shares no memory"):
        autotune.gemm(a_in_block, b, out=overlapping)


def test_a_repeated_torch_call_takes_its_route_and_gives_pytorch_s_result():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    m, n, k = _kernel_shape("f16", "row")
    a = torch.randn(m, k, dtype=torch.float16, device="cuda")
    weight = torch.nn.Parameter(torch.randn(k, n, dtype=torch.float16, device="cuda") / 8, requires_grad=False)
    for _ in range(2):
        got = autotune.gemm(a, weight)
        torch.testing.assert_close(got.double(), (a.double() @ weight.double()), rtol=2e-3, atol=2e-2)
    assert type(_route(a, weight)) is routes.TorchKernel
    small = torch.randn(CUBLAS_SHAPE[0], CUBLAS_SHAPE[2], dtype=torch.bfloat16, device="cuda")
    w = torch.randn(CUBLAS_SHAPE[2], CUBLAS_SHAPE[1], dtype=torch.bfloat16, device="cuda")
    out = torch.empty(CUBLAS_SHAPE[0], CUBLAS_SHAPE[1], dtype=torch.bfloat16, device="cuda")
    for _ in range(2):
        assert autotune.gemm(small, w, out=out, alpha=2.0) is out
        torch.testing.assert_close(out, 2.0 * (small @ w))
    assert type(_route(small, w, out)) is routes.TorchMatmul
