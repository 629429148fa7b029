"""bf16 on a GPU (sm_80 or newer): a bf16 kernel of each tensor-core family verified against an fp64 reference on
NaN-poisoned outputs at shapes that are no tile multiple, the same kernels through the search's verification
(cuBLAS bf16, ``measure.check``), and ``autotune.torch.gemm`` on bf16 CUDA tensors running a tuned bf16 kernel
where the table has bf16 rules."""

from __future__ import annotations

import dataclasses

import pytest

from autotune.problem import ELEMENTS, GemmProblem
from autotune.space.family import load_space

pytestmark = pytest.mark.gpu

BF16 = ELEMENTS["bf16"]
FAMILIES = ["hgemm_wgmma", "hgemm_mma", "hgemm_wmma"]
# no tile multiple: N and K multiples of 8 (16-byte rows: vector and TMA copies with partial tiles), and not
SHAPES = [(1000, 1032, 520), (517, 999, 263), (33, 4104, 1030)]


@pytest.fixture(scope="module")
def gpu():
    from autotune.gpu.worker import GpuWorker
    from autotune.gpu_specs import GPUS

    with GpuWorker() as worker:
        spec = GPUS.get(worker.environment().gpu_key)
    if spec is None or spec.arch < BF16.min_arch:
        pytest.skip(f"bf16 needs sm_{BF16.min_arch} or newer and a known GPU ({spec.key if spec else 'unknown'})")
    return spec


def _feasible_seeds(family: str, gpu):
    """The family's bf16 seeds that pass the static rules on ``gpu`` and whose build this NVRTC does not turn
    away (a seed may spill a few bytes under one NVRTC and not another; the build check refuses spills)."""
    from autotune.kernel.build import build_kernel
    from autotune.records import Failure

    space = load_space(family, "bf16")
    problem = GemmProblem(*SHAPES[0], "bf16")
    seeds = []
    for seed in (seed for seed in space.seeds if space.check(seed, gpu).feasible):
        config = space.build_for(seed, gpu, problem)
        built = build_kernel(space, config, gpu, problem, space.launch(config, gpu, problem))
        if isinstance(built, Failure):
            assert built.failure_class == "resource", f"{config.name}: {built.message}"
            continue
        seeds.append(seed)
    if not seeds:
        pytest.fail(f"{family}: every bf16 seed was turned away on {gpu.key}")
    return space, seeds


@pytest.mark.parametrize("family", FAMILIES)
def test_bf16_seeds_match_an_fp64_reference_on_nan_poisoned_outputs(gpu, family):
    import cupy

    from autotune.gpu.launch import KernelLaunch, load_kernel
    from autotune.gpu.storage import fill_nan, narrow, widen
    from autotune.kernel.build import build_kernel
    from autotune.records import Failure

    space, seeds = _feasible_seeds(family, gpu)
    rng = cupy.random.RandomState(5)
    for m, n, k in SHAPES:
        a = narrow(rng.standard_normal((m, k), dtype=cupy.float32), BF16)
        b = narrow(rng.standard_normal((k, n), dtype=cupy.float32), BF16)
        c = narrow(rng.standard_normal((m, n), dtype=cupy.float32), BF16)
        a64, b64, c64 = (widen(x, BF16).astype(cupy.float64) for x in (a, b, c))  # the rounded values, exactly
        for alpha, beta in ((1.0, 0.0), (-1.5, 0.5)):
            want = alpha * (a64 @ b64) + beta * c64
            # fp32 accumulation in any order, then one bf16 rounding of the result (of each epilogue term)
            bound = 2 * (k * 2.0**-23 * (abs(alpha) * (cupy.abs(a64) @ cupy.abs(b64)) + abs(beta) * cupy.abs(c64))
                         + BF16.unit_roundoff * (cupy.abs(want) + abs(beta) * cupy.abs(c64))) + 1e-30
            problem = GemmProblem(m, n, k, "bf16", alpha=alpha, beta=beta)
            for seed in seeds:
                config = space.build_for(seed, gpu, problem)
                built = build_kernel(space, config, gpu, problem, space.launch(config, gpu, problem))
                assert not isinstance(built, Failure), f"{config.name}: {built.message}"
                launch = space.launch(config, gpu, problem)
                function = load_kernel(cupy, built.cubin, built.entry, launch.dynamic_smem, launch.opt_in)
                kernel = KernelLaunch(cupy, function, launch.grid, launch.block, launch.dynamic_smem, (m, n, k),
                                      launch.tensor_maps)
                out = cupy.empty((m, n), dtype=cupy.uint16)
                fill_nan(out, BF16)  # an element the kernel does not write stays NaN and fails
                if beta:
                    out[...] = c
                stream = cupy.cuda.get_current_stream()
                kernel(stream.ptr, a.data.ptr, b.data.ptr, out.data.ptr, BF16.itemsize, alpha, beta)
                stream.synchronize()
                got = widen(out, BF16).astype(cupy.float64)
                ratio = cupy.where(cupy.isnan(got), cupy.inf, cupy.abs(got - want) / bound)
                worst = float(ratio.max())
                assert worst <= 1.0, f"{config.name} at {m}x{n}x{k} beta {beta}: {worst:.3g}x the bound"


