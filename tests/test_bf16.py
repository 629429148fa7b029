"""bf16 end to end offline: its storage, the families that serve it, its refusal before sm_80, and a first
bf16 table measured from the fp16 results (``autotune cross-dtype``) on the fake backend."""

import os
import re
import subprocess
import sys

import numpy
import pytest

from autotune.errors import InputError
from autotune.gpu.storage import BF16_NAN_BITS, fill_nan, narrow, widen
from autotune.gpu_specs import gpu_spec
from autotune.kernel.render import render
from autotune.problem import ELEMENTS, make_problem
from autotune.space.family import families_for_dtype, load_space

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BF16 = ELEMENTS["bf16"]
TENSOR_CORE_FAMILIES = ["hgemm_wgmma", "hgemm_mma", "hgemm_wmma"]
BF16_FAMILIES = [*TENSOR_CORE_FAMILIES, "hgemm_gemv"]  # and the few-row family, never the default (priority -1)


def test_the_element_table_says_what_bf16_is():
    assert (BF16.storage, BF16.itemsize, BF16.c_type, BF16.ptx, BF16.cuda_data_type) == (
        "uint16", 2, "__nv_bfloat16", "bf16", 14)  # CUDA_R_16BF
    assert BF16.unit_roundoff == 2.0**-8 and BF16.min_arch == 80
    assert ELEMENTS["f16"].unit_roundoff == 2.0**-11 and ELEMENTS["f16"].cuda_data_type == 2


def test_bf16_bits_round_to_nearest_even_and_widen_exactly():
    one = 1.0
    cases = {one: 0x3F80, one + 2.0**-8: 0x3F80,  # a tie rounds to the even 1.0
             one + 3 * 2.0**-8: 0x3F82,  # a tie between 0x3F81 and 0x3F82 rounds to even 0x3F82
             one + 2.0**-8 + 2.0**-20: 0x3F81,  # past the tie: up
             -2.0: 0xC000, 0.0: 0x0000, 65504.0: 0x4780, 1e-40: 0x0001}  # 1e-40 is near bf16's first subnormal
    values = numpy.array(list(cases), dtype=numpy.float32)
    assert narrow(values, BF16).tolist() == list(cases.values())
    assert narrow(values, BF16).dtype == numpy.uint16
    bits = numpy.arange(0, 0x7F80, 7, dtype=numpy.uint16)  # finite positives: widening then narrowing is exact
    assert (narrow(widen(bits, BF16), BF16) == bits).all()
    assert widen(numpy.array([0x3F80, 0xC000], dtype=numpy.uint16), BF16).tolist() == [1.0, -2.0]


def test_bf16_rounding_is_pytorch_s():
    torch = pytest.importorskip("torch")
    values = numpy.random.default_rng(0).standard_normal(100_000).astype(numpy.float32) * 1e3
    theirs = torch.from_numpy(values).to(torch.bfloat16).view(torch.int16).numpy().view(numpy.uint16)
    assert (narrow(values, BF16) == theirs).all()


def test_nan_poisoning_of_bf16_storage_reads_back_as_nan():
    out = numpy.zeros(4, dtype=numpy.uint16)
    fill_nan(out, BF16)
    assert (out == BF16_NAN_BITS).all() and numpy.isnan(widen(out, BF16)).all()
    half = numpy.zeros(4, dtype=numpy.float16)
    fill_nan(half, ELEMENTS["f16"])
    assert numpy.isnan(half).all()


