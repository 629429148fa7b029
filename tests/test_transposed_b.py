"""Layout "nt": B stored transposed (N x K, nn.Linear's weight), from the problem through the space file,
the kernel's name and source, its tensor maps and the command line."""

import json

import pytest
from conftest import assert_one_line_error, autotune

from autotune.errors import InputError, SpaceError
from autotune.gpu_specs import GPUS
from autotune.kernel.render import render
from autotune.kernel_abi import TensorMapSpec
from autotune.problem import GemmProblem, make_problem
from autotune.search.start import choose_family
from autotune.space.family import SearchSpace, load_space

H200 = GPUS["h200"]


def test_an_nt_problem_stores_b_as_n_rows_of_k():
    assert GemmProblem(2, 3, 4).b_shape == (4, 3)
    assert GemmProblem(2, 3, 4, layout="nt").b_shape == (3, 4)
    assert make_problem("2x3x4", "f16", layout="nt").layout == "nt"
    with pytest.raises(InputError) as error:
        GemmProblem(2, 3, 4, layout="tn")
    assert "'tn'" in str(error.value) and "row, nt" in str(error.value)


def test_a_family_serving_nt_names_and_renders_its_transposed_builds():
    row = load_space("naive_f16")
    nt = load_space("naive_f16", "f16", "nt")
    assert nt.layout == "nt" and row.layout == "row" and row.for_layout("nt") is nt
    config = next(iter(nt))
    assert config.layout == "nt" and config.name.endswith("_nt")
    assert not next(iter(row)).name.endswith("_nt")
    assert config.name == row.config(config.as_dict()).name + "_nt"
    assert "col) * K + k" in render(nt, config, H200).code  # B read as N x K
    assert "col) * K + k" not in render(row, row.config(config.as_dict()), H200).code
    assert nt.seeds == [] or all(seed.layout == "nt" for seed in nt.seeds)


def test_a_family_without_nt_refuses_it_naming_what_it_serves():
    with pytest.raises(InputError) as error:
        load_space("sgemm").for_layout("nt")
    assert "'nt'" in str(error.value) and "row" in str(error.value)
    with pytest.raises(InputError) as error:
        choose_family("sgemm", "f32", H200, "nt")
    assert "sgemm" in str(error.value) and "naive_f32" in str(error.value)


def test_without_a_family_the_layout_chooses_among_those_serving_it():
    space = choose_family(None, "f16", H200, "nt")
    assert "nt" in space.layouts and space.layout == "nt"


@pytest.mark.parametrize("layouts, fragment", [('["nt"]', "row"), ('["row", "tn"]', "'tn'"),
                                               ('"row"', "list")])
def test_space_files_with_bad_layouts_are_refused(tmp_path, layouts, fragment):
    text = load_space("naive_f32").source_text.replace('layouts = ["row", "nt"]', f"layouts = {layouts}")
    path = tmp_path / "mine.toml"
    path.write_text(text.replace('family = "naive_f32"', 'family = "mine"'))
    with pytest.raises(SpaceError) as error:
        SearchSpace(path, templates=load_space("naive_f32").template_dir)
    assert fragment in str(error.value)


def test_tensor_maps_of_a_transposed_b_describe_it_as_stored():
    spec = TensorMapSpec("tensor_map_b", "B", (64, 64), 128)
    assert spec.shape(10, 20, 30) == (30, 20)
    assert spec.shape(10, 20, 30, b_transposed=True) == (20, 30)
    assert TensorMapSpec("tensor_map_a", "A", (64, 64), 128).shape(10, 20, 30, b_transposed=True) == (10, 30)


@pytest.mark.parametrize("args, fragments", [
    (["space", "--gpu", "h200", "--shape", "64", "--layout", "tn"], ["--layout", "'tn'", "row, nt"]),
    (["space", "--gpu", "h200", "--shape", "64", "--family", "sgemm", "--layout", "nt"], ["'sgemm'", "nt", "row"]),
    (["search", "--gpu", "h200", "--shape", "64", "--backend", "fake", "--layout", "NT"], ["'NT'", "row, nt"]),
])
def test_bad_layouts_are_one_line(args, fragments):
    assert_one_line_error(autotune(*args), *fragments)


