"""autotune for PyTorch on the CPU: the autotune::gemm operator (opcheck, autograd, torch.compile), its
errors, and Linear layers that ask the table per layer (GPU runs: test_gpu_torch.py)."""

from __future__ import annotations

import dataclasses
import io

import numpy
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: pip install torch (its CPU build will do)")

import autotune.torch as at  # noqa: E402
from autotune.errors import InputError  # noqa: E402
from autotune.runtime.operands import refuse_autograd  # noqa: E402

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _operands(dtype, batch=(3, 4), k=8, n=5, seed=0):
    generator = torch.Generator().manual_seed(seed)
    a = torch.randn(*batch, k, generator=generator).to(dtype).requires_grad_()
    b = torch.randn(k, n, generator=generator).to(dtype).requires_grad_()
    c = torch.randn(n, generator=generator).to(dtype).requires_grad_()
    return a, b, c


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_opcheck_passes_for_every_dtype_with_and_without_c(dtype):
    a, b, c = _operands(dtype)
    torch.library.opcheck(torch.ops.autotune.gemm.default, (a, b, c, 1.5, 0.5))
    torch.library.opcheck(torch.ops.autotune.gemm.default, (a, b, None, 1.0, 0.0))
    torch.library.opcheck(torch.ops.autotune.gemm.default, (a[0], b.t().contiguous().t(), None, 2.0, 0.0))
    torch.library.opcheck(torch.ops.autotune.gemm.default, (a, b, c, 1.0, 1.0, True))


def test_the_product_and_its_gradients_are_addmm_s():
    a, b, c = _operands(torch.float64, batch=(2, 3))
    result = at.gemm(a, b, c, alpha=1.5, beta=0.5)
    assert result.shape == (2, 3, 5)
    torch.testing.assert_close(result, 1.5 * a @ b + 0.5 * c)
    assert torch.autograd.gradcheck(lambda a, b, c: at.gemm(a, b, c, 1.5, 0.5), (a, b, c))
    assert torch.autograd.gradcheck(lambda a, b: at.gemm(a, b), (a, b))


def test_beta_zero_ignores_c_and_no_c_ignores_beta():
    a, b, _ = _operands(torch.float32)
    nan = torch.full((5,), float("nan"))
    with torch.no_grad():
        torch.testing.assert_close(at.gemm(a, b, nan, 1.0, 0.0), a @ b)
        torch.testing.assert_close(at.gemm(a, b, None, 2.0, 7.0), 2 * a @ b)


@pytest.mark.parametrize("layer_runs_kernels", [True, False])
def test_torch_compile_traces_the_operator_in_one_graph(monkeypatch, layer_runs_kernels):
    from autotune.torch import linear

    if layer_runs_kernels:  # as for a CUDA layer the table serves: the layer calls the operator
        monkeypatch.setattr(linear, "kernel_rows", torch.compiler.assume_constant_result(lambda *args: 1))
    layer = at.Linear(8, 5)
    w = torch.randn(5, 3)
    x = torch.randn(4, 8)
    compiled = torch.compile(lambda x: at.gemm(layer(x).relu(), w), fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), torch.nn.functional.linear(x, layer.weight, layer.bias).relu() @ w)


@pytest.mark.parametrize("call, fragments", [
    (lambda: at.gemm(torch.ones(2, 3, dtype=torch.float8_e4m3fn), torch.ones(3, 4, dtype=torch.float8_e4m3fn)),
     ("float8_e4m3fn", "bfloat16", "_scaled_mm")),
    (lambda: at.gemm(torch.ones(2, 3), torch.ones(3, 4, dtype=torch.float16)), ("b.dtype", "float16", "float32")),
    (lambda: at.gemm(torch.ones(2, 3), torch.ones(4, 4)), ("b.shape", "(4, 4)", "3 rows")),
    (lambda: at.gemm(torch.ones(3), torch.ones(3, 4)), ("a.shape", "two or more")),
    (lambda: at.gemm(torch.ones(2, 3), torch.ones(3, 4), torch.ones(3)), ("c.shape", "(3,)", "(2, 4)")),
])
def test_what_no_gemm_takes_is_one_clear_error(call, fragments):
    with pytest.raises(InputError) as raised:
        call()
    message = str(raised.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message


def test_linear_keeps_nn_linear_s_parameters_and_state_dict():
    torch.manual_seed(0)
    plain = torch.nn.Linear(16, 8)
    layer = at.Linear(16, 8)
    layer.load_state_dict(plain.state_dict())
    assert layer.weight.shape == (8, 16) and layer.weight.is_contiguous()  # nn.Linear's own layout
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), plain(x))
    buffer = io.BytesIO()
    torch.save(layer.state_dict(), buffer)
    buffer.seek(0)
    again = torch.nn.Linear(16, 8)
    again.load_state_dict(torch.load(buffer))
    torch.testing.assert_close(again.weight, plain.weight)