def test_the_fp16_families_serve_bf16_from_the_same_templates():
    assert families_for_dtype("bf16") == BF16_FAMILIES
    h200 = gpu_spec("h200")
    for family in BF16_FAMILIES:
        f16, bf16 = load_space(family), load_space(family, "bf16")
        assert f16.dtypes == ("f16", "bf16") and bf16.dtype == "bf16" and f16.dtype == "f16"
        assert bf16.template == f16.template and bf16.template_hash == f16.template_hash
        seed = next(s for s in bf16.seeds if bf16.check(s, h200).feasible)
        assert seed.name == f16.config(seed.as_dict()).name + "_bf16"  # a kernel of its own, in every table
        code = render(bf16, seed, h200).code
        assert "#include <cuda_bf16.h>" in code and "__nv_bfloat16" in code
        statements = re.sub(r"//[^\n]*", "", code)  # comments may still say "halves" of bytes
        assert not re.search(r"\bhalf2?\b|__half|2half", statements) and "cuda_fp16.h" not in code
        own = render(f16, f16.config(seed.as_dict()), h200).code
        assert "__nv_bfloat16" not in own and "#include <cuda_fp16.h>" in own
    assert ".f32.bf16.bf16.f32" in render(load_space("hgemm_mma", "bf16"), load_space("hgemm_mma", "bf16").seeds[0],
                                          h200).code
    wgmma = load_space("hgemm_wgmma", "bf16")
    assert "k16.f32.bf16.bf16 " in render(wgmma, wgmma.seeds[0], h200).code
    wmma = load_space("hgemm_wmma", "bf16")
    assert "16, 16, 16, __nv_bfloat16, wmma::row_major" in render(wmma, wmma.seeds[0], h200).code
    with pytest.raises(InputError, match="invalid dtype 'bf16': expected a dtype sgemm serves: f32"):
        load_space("sgemm", "bf16")


def test_bf16_is_refused_before_sm80_with_one_line_naming_the_choices():
    from autotune.search.start import choose_family

    with pytest.raises(InputError) as info:
        choose_family(None, "bf16", gpu_spec("t4"))
    assert str(info.value) == ("invalid --dtype 'bf16': expected f32, f16 on t4 (sm_75; bf16 needs sm_80 or newer)")
    wmma = load_space("hgemm_wmma", "bf16")  # WMMA runs fp16 on sm_75, bf16 only from sm_80
    assert load_space("hgemm_wmma").check(load_space("hgemm_wmma").seeds[0], gpu_spec("t4")).feasible
    assert wmma.check(wmma.seeds[0], gpu_spec("t4")).reason == "bf16 needs sm_80 or newer (t4 is sm_75)"
    assert choose_family(None, "bf16", gpu_spec("a100")).family == "hgemm_mma"
    assert choose_family(None, "bf16", gpu_spec("h200")).family == "hgemm_wgmma"
    with pytest.raises(InputError, match="'bf17': expected f32, f16, bf16"):
        make_problem("64", "bf17")


def _autotune(*args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True, text=True, cwd=ROOT,
                          **kwargs)


def test_the_cli_takes_bf16_and_refuses_it_on_a_t4_in_one_line(tmp_path):
    db = f"sqlite:///{tmp_path}/r.db"
    space = _autotune("space", "--gpu", "h200", "--shape", "1000x1000x1000", "--dtype", "bf16")
    assert space.returncode == 0 and "hgemm_wgmma" in space.stdout + space.stderr
    t4 = _autotune("search", "--gpu", "t4", "--shape", "4096", "--dtype", "bf16", "--backend", "fake", "--db", db)
    assert t4.returncode == 2 and len(t4.stderr.strip().splitlines()) == 1, t4.stderr
    assert "'bf16'" in t4.stderr and "f32, f16 on t4" in t4.stderr and "Traceback" not in t4.stderr
    bad = _autotune("cross-dtype", "--gpu", "h200", "--dtype", "bf16", "--from-dtype", "f8", "--backend", "fake",
                    "--db", db)
    assert bad.returncode == 2 and "invalid --from-dtype 'f8': expected f32, f16, bf16" in bad.stderr


