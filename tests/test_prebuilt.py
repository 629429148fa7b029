"""The shipped tables come prebuilt (tuned_db/<scope>.table.json, <arch>.cubins.tar.xz): current, used first, never stale.

If a test here fails after a change to tuned_db/*.jsonl, a template, a search space or the selection,
rebuild them with ``python -m autotune.cli.prebuilt`` and commit what it writes.
"""

import dataclasses
import hashlib
import importlib.util
import io
import json
import shutil
import types
import warnings
from pathlib import Path

import numpy
import pytest

from autotune.cli import main
from autotune.cli.progress import TerminalProgress, progress_text
from autotune.export import prebuilt
from autotune.export.compile import COMPILING, compile_table
from autotune.export.shipped import SOURCE, shipped_hold_out, shipped_store
from autotune.kernel.compile import nvrtc_version
from autotune.problem import DTYPES
from autotune.runtime import Runtime, devices, sources
from autotune.runtime.devices import HostDevice, load_table_kernel
from autotune.select.kernel_table import KernelTable, TableError
from autotune.select.selection import build_table

REBUILD = "run `python -m autotune.cli.prebuilt` and commit what it writes"


def committed(scope: str) -> dict:
    return json.loads(prebuilt.table_path(scope).read_text())


def without_cubins(table: KernelTable) -> dict:
    """A table's dict as a fresh build has it: no cubins, no resources, no date."""
    data = table.to_dict(with_cubins=False)
    for tables in [data["dtypes"], *data.get("layouts", {}).values()]:
        for dtype in tables.values():
            for kernel in dtype["kernels"]:
                kernel["resources"] = None
    return {**data, "created_at": None}


# -- the committed files are current --------------------------------------------------------------------------


def test_the_committed_prebuilt_tables_are_the_tables_built_from_the_shipped_results():
    """Everything but the cubins, against the tables this autotune builds from tuned_db (no compiling)."""
    with shipped_store() as store:
        scopes = prebuilt.scopes(store)
        files = sorted(path.name for path in prebuilt.folder().glob(f"*{prebuilt.TABLE_SUFFIX}"))
        assert files == sorted(prebuilt.table_path(scope).name for scope, _ in scopes), REBUILD
        for scope, arch in scopes:
            gpu = None if scope == arch else scope
            built = prebuilt.tuned_dtypes(dataclasses.replace(
                build_table(store, DTYPES, gpu=gpu, arch=arch, hold_out=shipped_hold_out()), source=SOURCE))
            current = prebuilt.read_prebuilt(scope)
            assert current is not None, f"{scope}: the prebuilt table is not current; {REBUILD}"
            assert without_cubins(current.table) == without_cubins(built), f"{scope}: {REBUILD}"
            assert current.gpus == tuple(sorted({key for key, _, _ in store.gpus()}))
            assert all(k.cubin[:4] == b"\x7fELF" and k.resources.registers > 0
                       for dtype in current.table.dtypes.values() for k in dtype.kernels)


def test_the_committed_tables_never_rule_a_shape_of_the_set_that_judges_them():
    """The held-out shapes have shipped measurements (to judge the tables by), and no table takes them."""
    held_out = set(shipped_hold_out())
    with shipped_store() as store:
        measured = {(p.m, p.n, p.k) for key, _, _ in store.gpus() for dtype in DTYPES for p in store.problems(key, dtype)}
    assert held_out & measured, "the shipped results no longer measure the held-out shapes: nothing to judge by"
    for path in prebuilt.folder().glob(f"*{prebuilt.TABLE_SUFFIX}"):
        table = prebuilt.read_prebuilt(path.name.removesuffix(prebuilt.TABLE_SUFFIX)).table
        ruled = {rule.shape for _, _, dtype in table.dtype_tables() for rule in dtype.rules}
        assert ruled and not ruled & held_out, f"{path.name} rules held-out shapes {sorted(ruled & held_out)}"