def test_use_autotune_turns_a_model_s_linears_in_place_and_training_goes_on():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.SiLU(), torch.nn.Linear(16, 4, bias=False))
    reference = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.SiLU(), torch.nn.Linear(16, 4, bias=False))
    reference.load_state_dict(model.state_dict())
    parameters = list(model.parameters())
    optimizer = torch.optim.SGD(parameters, lr=0.1)
    assert at.use_autotune(model) is model
    assert [type(layer) for layer in model] == [at.Linear, torch.nn.SiLU, at.Linear]
    assert list(model.parameters()) == parameters  # the same objects: the optimizer still holds them
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    x = torch.randn(6, 8)
    for net, opt in ((model, optimizer), (reference, reference_optimizer)):
        loss = net(x).square().sum()
        loss.backward()
        opt.step()
    for mine, theirs in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(mine, theirs)


def test_a_layer_asks_the_table_about_its_weight_as_stored(monkeypatch):
    from autotune.torch import linear

    asked = []
    monkeypatch.setattr(linear, "kernel_rows", lambda *args: asked.append(args))
    layer = at.Linear(4, 3)
    layer(torch.randn(2, 4))
    assert asked == [(layer.weight.dtype, layer.weight.device, 3, 4, False, False)]  # weight.T is column-major
    layer.weight = torch.nn.Parameter(torch.randn(4, 3).t())  # stored in x out: weight.T row-major
    layer(torch.randn(2, 4))
    assert asked[-1][-2:] == (True, False)
    at.Linear(4, 3, cuda_graphs=True)(torch.randn(2, 4))
    model = at.use_autotune(torch.nn.Sequential(torch.nn.Linear(4, 3)), cuda_graphs=True)
    model(torch.randn(2, 4))
    assert [args[-1] for args in asked[-2:]] == [True, True]  # layers replayed in CUDA graphs say so


def test_the_runtime_refuses_host_tensors_numpy_and_untracked_grads_in_one_line():
    import autotune

    for a, fragment in ((torch.ones(2, 2), "x.cuda()"), (numpy.ones((2, 2), numpy.float32), "cupy.asarray")):
        with pytest.raises(InputError, match=r"cuda\(\)|cupy\.asarray") as raised:
            autotune.gemm(a, a)
        assert fragment in str(raised.value)
    weight = torch.nn.Parameter(torch.ones(2, 2))
    with pytest.raises(InputError, match="autotune.torch.gemm"):
        refuse_autograd(torch.ones(2, 2), weight)
    with torch.no_grad():
        refuse_autograd(weight)
    with torch.inference_mode():
        refuse_autograd(weight)


def test_without_pytorch_the_import_says_what_to_install():
    import subprocess
    import sys

    code = "import sys; sys.modules['torch'] = None\nimport autotune.torch"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 1
    assert "autotune.torch needs PyTorch" in result.stderr and "autotune[torch]" in result.stderr


def _few_row_kernel_shape(table) -> tuple[int, int, int]:
    """The first few-row (M <= 16) f16 shape of ``table`` where it runs a tuned kernel."""
    rules = sorted(table.dtypes["f16"].rules, key=lambda rule: rule.shape)
    shape = next((rule.shape for rule in rules if rule.m <= 16 and not table.dtypes["f16"].pick(*rule.shape).cublas),
                 None)
    assert shape is not None, "the shipped f16 table runs no kernel at any shape of 16 rows or fewer"
    return shape


