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


def _nt_kernel_shape(dtype) -> tuple[int, int, int]:
    """A tuned shape of the table's nt layout (x @ W.T) where the operator runs its tuned kernel."""
    for rule in autotune.runtime.runtime_for(0).choice.table.for_layout("nt")[{torch.float16: "f16"}[dtype]].rules:
        x, w = torch.empty(rule.m, rule.k, dtype=dtype, device="cuda"), torch.empty(rule.n, rule.k, dtype=dtype, device="cuda")
        if not at.explain(x, w.t()).uses_cublas:
            return rule.m, rule.n, rule.k
    pytest.fail(f"the operator runs cuBLAS at every nt shape of the table for {dtype}")


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


def test_linear_runs_the_nt_kernel_of_its_weight_as_stored_under_torch_compile():
    m, n, k = _nt_kernel_shape(torch.float16)
    torch.manual_seed(0)
    plain = torch.nn.Linear(k, n, bias=True, dtype=torch.float16, device="cuda")
    layer = at.Linear(k, n, bias=True, dtype=torch.float16, device="cuda")
    layer.load_state_dict(plain.state_dict())
    x = torch.randn(m, k, dtype=torch.float16, device="cuda")
    decision = at.explain(x, layer.weight.t())  # the weight as nn.Linear stores it: out x in
    assert decision.layout == "nt" and decision.kernel.name.endswith("_nt"), decision.reason
    compiled = torch.compile(layer, fullgraph=True)
    with torch.inference_mode():
        expected = torch.nn.functional.linear(x.double(), plain.weight.double(), plain.bias.double())
        _close(compiled(x), expected, torch.float16)
        _close(layer(x), expected, torch.float16)
    strided = layer.weight.detach()[:, ::2]  # neither layout a kernel takes: PyTorch's matmul, saying why
    assert "not C-contiguous" in at.explain(x[:, ::2].contiguous(), strided.t()).reason


def test_bf16_runs_a_tuned_kernel_or_pytorch_s_matmul_and_fp8_is_one_clear_error():
    a = torch.randn(256, 4096, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(4096, 4096, dtype=torch.bfloat16, device="cuda") / 64
    decision = autotune.explain(a, b)  # inside the bf16 table's tuned range: its kernel, or cuBLAS as it picks
    assert decision.dtype == "bf16" and decision.pick is not None, decision.reason  # the bf16 table decided
    _close(at.gemm(a, b), _reference(a, b), torch.bfloat16)
    _close(autotune.gemm(a, b), _reference(a, b), torch.bfloat16)
    with pytest.raises(InputError, match="_scaled_mm"):
        at.gemm(a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn))


def test_a_gemm_too_short_to_repay_the_operator_s_host_time_runs_on_pytorch_s_matmul():
    table = autotune.runtime.runtime_for(0).choice.table.dtypes["f16"]
    m, n, k = next(rule.shape for rule in sorted(table.rules, key=lambda rule: rule.shape)
                   if rule.m <= 16 and not table.pick(*rule.shape).cublas)  # the table alone prefers its kernel
    a = torch.randn(m, k, dtype=torch.float16, device="cuda")
    b = torch.randn(k, n, dtype=torch.float16, device="cuda") / 64
    assert not autotune.explain(a, b).uses_cublas
    decision = at.explain(a, b)
    assert decision.uses_cublas and "host" in decision.reason
    _close(at.gemm(a, b), _reference(a, b), torch.float16)
    layer = at.Linear(k, n, bias=False, dtype=torch.float16, device="cuda")
    with torch.inference_mode():
        _close(layer(a), _reference(a, layer.weight.t()), torch.float16)


def test_a_layer_replayed_in_a_cuda_graph_runs_the_kernel_its_host_time_kept_from():
    table = autotune.runtime.runtime_for(0).choice.table.for_layout("nt")["f16"]
    for rule in sorted(table.rules, key=lambda rule: rule.shape):
        x = torch.empty(rule.m, rule.k, dtype=torch.float16, device="cuda")
        w = torch.empty(rule.n, rule.k, dtype=torch.float16, device="cuda")
        if at.explain(x, w.t()).uses_cublas and not at.explain(x, w.t(), cuda_graphs=True).uses_cublas:
            break
    else:
        pytest.fail("no nt shape of the table runs a kernel in a CUDA graph and cuBLAS outside one")
    torch.manual_seed(0)
    layer = at.Linear(rule.k, rule.n, bias=False, dtype=torch.float16, device="cuda", cuda_graphs=True)
    x, later = (torch.randn(rule.m, rule.k, dtype=torch.float16, device="cuda") for _ in range(2))
    with torch.inference_mode():
        _close(layer(x), _reference(x, layer.weight.t()), torch.float16)  # also loads the kernel
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = layer(x)
        x.copy_(later)
        graph.replay()
        _close(out, _reference(later, layer.weight.t()), torch.float16)
        compiled = torch.compile(layer, mode="reduce-overhead", fullgraph=True)
        for _ in range(3):  # a warm-up call, the capture, a replay
            _close(compiled(x), _reference(later, layer.weight.t()), torch.float16)