def test_the_committed_cubins_are_what_nvrtc_builds(monkeypatch, tmp_path):
    """NVRTC's output is deterministic: an f32 and an f16 kernel compiled again (in the export's compile pool, no
    disk cache) are the committed bytes, where this NVRTC is the one that built them."""
    table = prebuilt.read_prebuilt("h200").table
    recorded = committed("h200")["prebuilt"]["nvrtc"]
    if recorded != nvrtc_version():
        pytest.skip(f"the prebuilt cubins were built by NVRTC {recorded}, this is {nvrtc_version()}")
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path))
    kernels = {dtype: table.dtypes[dtype].kernels[0] for dtype in ("f32", "f16")}
    bare = dataclasses.replace(table, dtypes={dtype: dataclasses.replace(
        table.dtypes[dtype], kernels=(dataclasses.replace(kernel, cubin=None, resources=None),))
        for dtype, kernel in kernels.items()})
    heard = []
    compiled = compile_table(bare, lambda what, done, total: heard.append((what, done, total)), jobs=2)
    for dtype, kernel in kernels.items():
        again = compiled.dtypes[dtype].kernels[0]
        assert again.cubin == kernel.cubin and again.resources == kernel.resources, f"{kernel.name}: {REBUILD}"
    assert heard[0] == (COMPILING, 0, 2) and heard[-1] == (COMPILING, 2, 2)


def test_the_committed_cubins_are_built_by_the_nvrtc_that_built_the_kernels_the_shipped_results_measured():
    """A cubin of the same source from another NVRTC is another kernel (registers, schedule): the runtime would
    run kernels whose times the table does not know."""
    with shipped_store() as store:
        measured = store.nvrtc_versions()
    assert measured and committed("h200")["prebuilt"]["nvrtc"] in measured


def test_every_committed_cubin_has_the_registers_of_the_build_the_shipped_results_measured():
    """Each kernel of the H200's table is the one measured: its cubin uses the registers ptxas reported for the
    build of its config that the shipped results measured (another NVRTC, or other headers, changes them)."""
    from autotune.results.entries import MeasurementEntry
    from autotune.space.family import load_space

    table = KernelTable.from_dict(committed("h200"))
    wanted = {(layout, dtype, kernel.name): kernel for layout, dtype, dtype_table in table.dtype_tables()
              for kernel in dtype_table.kernels}
    spaces, measured = {}, {}
    with shipped_store() as store:
        entries = store.export_entries("h200").entries
    for entry in entries:
        if not isinstance(entry, MeasurementEntry) or entry.kernel is None or entry.measurement.resources is None:
            continue
        where = (entry.kernel.family, entry.problem.dtype, entry.problem.layout)
        if where not in spaces:
            spaces[where] = load_space(*where)
        name = spaces[where].config(dict(entry.kernel.params)).name  # knobs added since take their defaults
        if (where[2], where[1], name) in wanted:
            measured.setdefault((where[2], where[1], name), set()).add(entry.measurement.resources.registers)
    assert len(measured) == len(wanted)
    assert [(key[2], wanted[key].resources.registers, sorted(registers)) for key, registers in measured.items()
            if wanted[key].resources.registers not in registers] == []