class _RecordedLaunch:
    """A prepared launch that records its arguments instead of calling cuLaunchKernel."""

    def __init__(self):
        self.calls = []

    def __call__(self, *arguments):
        self.calls.append(arguments)


def _device_with_launches(monkeypatch, table, shapes):
    """A CupyDevice with no GPU behind it: CuPy's device query answers 0, each (kernel, shape) the table picks
    has a recorded launch prepared, PyTorch's current stream is handle 1234; host tensors pass as device ones."""
    import types

    from autotune.runtime import operands
    from autotune.runtime.devices import CupyDevice

    monkeypatch.setattr(operands, "refuse_host_memory", lambda value, what: None)
    device = object.__new__(CupyDevice)
    device.cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(getDevice=lambda: 0)))
    device.index, device.name, device.arch = 0, "NVIDIA H200", "sm_90"
    device._functions, device._streams = {}, {}
    device._launches = {}
    for dtype, shape in shapes:
        pick = table.dtypes[dtype].pick(*shape)
        device._launches[(pick.kernel, *shape)] = _RecordedLaunch()
    monkeypatch.setattr(device, "torch_stream", lambda index: 1234, raising=False)
    monkeypatch.setattr(device, "stream", lambda original: types.SimpleNamespace(ptr=1234), raising=False)
    return device


def test_the_runtime_launches_tensors_by_their_pointers_and_leaves_cublas_picks_to_pytorch(monkeypatch):
    from pathlib import Path

    from autotune.runtime import Runtime
    from autotune.select.kernel_table import read_table

    table = read_table(Path(__file__).resolve().parents[1] / "tuned_db" / "h200.table.json")
    kernel_shape = _few_row_kernel_shape(table)  # where the shipped table runs a tuned f16 kernel
    assert not table.dtypes["f16"].pick(*kernel_shape).cublas
    device = _device_with_launches(monkeypatch, table, [("f16", kernel_shape)])
    runtime = Runtime(device, (table, "the shipped table"))
    m, n, k = kernel_shape
    a, b = torch.randn(m, k, dtype=torch.float16), torch.randn(k, n, dtype=torch.float16)
    out = torch.empty(m, n, dtype=torch.float16)
    runtime.gemm_tensors(a, b, out, 0.5, 0.0)
    assert runtime.gemm(a, b, out=out, alpha=2.0, beta=1.0) is out
    pick = table.dtypes["f16"].pick(*kernel_shape)
    assert device._launches[(pick.kernel, *kernel_shape)].calls == [
        (1234, a.data_ptr(), b.data_ptr(), out.data_ptr(), 2, 0.5, 0.0),
        (1234, a.data_ptr(), b.data_ptr(), out.data_ptr(), 2, 2.0, 1.0)]
    assert table.dtypes["f32"].pick(1, 4096, 4096).cublas  # the shipped f32 table leaves M = 1 to cuBLAS
    a, b = torch.randn(1, 4096), torch.randn(4096, 4096)
    out = torch.full((1, 4096), float("nan"))
    runtime.gemm_tensors(a, b, out, 1.0, 0.0)  # PyTorch's addmm_ in place, no launch
    torch.testing.assert_close(out, a @ b, rtol=1e-4, atol=1e-3)
    assert sum(len(launch.calls) for launch in device._launches.values()) == 2


