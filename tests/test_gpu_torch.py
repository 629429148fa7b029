"""autotune for PyTorch on a GPU: the operator and Linear run tuned kernels on CUDA tensors (Parameters and
3-D activations included), on PyTorch's current stream, under torch.compile; what no tuned kernel serves
(bf16 where the table has no bf16 rules) runs on PyTorch's matmul."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

import autotune  # noqa: E402
import autotune.torch as at  # noqa: E402
from autotune.errors import InputError  # noqa: E402

pytestmark = pytest.mark.gpu

SHAPES = [(1024, 1024, 1024), (4096, 4096, 4096), (2048, 2048, 2048), (1000, 2000, 3000), (512, 4096, 4096),
          (8192, 8192, 8192)]


def _kernel_shape(dtype) -> tuple[int, int, int]:
    """The first of SHAPES the operator runs a tuned kernel at (as a row-major product, its host time counted)."""
    for m, n, k in SHAPES:
        decision = at.explain(torch.empty(m, k, dtype=dtype, device="cuda"),
                              torch.empty(k, n, dtype=dtype, device="cuda"))
        if not decision.uses_cublas:
            return m, n, k
    pytest.fail(f"the operator runs cuBLAS at every one of {SHAPES} for {dtype}")


def _reference(a, b):
    return (a.double().reshape(-1, a.shape[-1]) @ b.double()).reshape(*a.shape[:-1], b.shape[1])


def _close(got, expected, dtype):
    scale = expected.abs().max().item()
    error = (got.double() - expected).abs().max().item() / scale
    assert error < (2e-2 if dtype != torch.float32 else 1e-4), error


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_the_operator_runs_tuned_kernels_on_parameters_and_3d_activations(dtype):
    m, n, k = _kernel_shape(dtype)
    torch.manual_seed(0)
    a = torch.randn(2, m // 2, k, dtype=dtype, device="cuda")
    weight = torch.nn.Parameter(torch.randn(k, n, dtype=dtype, device="cuda") / k ** 0.5)
    assert not at.explain(a, weight).uses_cublas
    result = at.gemm(a, weight)
    assert result.shape == (2, m // 2, n) and result.requires_grad
    _close(result, _reference(a, weight), dtype)
    result.float().square().mean().backward()
    assert weight.grad is not None and weight.grad.shape == (k, n)
    with torch.inference_mode():
        out = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
        assert autotune.gemm(a.reshape(m, k), weight, out=out) is out
        _close(out, _reference(a.reshape(m, k), weight), dtype)


def test_a_side_stream_is_the_stream_the_kernel_runs_on():
    m, n, k = _kernel_shape(torch.float16)
    a = torch.randn(m, k, dtype=torch.float16, device="cuda")
    b = torch.randn(k, n, dtype=torch.float16, device="cuda") / k ** 0.5
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        result = at.gemm(a, b)
    side.synchronize()
    _close(result, _reference(a, b), torch.float16)


def test_linear_matches_nn_linear_under_torch_compile_and_says_why_it_runs_pytorch_s_matmul():
    m, n, k = _kernel_shape(torch.float16)
    torch.manual_seed(0)
    plain = torch.nn.Linear(k, n, bias=True, dtype=torch.float16, device="cuda")
    layer = at.Linear(k, n, bias=True, dtype=torch.float16, device="cuda")
    layer.load_state_dict(plain.state_dict())
    x = torch.randn(m, k, dtype=torch.float16, device="cuda")
    assert "not C-contiguous" in at.explain(x, layer.weight.t()).reason  # no tuned kernel takes b transposed
    compiled = torch.compile(layer, fullgraph=True)
    with torch.inference_mode():
        expected = torch.nn.functional.linear(x.double(), plain.weight.double(), plain.bias.double())
        _close(compiled(x), expected, torch.float16)
        layer.weight.data = layer.weight.data.t().contiguous().t()  # stored in x out: a kernel serves x @ W.T
        assert not at.explain(x, layer.weight.t()).uses_cublas
        _close(layer(x), expected, torch.float16)


def test_bf16_runs_a_tuned_kernel_or_pytorch_s_matmul_and_fp8_is_one_clear_error():
    a = torch.randn(256, 512, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(512, 128, dtype=torch.bfloat16, device="cuda")
    decision = autotune.explain(a, b)  # a bf16 kernel where the table has bf16 rules (tests/test_gpu_bf16.py)
    assert decision.dtype == "bf16" and (not decision.uses_cublas or "bf16" in decision.reason), decision.reason
    _close(at.gemm(a, b), _reference(a, b), torch.bfloat16)
    _close(autotune.gemm(a, b), _reference(a, b), torch.bfloat16)
    with pytest.raises(InputError, match="_scaled_mm"):
        at.gemm(a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn))


def test_a_gemm_too_short_to_repay_the_operator_s_host_time_runs_on_pytorch_s_matmul():
    a = torch.randn(16, 4096, dtype=torch.float16, device="cuda")
    b = torch.randn(4096, 14336, dtype=torch.float16, device="cuda") / 64
    assert not autotune.explain(a, b).uses_cublas  # the table alone prefers its kernel
    decision = at.explain(a, b)
    assert decision.uses_cublas and "host" in decision.reason
    _close(at.gemm(a, b), _reference(a, b), torch.float16)
    layer = at.Linear(4096, 14336, bias=False, dtype=torch.float16, device="cuda")
    with torch.inference_mode():
        _close(layer(a), _reference(a, layer.weight.t()), torch.float16)