def test_a_first_bf16_table_from_the_shipped_fp16_results_on_the_fake_backend(tmp_path, monkeypatch):
    """`bench/h200.sh bf16` offline: the shipped results imported, two shapes' two best fp16 configs timed in bf16
    with cuBLAS (the fake GPU), recorded as ordinary results, and a bf16 table selected from them."""
    from autotune.results.opening import open_store
    from autotune.select.kernel_table import TableKernel
    from autotune.select.selection import gather, table_from

    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path / "cache"))
    db = f"sqlite:///{tmp_path}/r.db"
    imported = _autotune("results", "import", "tuned_db/h200.jsonl", "--db", db)
    assert imported.returncode == 0, imported.stderr
    shapes = tmp_path / "shapes.txt"
    shapes.write_text("4096x4096x4096\n128x14336x4096\n")
    args = ["cross-dtype", "--gpu", "h200", "--dtype", "bf16", "--from-dtype", "f16", "--top", "2", "--shapes",
            str(shapes), "--backend", "fake", "--db", db, "--jobs", "2"]
    first = _autotune(*args, env={**os.environ, "AUTOTUNE_CACHE": str(tmp_path / "cache")})
    assert first.returncode == 0, first.stderr
    assert "4 measured, 0 failed, 0 measured before" in first.stdout, first.stdout + first.stderr
    again = _autotune(*args, env={**os.environ, "AUTOTUNE_CACHE": str(tmp_path / "cache")})
    assert "0 measured, 0 failed, 4 measured before" in again.stdout, again.stdout  # nothing measured twice

    with open_store(db) as store:
        # each shape's two fastest distinct configs (a config measured under two template versions is two rows)
        f16 = {(p.m, p.n, p.k): list(dict.fromkeys(row.config_name for row in store.best("h200", p, limit=10)))[:2]
               for p in store.problems("h200", "f16") if (p.m, p.n, p.k) in {(4096, 4096, 4096), (128, 14336, 4096)}}
        bf16 = store.problems("h200-fake", "bf16")
        assert {(p.m, p.n, p.k) for p in bf16} == set(f16)
        for problem in bf16:
            measured = [row.config_name for row in store.best("h200-fake", problem, limit=10)]
            assert sorted(measured) == sorted(name + "_bf16" for name in f16[(problem.m, problem.n, problem.k)])
            assert store.cublas_reference("h200-fake", problem) is not None
        table = table_from(gather(store, "h200-fake", "bf16"), gpu_spec("h200"))
    assert {rule.shape for rule in table.rules} == set(f16)
    assert all(kernel.other_dtype == "bf16" and kernel.name.endswith("_bf16") for kernel in table.kernels)
    kernel = table.kernels[0]
    assert kernel.to_dict(False)["other_dtype"] == "bf16" and TableKernel.from_dict(kernel.to_dict(False)) == kernel


def test_the_runtime_sends_torch_bfloat16_to_a_bf16_kernel_only_where_the_table_has_bf16_rules():
    torch = pytest.importorskip("torch")
    from autotune.runtime.dispatch import TableChoice, decide
    from autotune.runtime.operands import Operand
    from autotune.select.kernel_table import DtypeTable, KernelTable, TableRule, spec_for_arch
    from autotune.select.selection import table_kernel

    gpu = spec_for_arch("sm_90", "h200")
    bf16 = table_kernel("hgemm_mma", load_space("hgemm_mma").seeds[0].as_dict(), gpu, "bf16")
    rule = TableRule(1024, 1024, 1024, bf16.name, ms=1.0, cublas_ms=2.0, measured_on="NVIDIA H200")
    table = KernelTable(arch="sm_90", gpu="h200", measured_on=("NVIDIA H200",),
                        dtypes={"bf16": DtypeTable((bf16,), (rule,), gpu.sms)})

    def operand(rows, cols, pointer, element=torch.bfloat16):
        return Operand(None, (rows, cols), element, True, pointer, 0)

    a, b, c = operand(1000, 1024, 0x10000), operand(1024, 1024, 0x800000), operand(1000, 1024, 0x1000000)
    assert a.dtype == "bf16" and operand(1, 1, 0, numpy.dtype("uint16")).dtype is None  # bits are not bf16
    decision = decide(TableChoice(table, "test"), a, b, c)
    assert decision.dtype == "bf16" and decision.kernel is bf16 and decision.kernel.launch.entry.endswith("_bf16")
    only_f16 = KernelTable(arch="sm_90", gpu="h200", measured_on=("NVIDIA H200",),
                           dtypes={"f16": DtypeTable((bf16,), (rule,), gpu.sms)})
    fallback = decide(TableChoice(only_f16, "test"), a, b, c)
    assert fallback.kernel is None and fallback.reason == "the table for h200 has no bf16 kernels"
    fp8 = decide(TableChoice(table, "test"), *(operand(*x.shape, x.pointer, torch.float8_e4m3fn) for x in (a, b, c)))
    assert fp8.kernel is None and "float32, float16, bfloat16 do" in fp8.reason
