"""The runtime's dispatch, fallbacks and table loading, on the host device (NumPy, no GPU)."""

import json

import numpy
import pytest

from autotune.errors import InputError
from autotune.kernel.contract import LaunchContract
from autotune.runtime import Runtime
from autotune.runtime.devices import HostDevice
from autotune.runtime.sources import TABLE_VARIABLE, choose_table
from autotune.select.kernel_table import DtypeTable, KernelTable, TableError, TableKernel, TableRule, read_table

RNG = numpy.random.default_rng(7)


def kernel(name: str, tile: int) -> TableKernel:
    launch = LaunchContract(entry=name, target="sm_90", block=(256, 1, 1),
                            grid=(f"cdiv(N, {tile})", f"cdiv(M, {tile})", "1"), dynamic_smem=0, opt_in=False)
    return TableKernel(name=name, family="sgemm", params={}, template_hash="0" * 16, launch=launch)


def small_table(arch: str = "sm_90") -> KernelTable:
    """Two f32 kernels: one tuned at 64^3, one at 4096^3, each enough faster than cuBLAS there that the
    shapes these tests ask for stay on them; no f16."""
    rules = (TableRule(64, 64, 64, "small", ms=0.01, cublas_ms=0.02, measured_on="NVIDIA H200"),
             TableRule(4096, 4096, 4096, "large", ms=2.8, cublas_ms=3.0, measured_on="NVIDIA H200"))
    return KernelTable(arch=arch, gpu="h200", measured_on=("NVIDIA H200",),
                       dtypes={"f32": DtypeTable((kernel("small", 32), kernel("large", 128)), rules)})


def whole_tiles_table() -> KernelTable:
    """One f32 kernel tuned at 2048x4096x64, built for whole 128x256 tiles, and its build for any shape."""
    whole = kernel("whole", 128)
    whole = TableKernel(name="whole", family="sgemm", params={}, template_hash="0" * 16, any_shape="any",
                        launch=LaunchContract(**{**whole.launch.__dict__, "grid": ("cdiv(N, 256)", "cdiv(M, 128)", "1"),
                                                 "serves": "M % 128 + N % 256 + K % 4 == 0"}))
    rules = (TableRule(2048, 4096, 64, "whole", ms=2.7, cublas_ms=3.0, measured_on="NVIDIA H200"),)
    return KernelTable(arch="sm_90", gpu="h200", measured_on=("NVIDIA H200",),
                       dtypes={"f32": DtypeTable((kernel("any", 128), whole), rules)})


def matrices(m, n, k, dtype=numpy.float32):
    return RNG.standard_normal((m, k)).astype(dtype), RNG.standard_normal((k, n)).astype(dtype)


@pytest.fixture
def runtime():
    device = HostDevice()
    return Runtime(device, (small_table(), "test table")), device


def test_nearest_tuned_shape_picks_the_kernel_and_its_grid(runtime):
    rt, device = runtime
    a, b = matrices(100, 96, 70)
    out = rt.gemm(a, b)
    assert numpy.allclose(out, a @ b, rtol=1e-5, atol=1e-4)
    assert device.calls == [("kernel", "small", (3, 4, 1))]  # cdiv(96, 32), cdiv(100, 32)
    a, b = matrices(2100, 3072, 2500)
    rt.gemm(a, b)
    assert device.calls[-1] == ("kernel", "large", (24, 17, 1))
    decision = rt.explain(a, b)
    assert decision.kernel.name == "large" and "nearest tuned shape 4096x4096x4096" in str(decision)


def test_a_shape_more_than_twice_its_nearest_tuned_shape_on_an_axis_runs_cublas(runtime):
    """The kernel's time is not carried that far, however much faster it was there: 300 columns are more than
    twice 64, 1000 of K less than half of 4096; the shape goes to cuBLAS, and explain says why."""
    rt, device = runtime
    for shape, rule in (((100, 300, 70), "64x64x64"), ((2100, 3000, 1000), "4096x4096x4096")):
        a, b = matrices(*shape)
        assert numpy.allclose(rt.gemm(a, b), a @ b, rtol=1e-4, atol=1e-3)
        assert device.calls[-1][0] == "cublas", device.calls
        decision = rt.explain(a, b)
        assert decision.kernel is None
        assert f"nearest tuned shape {rule} is more than 2x from {'x'.join(map(str, shape))}" in str(decision)