def test_an_nt_search_records_and_queries_its_layout(tmp_path):
    db = f"sqlite:///{tmp_path}/results.db"
    shape = ["--shape", "96x40x24", "--dtype", "f16"]
    search = autotune("search", "--gpu", "h200", *shape, "--layout", "nt", "--family", "naive_f16",
                      "--backend", "fake", "--db", db, "--jobs", "1", "--trials", "3")
    assert search.returncode == 0, search.stderr
    assert "96x40x24 f16 nt" in search.stderr
    query = autotune("query", "--gpu", "h200-fake", *shape, "--layout", "nt", "--db", db, "--json")
    assert query.returncode == 0, query.stderr
    rows = json.loads(query.stdout)
    assert rows and all(row["config"].endswith("_nt") for row in rows)
    row_layout = autotune("query", "--gpu", "h200-fake", *shape, "--db", db)
    assert row_layout.returncode == 0 and "no results" in row_layout.stdout

    exported = autotune("results", "export", "--gpu", "h200-fake", "--db", db)  # and into another database
    assert exported.returncode == 0, exported.stderr
    (tmp_path / "nt.jsonl").write_text(exported.stdout)
    other = f"sqlite:///{tmp_path}/other.db"
    assert autotune("results", "import", str(tmp_path / "nt.jsonl"), "--db", other).returncode == 0
    again = autotune("query", "--gpu", "h200-fake", *shape, "--layout", "nt", "--db", other, "--json")
    assert [row["config"] for row in json.loads(again.stdout)] == [row["config"] for row in rows]


# -- the runtime: b = W.T of a row-major W goes to the table's nt kernels -------------------------------------


def _nt_table():
    from autotune.kernel.contract import LaunchContract
    from autotune.select.kernel_table import DtypeTable, KernelTable, TableKernel, TableRule

    def kernel(name, layout):
        launch = LaunchContract(entry=name, target="sm_90", block=(256, 1, 1),
                                grid=("cdiv(N, 64)", "cdiv(M, 64)", "1"), dynamic_smem=0, opt_in=False)
        return TableKernel(name=name, family="sgemm", params={}, template_hash="0" * 16, launch=launch, layout=layout)

    def table(name, layout):
        rule = TableRule(64, 64, 64, name, ms=0.005, cublas_ms=0.02, measured_on="NVIDIA H200")
        return {"f32": DtypeTable((kernel(name, layout),), (rule,))}

    return KernelTable(arch="sm_90", gpu="h200", measured_on=("NVIDIA H200",), dtypes=table("rowk", "row"),
                       other_layouts={"nt": table("ntk", "nt")})


def test_the_runtime_sends_a_transposed_b_to_the_nt_kernels():
    import numpy

    from autotune.runtime import Runtime
    from autotune.runtime.devices import HostDevice

    device = HostDevice()
    rt = Runtime(device, (_nt_table(), "test table"))
    rng = numpy.random.default_rng(3)
    x, w = rng.standard_normal((70, 60), numpy.float32), rng.standard_normal((64, 60), numpy.float32)
    out = rt.gemm(x, w.T)  # x @ W.T, W stored out x in
    assert numpy.allclose(out, x @ w.T, rtol=1e-5, atol=1e-4)
    assert device.calls[-1][:2] == ("kernel", "ntk")
    decision = rt.explain(x, w.T)
    assert decision.layout == "nt" and "70x64x60 nt" in str(decision)
    rt.gemm(x, numpy.ascontiguousarray(w.T))
    assert device.calls[-1][:2] == ("kernel", "rowk")
    strided = rng.standard_normal((64, 120), numpy.float32)[:, ::2]  # neither layout: cuBLAS, saying why
    decision = rt.explain(x, strided.T)
    assert decision.uses_cublas and "b is not C-contiguous" in decision.reason


def test_a_table_without_nt_kernels_says_so_and_round_trips_its_layouts(tmp_path):
    import dataclasses

    from autotune.runtime import Runtime
    from autotune.runtime.devices import HostDevice
    from autotune.select.kernel_table import read_table

    import numpy

    table = _nt_table()
    path = tmp_path / "table.json"
    table.write(path, with_cubins=False)
    again = read_table(path)
    assert again.for_layout("nt")["f32"].kernels[0].layout == "nt" and again.to_dict() == table.to_dict()
    rt = Runtime(HostDevice(), (dataclasses.replace(table, other_layouts={}), "test table"))
    x, w = numpy.ones((64, 64), numpy.float32), numpy.ones((64, 64), numpy.float32)
    decision = rt.explain(x, w[:, :32].T.copy().T)  # a transposed view
    assert decision.uses_cublas and "no f32 kernels for b stored transposed" in decision.reason


def test_an_nt_search_keeps_a_study_of_its_own():
    from autotune.search.search import study_name

    space = load_space("hgemm_wgmma", "f16")
    row = study_name(space, "h200", GemmProblem(64, 64, 64, "f16"))
    nt = study_name(space.for_layout("nt"), "h200", GemmProblem(64, 64, 64, "f16", layout="nt"))
    assert row != nt and "/f16/nt/" in nt and "/nt/" not in row