def test_the_operator_s_call_with_beta_leaves_a_kernel_that_reads_c_slowly_to_pytorch(monkeypatch):
    from pathlib import Path

    from autotune.runtime import Runtime
    from autotune.select.kernel_table import read_table

    table = read_table(Path(__file__).resolve().parents[1] / "tuned_db" / "h200.table.json")
    f16 = table.dtypes["f16"]
    shape = min((rule.shape for rule in f16.rules if not f16.pick(*rule.shape).cublas
                 and f16.kernel(f16.pick(*rule.shape).kernel).reads_c_slowly), key=lambda s: s[0] * s[1] * s[2])
    device = _device_with_launches(monkeypatch, table, [("f16", shape)])
    runtime = Runtime(device, (table, "the shipped table"))
    m, n, k = shape
    a, b = torch.randn(m, k, dtype=torch.float16), torch.randn(k, n, dtype=torch.float16) / 16
    c = torch.randn(m, n, dtype=torch.float16)
    out = c.clone()
    runtime.gemm_tensors(a, b, out, 1.0, 0.5)  # an hgemm_wgmma kernel's shape, beta 0.5: PyTorch's addmm_
    torch.testing.assert_close(out.float(), (a.float() @ b.float() + 0.5 * c.float()), rtol=1e-2, atol=1e-1)
    assert "beta is not 0" in runtime.tensor_decision(a, b, None, 0.5).reason
    runtime.gemm_tensors(a, b, out, 1.0, 0.0)  # beta 0: the kernel, whose decision is kept apart
    assert device._launches[(f16.pick(*shape).kernel, *shape)].calls == [
        (1234, a.data_ptr(), b.data_ptr(), out.data_ptr(), 2, 1.0, 0.0)]


def test_a_kernel_no_faster_once_the_operator_s_host_time_counts_leaves_the_call_to_pytorch(monkeypatch):
    from pathlib import Path

    from autotune.runtime import PROBED_ROWS, Runtime
    from autotune.runtime.dispatch import HostCost
    from autotune.select.kernel_table import read_table

    table = read_table(Path(__file__).resolve().parents[1] / "tuned_db" / "h200.table.json")
    shape = _few_row_kernel_shape(table)
    pick = table.dtypes["f16"].pick(*shape)
    assert pick.kernel_ms < pick.cublas_ms  # the table prefers its kernel here
    slow_host = HostCost(kernel_ms=pick.cublas_ms * 2, cublas_ms=0.0, caller="a slow caller")
    quick_host = HostCost(kernel_ms=pick.kernel_ms / 2, cublas_ms=0.0, caller="a quick caller")
    device = _device_with_launches(monkeypatch, table, [("f16", shape)])
    runtime = Runtime(device, (table, "the shipped table"))
    requests = []
    runtime.tuner = type("Tuner", (), {"request": lambda self, dtype, shape, layout: requests.append(shape)})()
    m, n, k = shape
    a, b = torch.randn(m, k, dtype=torch.float16), torch.randn(k, n, dtype=torch.float16)
    out = torch.full((m, n), float("nan"), dtype=torch.float16)
    runtime.gemm_tensors(a, b, out, 1.0, 0.0, slow_host)  # PyTorch's addmm_: no launch
    assert not device._launches[(pick.kernel, *shape)].calls
    torch.testing.assert_close(out.float(), a.float() @ b.float(), rtol=2e-2, atol=2e-1)
    runtime.gemm_tensors(a, b, out, 1.0, 0.0, quick_host)
    assert len(device._launches[(pick.kernel, *shape)].calls) == 1

    assert 16 in PROBED_ROWS and runtime.kernel_rows(torch.float16, n, k) == 1  # host time not counted
    no_kernel_that_fast = HostCost(kernel_ms=10.0, cublas_ms=0.0, caller="a caller taking 10 ms")
    assert runtime.kernel_rows(torch.float16, n, k, no_kernel_that_fast) is None
    without_nt = Runtime(device, (dataclasses.replace(table, other_layouts={}), "the shipped table, row only"))
    assert without_nt.kernel_rows(torch.float16, n, k, row_major=False) is None  # no kernel takes b transposed
    from autotune.torch.ops import OPERATOR_HOST

    widths = sorted({(rule.n, rule.k) for rule in table.dtypes["f16"].rules})
    served = [(n, k, rows) for n, k in widths
              if (rows := runtime.kernel_rows(torch.float16, n, k, OPERATOR_HOST)) is not None]
    assert served, "no f16 width of the shipped table runs a kernel with the operator's host time counted"
    for n, k, rows in served:
        assert rows in PROBED_ROWS and rows > 16  # a GEMM of 16 rows is over before the operator's host time
        for m in (m for m in PROBED_ROWS if m >= rows):
            assert table.dtypes["f16"].pick(m, n, k).cublas_ms > OPERATOR_HOST.kernel_ms
    assert requests == []  # probing the rows asks for no searches
    from autotune.torch.ops import host_cost

    assert host_cost(False) is OPERATOR_HOST
    graphed = runtime.tensor_decision(a, b, host_cost(True))  # replayed in a CUDA graph: no host time per call
    assert graphed.kernel is not None and graphed.kernel.name == pick.kernel
    assert runtime.tensor_decision(a, b, host_cost(False)).uses_cublas
    assert runtime.kernel_rows(torch.float16, shape[1], shape[2], host_cost(True)) == 1