def test_a_kernel_built_for_whole_tiles_runs_its_build_for_any_shape_elsewhere(tmp_path):
    device = HostDevice()
    path = tmp_path / "t.json"
    whole_tiles_table().write(path, with_cubins=False)
    rt = Runtime(device, (read_table(path), "test table"))
    a, b = matrices(2048, 4096, 64)  # whole tiles
    assert numpy.allclose(rt.gemm(a, b), a @ b, rtol=1e-4, atol=1e-3)
    assert device.calls[-1] == ("kernel", "whole", (16, 16, 1))
    for m, n, k in ((2100, 4096, 64), (2048, 4096, 66)):  # rows cut; K, which the kernel runs element by element
        a, b = matrices(m, n, k)
        assert numpy.allclose(rt.gemm(a, b), a @ b, rtol=1e-4, atol=1e-3)
        assert device.calls[-1][:2] == ("kernel", "any"), (m, n, k)
        decision = rt.explain(a, b)
        assert decision.kernel.name == "any" and "whole is built for whole tiles" in str(decision)
        assert "2.7 ms there" in str(decision)  # the time measured for the build it stands for


def test_a_shape_cutting_the_kernels_tiles_along_n_or_k_runs_cublas(runtime):
    """A time measured on whole tiles is not carried to cut ones along N or K; rows cut anywhere keep the kernel.
    The small kernel's 32-column tiles are whole at 64^3 and cut at 100 columns; large's k-tiles are K itself."""
    rt, device = runtime
    for shape in ((64, 100, 64), (3000, 4000, 4096)):
        a, b = matrices(*shape)
        assert numpy.allclose(rt.gemm(a, b), a @ b, rtol=1e-4, atol=1e-3)
        assert device.calls[-1] == ("cublas",), shape
        decision = rt.explain(a, b)
        assert decision.kernel is None and "cuts the tiles of the tuned kernel" in str(decision), decision
        assert "along N or K, whole at the nearest tuned shape" in str(decision)
    a, b = matrices(3000, 4096, 4000)  # rows cut, K run element by element: the kernel
    rt.gemm(a, b)
    assert device.calls[-1] == ("kernel", "large", (32, 24, 1))


def test_a_table_kernel_for_some_shapes_must_name_a_build_for_any_shape(tmp_path):
    data = whole_tiles_table().to_dict()
    data["dtypes"]["f32"]["kernels"][1]["any_shape"] = "whole"
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    with pytest.raises(TableError, match="'whole' serves some shapes only"):
        read_table(path)


def test_alpha_beta_and_out(runtime):
    rt, _ = runtime
    a, b = matrices(33, 17, 9)
    c = RNG.standard_normal((33, 17)).astype(numpy.float32)
    want = 2.0 * (a @ b) - 0.5 * c
    assert rt.gemm(a, b, out=c, alpha=2.0, beta=-0.5) is c
    assert numpy.allclose(c, want, rtol=1e-5, atol=1e-4)
    with pytest.raises(InputError, match="beta"):
        rt.gemm(a, b, beta=1.0)  # nothing to scale without out


