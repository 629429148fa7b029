import sys

import pytest
from conftest import assert_one_line_error, autotune
from test_select import HELD, _held_out_fixture

from autotune.results import ResultStore
from autotune.select.plot import PlotError, by_layer, pyplot


def test_shapes_are_grouped_by_layer_then_ordered_by_m():
    shapes = [(4096, 4096, 14336), (1, 4096, 4096), (16, 4096, 14336), (64, 4096, 4096), (1, 4096, 4096)]
    assert by_layer(shapes) == [(1, 4096, 4096), (64, 4096, 4096), (16, 4096, 14336), (4096, 4096, 14336)]


def test_plot_writes_both_pngs(tmp_path):
    pytest.importorskip("matplotlib", reason="plots need matplotlib (pip install autotune[plot])")
    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    _held_out_fixture(store)
    shape_file = tmp_path / "held.txt"
    shape_file.write_text("\n".join(p.shape for p in HELD) + "\n")
    out = tmp_path / "plots"
    result = autotune("plot", "--gpu", "h200", "--db", store.url, "--hold-out", str(shape_file), "--out", str(out))
    assert result.returncode == 0, result.stderr
    written = [line for line in result.stdout.splitlines() if line.endswith(".png")]
    assert written == [str(out / "h200_f32_tflops.png"), str(out / "h200_f32_kernels.png")]
    for path in written:
        with open(path, "rb") as png:
            assert png.read(8) == b"\x89PNG\r\n\x1a\n"
    assert "held-out picks measured on 2 of 4 shapes" in result.stdout
    assert_one_line_error(autotune("plot", "--gpu", "h200", "--dtype", "f16", "--db", store.url, "--out", str(out)),
                          "nothing to plot")


def test_without_matplotlib_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    with pytest.raises(PlotError, match=r"pip install autotune\[plot\]"):
        pyplot()