def test_net_of_host_cost_keeps_a_kernel_only_where_it_is_faster_with_the_host_counted():
    from autotune.runtime.dispatch import Decision, HostCost, net_of_host_cost
    from autotune.select.kernel_table import TableKernel, TablePick

    kernel = object.__new__(TableKernel)
    object.__setattr__(kernel, "name", "k_fast")
    decision = Decision("f16", (1, 14336, 4096), kernel, None, "tuned", "note",
                        TablePick(rule=None, kernel="k_fast", kernel_ms=0.029, cublas_ms=0.030))
    operator = HostCost(kernel_ms=0.064, cublas_ms=0.026, caller="the operator")
    assert net_of_host_cost(decision, None) is decision
    moved = net_of_host_cost(decision, operator)  # 64 us a call against 30 us
    assert moved.kernel is None and moved.uses_cublas
    assert all(text in moved.reason for text in ("29.0 us", "30.0 us", "the operator", "64.0 us a call against 30.0 us"))
    big = Decision("f16", (4096, 4096, 4096), kernel, None, "tuned", "note",
                   TablePick(rule=None, kernel="k_fast", kernel_ms=0.1789, cublas_ms=0.1798))
    assert net_of_host_cost(big, operator) is big  # the host's time hides behind the GPU's
    cublas = Decision("f16", (1, 14336, 4096), None, None, "cuBLAS", "note")
    assert net_of_host_cost(cublas, operator) is cublas


def test_a_layer_calls_the_operator_only_from_the_rows_a_kernel_may_repay(monkeypatch):
    from autotune.torch import linear

    layer = at.Linear(8, 5)
    calls = []
    monkeypatch.setattr(linear, "gemm", lambda *args: calls.append(args) or torch.zeros(*args[0].shape[:-1], 5))
    x = torch.randn(4, 8)
    torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))
    assert calls == []  # a CPU layer: no tuned kernel, no operator
    monkeypatch.setattr(linear, "kernel_rows", lambda *args: 6)
    layer(x)
    layer(torch.randn(2, 2, 8))
    assert calls == []  # 4 rows: PyTorch's linear
    layer(torch.randn(2, 3, 8))
    assert len(calls) == 1 and calls[0][1].shape == (8, 5) and calls[0][1].data_ptr() == layer.weight.data_ptr()


def test_explain_says_a_cpu_call_runs_pytorch_s_matmul():
    decision = at.explain(torch.ones(2, 3, 4), torch.ones(4, 5))
    assert decision.uses_cublas and decision.shape == (6, 5, 4) and "cpu" in decision.reason
    with pytest.raises(InputError, match="b.shape"):
        at.explain(torch.ones(2, 3), torch.ones(4, 5))


def test_a_repeated_call_that_went_to_pytorch_s_matmul_goes_there_again_without_the_checks(monkeypatch):
    from pathlib import Path

    from autotune.runtime import Runtime, devices
    from autotune.select.kernel_table import read_table

    table = read_table(Path(__file__).resolve().parents[1] / "tuned_db" / "h200.table.json")
    device = _device_with_launches(monkeypatch, table, [])
    monkeypatch.setattr(device, "cublas", lambda a, b, c, alpha, beta, stream: devices._torch_gemm(a, b, c, alpha, beta),
                        raising=False)
    runtime = Runtime(device, (table, "the shipped table"))
    decided = []
    decide = runtime._decide
    monkeypatch.setattr(runtime, "_decide", lambda *operands: decided.append(operands) or decide(*operands))
    a, b = torch.randn(33, 129), torch.randn(129, 65)  # n = 65, outside the tuned range: PyTorch's matmul
    torch.testing.assert_close(runtime.gemm(a, b), a @ b)
    assert len(decided) == 1
    torch.testing.assert_close(runtime.gemm(a, b, alpha=2.0), 2.0 * (a @ b))
    assert len(decided) == 1  # the same layout: straight to PyTorch
    torch.testing.assert_close(runtime.gemm(a, b.t().contiguous().t()), a @ b)  # b column-major: decided again
    torch.testing.assert_close(runtime.gemm(a.reshape(3, 11, 129), b), (a @ b).reshape(3, 11, 65))
    assert len(decided) == 2  # 3 x 11 rows: the route of the first layout, the result given its batch
    with pytest.raises(InputError, match="requires grad"):
        runtime.gemm(a.requires_grad_(), b)
    with pytest.raises(InputError, match="beta"):
        runtime.gemm(a.detach(), b, beta=0.5)  # no out to scale: the full checks
    runtime._table_again("f32", (33, 65, 129), "row")  # a new table: every layout decided again
    torch.testing.assert_close(runtime.gemm(a.detach(), b), a.detach() @ b)
    assert len(decided) == 3