@pytest.mark.parametrize("make, reason", [
    (lambda: matrices(64, 64, 64, numpy.float64), "no tuned kernel takes float64"),
    (lambda: matrices(64, 64, 64, numpy.float16), "no f16 kernels"),
    (lambda: (matrices(64, 64, 128)[0][:, ::2], matrices(64, 64, 64)[1]), "a is not C-contiguous"),
    (lambda: (numpy.frombuffer(numpy.zeros(64 * 64 + 1, numpy.float32).data, numpy.float32, 64 * 64, 4)
              .reshape(64, 64), matrices(64, 64, 64)[1]), "not 16-byte aligned"),
])
def test_what_no_tuned_kernel_serves_runs_on_cublas_and_says_why(runtime, make, reason):
    rt, device = runtime
    a, b = make()
    decision = rt.explain(a, b)
    assert decision.uses_cublas and reason in decision.reason
    out = rt.gemm(a, b)
    assert device.calls[-1] == ("cublas",)
    assert numpy.allclose(out.astype(numpy.float64), a.astype(numpy.float64) @ b, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("shape, fragment", [
    ((16, 64, 64), "m = 16 is outside the tuned range of m (32..8192)"),
    ((64, 9000, 64), "n = 9000 is outside the tuned range of n (32..8192)"),
])
def test_sizes_outside_the_tuned_range_run_on_cublas(runtime, shape, fragment):
    rt, device = runtime
    a, b = matrices(*shape)
    assert fragment in rt.explain(a, b).reason
    rt.gemm(a, b)
    assert device.calls == [("cublas",)]


def test_mixed_dtypes_fall_back(runtime):
    rt, device = runtime
    a, _ = matrices(8, 8, 8)
    b = matrices(8, 8, 8, numpy.float16)[1]
    assert "dtypes differ" in rt.explain(a, b).reason


@pytest.mark.parametrize("shapes, fragment", [
    (((4, 5), (6, 7)), "b.shape"),
    (((4, 5, 1), (5, 7)), "b.shape"),  # a's rows are 20 of 1 column
    (((4, 5), (5, 7, 1)), "b.shape"),
])
def test_shapes_that_do_not_chain_are_errors(runtime, shapes, fragment):
    rt, device = runtime
    a, b = (numpy.ones(s, numpy.float32) for s in shapes)
    with pytest.raises(InputError, match=fragment):
        rt.gemm(a, b)
    assert device.calls == []


def test_activations_of_more_dimensions_are_one_matrix_of_their_rows(runtime):
    rt, device = runtime
    rng = numpy.random.default_rng(3)
    a = rng.standard_normal((2, 3, 64)).astype(numpy.float32)
    b = rng.standard_normal((64, 32)).astype(numpy.float32)
    product = rt.gemm(a, b)
    assert product.shape == (2, 3, 32)
    numpy.testing.assert_allclose(product, a @ b, rtol=1e-5, atol=1e-5)
    assert rt.explain(a, b).shape == (6, 32, 64)
    out = numpy.full((2, 3, 32), numpy.nan, numpy.float32)
    assert rt.gemm(a, b, out=out) is out
    numpy.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    with pytest.raises(InputError, match=r"a\.shape.*C-contiguous"):
        rt.gemm(a.transpose(1, 0, 2), b)
    assert len(device.calls) == 2


def test_wrong_out_shape_is_an_error(runtime):
    rt, _ = runtime
    a, b = matrices(4, 5, 6)
    with pytest.raises(InputError, match=r"out.shape .*\(4, 5\)"):
        rt.gemm(a, b, out=numpy.empty((5, 4), numpy.float32))


def test_no_table_means_cublas_with_the_reason():
    rt = Runtime(HostDevice(name="NVIDIA A100-SXM4-80GB", arch="sm_80"))  # the shipped results are H200's
    a, b = matrices(16, 16, 16)
    decision = rt.explain(a, b)
    assert decision.uses_cublas and "no tuned results" in str(decision)


def test_a_table_for_another_architecture_is_refused_naming_both(tmp_path):
    path = tmp_path / "t.json"
    small_table("sm_80").write(path, with_cubins=False)
    rt = Runtime(HostDevice(name="NVIDIA H200", arch="sm_90"), (read_table(path), str(path)))
    with pytest.raises(TableError, match=r"sm_80 .*sm_90"):
        rt.gemm(*matrices(8, 8, 8))


def test_table_file_round_trip_and_environment_variable(tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    small_table().write(path, with_cubins=False)
    assert read_table(path) == small_table()
    monkeypatch.setenv(TABLE_VARIABLE, str(path))
    choice = choose_table("NVIDIA H200", "sm_90", 0)
    assert choice.table == small_table() and str(path) in choice.note


@pytest.mark.parametrize("edit, fragment", [
    (lambda d: d.update(schema_version=3), "schema_version 3"),
    (lambda d: d.pop("kind"), "not an autotune kernel table"),
    (lambda d: d["dtypes"]["f32"]["rules"][0].update(kernel="missing", times=[["missing", 1.0]]), "'missing'"),
    (lambda d: d["dtypes"]["f32"]["rules"][0].update(times=[]), "times must start with its kernel"),
    (lambda d: d["dtypes"]["f32"]["kernels"][0]["launch"].update(grid=["__import__('os')", "1", "1"]), "grid"),
    (lambda d: d["dtypes"]["f32"]["rules"][0].update(ms=-1), "positive"),
    (lambda d: d.update(arch="sm_90 */ int evil;"), "arch"),
    (lambda d: d.update(gpu="h200 */"), "gpu"),
])
def test_bad_table_files_are_refused_in_one_line(tmp_path, edit, fragment):
    data = small_table().to_dict()
    edit(data)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    with pytest.raises(TableError, match=fragment) as error:
        read_table(path)
    assert "\n" not in str(error.value)


def test_a_version_1_table_file_still_reads_and_picks_the_nearest_tuned_shapes_kernel(tmp_path):
    data = small_table().to_dict()
    data["schema_version"] = 1
    for dtype in data["dtypes"].values():
        dtype.pop("sms")
        for rule in dtype["rules"]:
            rule.pop("times")
        for kernel in dtype["kernels"]:
            kernel["launch"].pop("k_tiles")
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(data))
    f32 = read_table(path).dtypes["f32"]
    assert [f32.pick(*shape).kernel for shape in [(100, 300, 70), (2000, 3000, 1000), (64, 64, 64)]] == [
        "small", "large", "small"]
    assert f32.rules[0].times == (("small", 0.01),)


def test_shipped_results_serve_h200_and_same_architecture_h100():
    h200 = choose_table("NVIDIA H200", "sm_90", 0)
    assert h200.table.gpu == "h200" and "shipped" in h200.note
    h100 = choose_table("NVIDIA H100 80GB HBM3", "sm_90", 0)
    assert h100.table.arch == "sm_90" and "same architecture" in h100.note and "NVIDIA H200" in h100.note
    a100 = choose_table("NVIDIA A100-SXM4-80GB", "sm_80", 0)
    assert a100.table is None


def _share_the_sessions_builds(cache, session_cache) -> None:
    """In a cache folder of a test's own, the compiled kernels and the imported shipped results are the
    session's (built once, by whichever test needs them first); its tables are its own."""
    for shared in ("cubins", "shipped"):
        (session_cache / shared).mkdir(parents=True, exist_ok=True)
        (cache / shared).symlink_to(session_cache / shared, target_is_directory=True)


def test_the_shipped_table_is_built_once_then_read_from_the_cache(tmp_path, monkeypatch, session_cache):
    """Where the prebuilt table is not current (tests/test_prebuilt.py), the shipped results' table is built."""
    from autotune.runtime import sources

    _share_the_sessions_builds(tmp_path, session_cache)
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path))
    monkeypatch.setenv("AUTOTUNE_DB", f"sqlite:///{tmp_path}/absent/none.db")  # no user database
    monkeypatch.setattr(sources, "shipped_table", lambda key, arch: None)  # no current prebuilt table
    built = choose_table("NVIDIA H200", "sm_90", 0)
    cached = sources.shipped_table_path("h200", "sm_90")
    assert cached.exists() and "shipped with autotune" in built.note

    def no_import():
        raise AssertionError("the shipped results were imported again")

    monkeypatch.setattr(sources, "shipped_store", no_import)
    again = choose_table("NVIDIA H200", "sm_90", 0)
    assert again.table.to_dict() == built.table.to_dict() and again.note == built.note

    cached.write_text("{not json")  # a damaged cache file is built again
    monkeypatch.undo()
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path))
    monkeypatch.setenv("AUTOTUNE_DB", f"sqlite:///{tmp_path}/absent/none.db")
    monkeypatch.setattr(sources, "shipped_table", lambda key, arch: None)
    rebuilt = choose_table("NVIDIA H200", "sm_90", 0)
    assert {**rebuilt.table.to_dict(), "created_at": None} == {**built.table.to_dict(), "created_at": None}
    assert json.loads(cached.read_text())["arch"] == "sm_90"