def test_prebuilt_tables_are_refused_with_an_nvrtc_other_than_the_measured_kernels_one(monkeypatch, tmp_path, capsys):
    prebuilt.check_nvrtc({"13.0"}, "13.0")
    prebuilt.check_nvrtc(set(), "13.5")  # no measurements: nothing to match
    with pytest.raises(prebuilt.CompilerError, match=r"measured kernels built by NVRTC 13\.0, but this NVRTC is 13\.5, "
                                                     r"whose cubins differ: .*nvidia-cuda-nvrtc==13\.0\.\*"):
        prebuilt.check_nvrtc({"13.0"}, "13.5")
    from autotune.cli import prebuilt as command

    monkeypatch.setattr("autotune.kernel.compile.nvrtc_version", lambda: "12.9")
    assert command.main(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("autotune: error: the shipped results measured kernels built by NVRTC 13.0, but this "
                          "NVRTC is 12.9") and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []  # nothing written


# -- used only while current --------------------------------------------------------------------------------------


@pytest.fixture
def copied(tmp_path, monkeypatch):
    """The committed prebuilt files in a folder of their own, which the runtime reads them from."""
    for path in [*prebuilt.folder().glob(f"*{prebuilt.TABLE_SUFFIX}"), *prebuilt.folder().glob(f"*{prebuilt.CUBINS_SUFFIX}")]:
        shutil.copy(path, tmp_path / path.name)
    monkeypatch.setattr(prebuilt, "folder", lambda: tmp_path)
    return tmp_path


def _swap_two_cubins(digests: dict) -> None:
    first, second = list(digests)[:2]
    digests[first], digests[second] = digests[second], digests[first]


def _edit_record(folder, scope, edit):
    path = prebuilt.table_path(scope, folder)
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("edit", [
    lambda d: d["prebuilt"]["inputs"].update(shipped_results="0" * 64),  # other shipped results
    lambda d: d["prebuilt"]["inputs"]["templates"].update(sgemm="0" * 16),  # another sgemm template
    lambda d: d["prebuilt"]["inputs"]["gpu"].update(sms=114),  # another GPU
    lambda d: d["prebuilt"]["inputs"].update(selection="the fastest kernel anywhere"),  # another rule
    lambda d: d["prebuilt"]["inputs"].update(schema_version=1),
    lambda d: d.pop("prebuilt"),
    lambda d: d["prebuilt"]["cubin_sha256"].update({next(iter(d["prebuilt"]["cubin_sha256"])): "0" * 64}),
    lambda d: d.update(schema_version=99),
    lambda d: _swap_two_cubins(d["prebuilt"]["cubin_sha256"]),  # a kernel given another's cubin
])
def test_a_prebuilt_table_not_current_or_damaged_is_passed_over(copied, edit):
    assert prebuilt.shipped_table("h200", "sm_90").gpu == "h200"
    _edit_record(copied, "h200", edit)
    assert prebuilt.read_prebuilt("h200") is None
    assert prebuilt.shipped_table("h200", "sm_90") is None  # h200 has results of its own: not the sm_90 table


def test_changed_shipped_results_or_templates_make_the_prebuilt_tables_stale(copied, monkeypatch):
    assert prebuilt.read_prebuilt("h200") is not None and prebuilt.read_prebuilt("sm_90") is not None
    with monkeypatch.context() as patch:
        patch.setattr(prebuilt, "results_digest", lambda: "f" * 64)  # a results file added or edited
        assert prebuilt.read_prebuilt("h200") is None and prebuilt.read_prebuilt("sm_90") is None
    with monkeypatch.context() as patch:  # a template or space file of a family the results measured, edited
        patch.setattr("autotune.space.family.load_space", lambda family: types.SimpleNamespace(template_hash="0"))
        assert prebuilt.read_prebuilt("h200") is None
    assert prebuilt.read_prebuilt("h200") is not None


def test_a_damaged_or_incomplete_cubin_archive_is_passed_over(copied):
    archive = prebuilt.cubins_path("sm_90", copied)
    whole = archive.read_bytes()
    archive.write_bytes(whole[: len(whole) // 2])
    assert prebuilt.read_prebuilt("h200") is None
    archive.write_bytes(prebuilt.cubins_archive([b"\x7fELF not one of the table's"]))
    assert prebuilt.read_prebuilt("h200") is None
    archive.unlink()
    assert prebuilt.read_prebuilt("sm_90") is None
    archive.write_bytes(whole)
    assert prebuilt.read_prebuilt("sm_90") is not None


def test_the_gpu_gets_its_own_table_and_others_of_its_architecture_the_architectures(copied):
    assert prebuilt.shipped_table("h200", "sm_90").gpu == "h200"
    assert prebuilt.shipped_table("h100", "sm_90").gpu is None
    assert prebuilt.shipped_table(None, "sm_90").gpu is None
    assert prebuilt.shipped_table("a100", "sm_80") is None
    prebuilt.table_path("h200", copied).unlink()
    assert prebuilt.shipped_table("h200", "sm_90") is None  # its own results exist: built, not the sm_90 table


def test_the_archive_holds_each_cubin_once_by_its_digest_and_is_the_same_bytes_for_the_same_cubins(tmp_path):
    one, two = b"\x7fELF one", b"\x7fELF two"
    archive = prebuilt.cubins_archive([one, two, one])
    assert archive == prebuilt.cubins_archive([two, one])
    (tmp_path / "a.tar.xz").write_bytes(archive)
    digests = {hashlib.sha256(c).hexdigest(): c for c in (one, two)}
    assert prebuilt.read_cubins(tmp_path / "a.tar.xz", set(digests)) == digests
    with pytest.raises(ValueError, match="lacks"):
        prebuilt.read_cubins(tmp_path / "a.tar.xz", {"0" * 64})


# -- the runtime and export take it ---------------------------------------------------------------------------


def _nothing_built(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the shipped table was built, or a kernel compiled, though a current one ships")

    monkeypatch.setattr(sources, "shipped_store", refuse)
    monkeypatch.setattr("autotune.select.selection.build_table", refuse)
    monkeypatch.setattr("autotune.export.compile.CompilePool", refuse)
    monkeypatch.setattr("autotune.export.compile.compile_kernel", refuse)


def test_the_runtime_runs_a_shipped_gpu_from_the_prebuilt_table_building_nothing(monkeypatch):
    _nothing_built(monkeypatch)
    rt = Runtime(HostDevice(name="NVIDIA H200", arch="sm_90"))
    a, b = numpy.ones((4096, 4096), numpy.float32), numpy.ones((4096, 4096), numpy.float32)
    decision = rt.explain(a, b)
    assert "prebuilt" in rt.choice.note and "shipped with autotune" in rt.choice.note
    assert decision.kernel is not None and decision.kernel.cubin[:4] == b"\x7fELF"
    assert decision.kernel == prebuilt.read_prebuilt("h200").table.dtypes["f32"].kernel(decision.kernel.name)
    h100 = Runtime(HostDevice(name="NVIDIA H100 80GB HBM3", arch="sm_90"))
    assert "same architecture" in h100.choice.note and h100.choice.table.gpu is None


def test_export_shipped_writes_the_prebuilt_table_compiling_nothing(monkeypatch, tmp_path, capsys):
    _nothing_built(monkeypatch)
    assert main(["export", "--gpu", "h200", "--shipped", "--dtype", "f16", "--format", "json",
                 "--out", str(tmp_path)]) == 0
    written = json.loads((tmp_path / "autotune_table_h200.json").read_text())
    expected = {**committed("h200"), "source": SOURCE}
    expected.pop("prebuilt")
    expected["dtypes"] = {"f16": expected["dtypes"]["f16"]}
    expected["layouts"] = {layout: {"f16": tables["f16"]} for layout, tables in expected["layouts"].items()}
    assert written == expected and written["layouts"]["nt"]["f16"]["rules"]  # the f16 table of B stored N x K too
    assert main(["export", "--arch", "sm_90", "--shipped", "--format", "python", "--out", str(tmp_path)]) == 0
    with_cubins = json.loads((tmp_path / "autotune_table_sm_90_with_cubins.json").read_text())
    table = prebuilt.read_prebuilt("sm_90").table
    assert with_cubins == json.loads(dataclasses.replace(table, source=SOURCE).to_json(with_cubins=True))
    assert "exported python for sm_90" in capsys.readouterr().out


def test_export_shipped_builds_the_table_where_the_prebuilt_one_is_not_current(monkeypatch, tmp_path):
    monkeypatch.setattr(prebuilt, "read_prebuilt", lambda scope, where=None: None)
    assert main(["export", "--gpu", "h200", "--shipped", "--dtype", "f32", "--format", "json",
                 "--out", str(tmp_path)]) == 0
    written = json.loads((tmp_path / "autotune_table_h200.json").read_text())
    expected = {**committed("h200"), "created_at": written["created_at"]}
    expected.pop("prebuilt")
    expected["dtypes"] = {"f32": expected["dtypes"]["f32"]}
    expected.pop("layouts")  # no f32 kernels for B stored N x K
    for kernel in expected["dtypes"]["f32"]["kernels"]:
        kernel["resources"] = None  # a table built is not compiled for --format json
    assert written == expected


# -- a cubin the driver refuses --------------------------------------------------------------------------------


class Refused(Exception):
    """What the driver raises for a cubin it cannot load (CuPy's CUDADriverError on a GPU)."""


@pytest.fixture
def kernel():
    return prebuilt.read_prebuilt("h200").table.dtypes["f32"].kernels[0]


def _driver(refuses: set[bytes], loaded: list[bytes]):
    def load(cubin: bytes):
        if cubin in refuses:
            raise Refused("CUDA_ERROR_UNSUPPORTED_PTX_VERSION")
        loaded.append(cubin)
        return f"function from {len(cubin)} bytes"

    return load


def _compiler(cubin: bytes | None, calls: list):
    def compile_kernel(kernel, arch):
        calls.append((kernel.name, kernel.cubin, arch))
        if cubin is None:
            raise TableError(f"{kernel.name} was built from template 0, but this autotune's template is 1")
        return dataclasses.replace(kernel, cubin=cubin)

    return compile_kernel


def test_a_cubin_the_driver_loads_is_used_as_it_is(kernel, monkeypatch):
    loaded, calls = [], []
    monkeypatch.setattr(devices, "compile_table_kernel", _compiler(b"\x7fELF rebuilt", calls))
    load_table_kernel(kernel, "sm_90", _driver(set(), loaded), Refused)
    assert loaded == [kernel.cubin] and calls == []


def test_a_cubin_the_driver_refuses_is_compiled_again_by_the_installed_nvrtc(kernel, monkeypatch):
    loaded, calls = [], []
    monkeypatch.setattr(devices, "compile_table_kernel", _compiler(b"\x7fELF rebuilt", calls))
    with pytest.warns(RuntimeWarning, match="refused .*CUDA_ERROR_UNSUPPORTED_PTX_VERSION"):
        load_table_kernel(kernel, "sm_90", _driver({kernel.cubin}, loaded), Refused)
    assert loaded == [b"\x7fELF rebuilt"] and calls == [(kernel.name, None, "sm_90")]


def test_a_cubin_refused_that_nvrtc_builds_the_same_raises_the_drivers_error(kernel, monkeypatch):
    monkeypatch.setattr(devices, "compile_table_kernel", _compiler(kernel.cubin, []))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(Refused, match="UNSUPPORTED_PTX"):
            load_table_kernel(kernel, "sm_90", _driver({kernel.cubin}, []), Refused)


def test_a_cubin_refused_that_cannot_be_built_again_is_one_line_naming_both(kernel, monkeypatch):
    monkeypatch.setattr(devices, "compile_table_kernel", _compiler(None, []))
    with pytest.raises(TableError, match="refused .*UNSUPPORTED_PTX.*cannot build it again: .*template") as error:
        load_table_kernel(kernel, "sm_90", _driver({kernel.cubin}, []), Refused)
    assert "\n" not in str(error.value)


def test_a_kernel_without_a_cubin_is_compiled(kernel, monkeypatch):
    loaded, calls = [], []
    monkeypatch.setattr(devices, "compile_table_kernel", _compiler(b"\x7fELF built", calls))
    load_table_kernel(dataclasses.replace(kernel, cubin=None), "sm_90", _driver(set(), loaded), Refused)
    assert loaded == [b"\x7fELF built"] and len(calls) == 1


# -- the progress line -------------------------------------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_one_line_on_a_terminal_with_an_estimate_and_cleared_when_done():
    now = [0.0]
    stream = Terminal()
    progress = TerminalProgress(stream, clock=lambda: now[0], interval=0.1)
    progress("compiling kernels", 0, 4)
    now[0] = 3.0
    progress("compiling kernels", 1, 4)
    now[0] = 3.05
    progress("compiling kernels", 2, 4)  # too soon after the last redraw: skipped
    drawn = stream.getvalue()
    assert drawn.count("\r\033[K") == 2 and "\n" not in drawn
    assert drawn.endswith("compiling kernels: 1/4 (25%), about 9 s left")
    progress("compiling kernels", 4, 4)
    assert stream.getvalue().endswith("\r\033[K")  # done: the line is cleared
    assert progress_text("building the table", 0, 2, 0.0) == "building the table: 0/2 (0%)"
    assert progress_text("x", 1, 4, 150.0) == "x: 1/4 (25%), about 7 min 30 s left"
    assert progress_text("x", 1, 40, 150.0) == "x: 1/40 (2%), about 1 h 37 min left"


def test_progress_is_quiet_where_stderr_is_not_a_terminal():
    stream = io.StringIO()
    with TerminalProgress(stream) as progress:
        progress("compiling kernels", 0, 3)
        progress("compiling kernels", 1, 3)
    assert stream.getvalue() == ""


def test_the_first_call_bench_runs_on_the_host_device():
    """bench/first_call.py's measurement, on the runtime's host device: the first call finds the prebuilt table."""
    spec = importlib.util.spec_from_file_location("first_call", Path(__file__).parents[1] / "bench" / "first_call.py")
    first_call = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(first_call)
    row = first_call.child("f16", 1024, 1, "host")
    assert row["status"] == "ok" and row["first_ms"] > 0 and row["runs"].startswith("hgemm_")
    assert "(prebuilt)" in row["table"]