@pytest.mark.parametrize("family", FAMILIES)
def test_bf16_seeds_pass_the_search_s_verification_against_cublas_bf16(gpu, family):
    from test_gpu_kernels import _assert_verified, _both_betas, _run_all

    from autotune.gpu.worker import GpuWorker

    space, seeds = _feasible_seeds(family, gpu)
    with GpuWorker() as worker:
        outcomes = _run_all(worker, space, gpu, seeds, _both_betas(SHAPES, "bf16"))
    _assert_verified(outcomes)
    assert len(outcomes) == len(seeds) * len(SHAPES) * 2


def test_the_operator_runs_a_tuned_bf16_kernel_where_the_table_has_bf16_rules(gpu, tmp_path, monkeypatch):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    import autotune
    import autotune.runtime as runtime
    import autotune.torch as at
    from autotune.export.prebuilt import shipped_table
    from autotune.export.table_file import write_table_file
    from autotune.select.kernel_table import DtypeTable, KernelTable
    from autotune.select.selection import table_kernel

    shipped = shipped_table(gpu.key, gpu.sm)
    if shipped is None or "f16" not in shipped.dtypes:
        pytest.skip(f"no shipped f16 table for {gpu.key}")
    f16 = shipped.dtypes["f16"]
    # the shipped f16 table's kernels built for bf16, at its rules: a bf16 table as `autotune cross-dtype` makes
    kernels = {kernel.name: table_kernel(kernel.family, kernel.params, gpu, "bf16") for kernel in f16.kernels}
    kernels = {name: dataclasses.replace(kernel, any_shape=kernels[f16.kernel(name).any_shape].name
                                         if kernel.any_shape else None) for name, kernel in kernels.items()}
    rules = tuple(dataclasses.replace(rule, kernel=kernels[rule.kernel].name, cublas_ms=None,
                                      times=tuple((kernels[name].name, ms) for name, ms in rule.times))
                  for rule in f16.rules)
    table = KernelTable(arch=shipped.arch, gpu=shipped.gpu, measured_on=shipped.measured_on, created_at="test",
                        source="test", dtypes={"bf16": DtypeTable(tuple(kernels.values()), rules, f16.sms)})
    (path,) = write_table_file(table, tmp_path, with_cubins=False)
    monkeypatch.setattr(runtime, "_loaded_table", None)
    monkeypatch.setattr(runtime, "_runtimes", {})
    autotune.load(path)

    m, n, k = 1000, 1024, 1024  # rows cut (a cut N or K goes to cuBLAS)
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda") / k**0.5
    decision = autotune.explain(a, b)
    assert not decision.uses_cublas and decision.dtype == "bf16", decision.reason
    assert decision.kernel.name.endswith("_bf16")
    want = a.double() @ b.double()
    for got in (at.gemm(a, b), autotune.gemm(a, b, out=torch.full((m, n), float("nan"), dtype=torch.bfloat16,
                                                                    device="cuda"))):
        assert got.dtype == torch.bfloat16 and not got.isnan().any()
        error = ((got.double() - want).abs().max() / want.abs().max()).item()
        assert error < 2e-2, error