def test_a_kernel_built_for_few_rows_never_runs_more_and_says_why():
    """A kernel whose rules bound the rows it computes (sgemm_gemv's M <= MAX_M) serves those shapes only: the
    table picks another kernel of the rule that runs the shape, or cuBLAS where none does."""
    few = TableKernel(name="few", family="sgemm_gemv", params={}, template_hash="0" * 16,
                      launch=LaunchContract(entry="few", target="sm_90", block=(256, 1, 1), grid=("cdiv(N, 64)", "1", "1"),
                                            dynamic_smem=0, opt_in=False, serves="(M <= 4) * (N % 4 == 0)"))
    rules = (TableRule(4, 4096, 4096, "few", ms=0.01, cublas_ms=0.03, measured_on="NVIDIA H200"),
             TableRule(64, 64, 64, "small", ms=0.01, cublas_ms=0.02, measured_on="NVIDIA H200",
                       times=(("small", 0.01),)))
    table = KernelTable(arch="sm_90", gpu="h200", measured_on=("NVIDIA H200",),
                        dtypes={"f32": DtypeTable((few, kernel("small", 32)), rules)})
    device = HostDevice()
    rt = Runtime(device, (table, "test table"))
    a, b = matrices(3, 4096, 4096)
    rt.gemm(a, b)
    assert device.calls[-1][:2] == ("kernel", "few")
    for m, n in ((6, 4096), (4, 4098)):  # more rows than it computes; rows of B it cannot load
        a, b = matrices(m, n, 4096)
        decision = rt.explain(a, b)
        assert decision.uses_cublas and decision.pick.unserved, decision
        assert "no tuned kernel measured at the nearest tuned shape 4x4096x4096 runs" in decision.reason
        assert "M <= 4" in decision.reason
        out = rt.gemm(a, b)
        assert device.calls[-1] == ("cublas",)
        assert numpy.allclose(out, a @ b, rtol=1e-4, atol=1e-2)