def test_a_repeated_call_of_a_kernel_layout_launches_by_its_route_and_an_overlapping_out_is_still_refused(monkeypatch):
    from pathlib import Path

    from autotune.runtime import Runtime, routes
    from autotune.select.kernel_table import read_table

    table = read_table(Path(__file__).resolve().parents[1] / "tuned_db" / "h200.table.json")
    shape = _few_row_kernel_shape(table)
    pick = table.dtypes["f16"].pick(*shape)
    device = _device_with_launches(monkeypatch, table, [("f16", shape)])
    runtime = Runtime(device, (table, "the shipped table"))
    decided = []
    decide = runtime._decide
    monkeypatch.setattr(runtime, "_decide", lambda *operands: decided.append(operands) or decide(*operands))
    m, n, k = shape
    a, b = torch.randn(m, k, dtype=torch.float16), torch.randn(k, n, dtype=torch.float16)
    first, second = runtime.gemm(a, b), runtime.gemm(a, b, alpha=0.5)
    assert len(decided) == 1 and first.shape == second.shape == (m, n) and first.data_ptr() != second.data_ptr()
    block = torch.empty(m * k + m * n, dtype=torch.float16)  # a, then room for an out apart from it or on it
    in_block = block[:m * k].view(m, k)
    in_block.copy_(a)
    out = torch.empty(m, n, dtype=torch.float16)
    assert runtime.gemm(in_block, b, out=out, beta=1.0) is out  # beta not 0: a route of its own
    assert runtime.gemm(in_block, b, out=out) is out  # the route of an out of this layout
    assert runtime.gemm(in_block, b, out=out) is out
    assert len(decided) == 3
    assert type(runtime._routes[routes.layout_key(in_block, b, out, None)]) is routes.TorchKernel
    assert type(runtime._routes[routes.layout_key(in_block, b, out, None, beta=1.0)]) is routes.TorchKernel
    with pytest.raises(InputError, match="shares no memory"):  # same layout, but out's first 16 bytes are a's last
        runtime.gemm(in_block, b, out=block[m * k - 8:m * k - 8 + m * n].view(m, n))
    with pytest.raises(InputError, match="requires grad"):
        runtime.gemm(a.clone().requires_grad_(), b)
    batched_out = torch.empty(1, m, n, dtype=torch.float16)  # a 1 x m x k activation into a 1 x m x n out
    assert runtime.gemm(a.reshape(1, m, k), b, out=batched_out) is batched_out
    assert len(decided) == 3  # its rows have the layout of the calls above: their route
    calls = device._launches[(pick.kernel, *shape)].calls
    assert [call[4:] for call in calls] == [(2, 1.0, 0.0), (2, 0.5, 0.0), (2, 1.0, 1.0), (2, 1.0, 0.0), (2, 1.0, 0.0),
                                            (2, 1.0, 0.0)]
    assert calls[1][1:4] == (a.data_ptr(), b.data_ptr(), second.data_ptr())
    assert calls[3][1:4] == calls[4][1:4] == (in_block.data_ptr(), b.data_ptr(), out.data_ptr())
    assert calls[5][1:4] == (a.data_ptr(), b.data_ptr(), batched_out.data_ptr())
