"""Plots of a selection table (PNG, matplotlib): how fast its picks are, and which kernel it picks where.

* ``throughput``: TFLOP/s of the table's pick, the tuned best and cuBLAS at every
  training and held-out shape; shapes on the x axis grouped by (N, K) layer and
  ordered by M within a layer, log y; held-out shapes shaded.
* ``kernel_map``: the kernel the table picks for M from 1 to 16384 (log x) on each
  (N, K) layer, one colour per kernel the rules choose among (a kernel built for whole
  tiles shares its colour with its build for any shape, launched where tiles are partial);
  training shapes are dots, held-out ones crosses.

matplotlib is an optional extra: ``pip install autotune[plot]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from autotune.errors import AutotuneError
from autotune.select.selection import HeldOut, Selection, Shape

M_RANGE = (1, 16384)
MAP_POINTS = 400  # M values per layer in the kernel map


class PlotError(AutotuneError):
    """A plot cannot be drawn (no matplotlib, nothing to plot)."""


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend; PlotError naming the extra when it is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotError("plots need matplotlib, which is not installed: pip install autotune[plot]") from None
    return plt


def write_plots(selection: Selection, report: Sequence[HeldOut], held_out: bool, out: Path,
                title: str, stem: str) -> list[Path]:
    """Both plots of the selection's table as ``out/STEM_tflops.png`` and ``out/STEM_kernels.png``; their paths.

    ``report`` is the table's held-out report; ``held_out`` says whether its shapes were left out of the
    table (``--hold-out``) rather than being the training shapes left out one at a time."""
    if not selection.table.rules:
        raise PlotError(f"nothing to plot: the table ({title}) has no rules")
    plt = pyplot()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    held = [(h.problem.m, h.problem.n, h.problem.k) for h in report] if held_out else []
    paths = [out / f"{stem}_tflops.png", out / f"{stem}_kernels.png"]
    for path, draw in zip(paths, (throughput, kernel_map)):
        figure = draw(plt, selection, report if held_out else (), held, title)
        figure.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(figure)
    return paths


def by_layer(shapes: Sequence[Shape]) -> list[Shape]:
    """``shapes`` grouped by (N, K) layer (smaller N*K first) and ordered by M within each layer."""
    return sorted(set(shapes), key=lambda s: (s[1] * s[2], s[1], s[2], s[0]))


def throughput(plt, selection: Selection, report: Sequence[HeldOut], held: Sequence[Shape], title: str):
    """TFLOP/s of the pick, the tuned best and cuBLAS per shape (log y); held-out shapes shaded."""
    rules = {rule.shape: rule for rule in selection.table.rules}
    picks = {(h.problem.m, h.problem.n, h.problem.k): h.pick_ms for h in report}
    shapes = by_layer(list(selection.training) + list(held))
    pick, best, cublas = [], [], []
    for shape in shapes:
        measured = selection.results.shapes.get(shape)
        pick_ms = picks.get(shape) if shape in picks else (rules[shape].ms if shape in rules else None)
        pick.append(_tflops(shape, pick_ms))
        best.append(_tflops(shape, measured.best_ms if measured else None))
        cublas.append(_tflops(shape, measured.cublas_ms if measured else None))
    x = np.arange(len(shapes))
    figure, axes = plt.subplots(figsize=(max(8.0, 0.32 * len(shapes) + 2), 5))
    for i, shape in enumerate(shapes):
        if shape in picks:
            axes.axvspan(i - 0.5, i + 0.5, color="0.9", zorder=0)
    axes.plot(x, best, "o", color="tab:green", label="tuned best", markersize=7, fillstyle="none")
    axes.plot(x, cublas, "s", color="tab:gray", label="cuBLAS", markersize=5)
    axes.plot(x, pick, "^", color="tab:blue", label="table's pick", markersize=6)
    axes.set_yscale("log")
    axes.set_ylabel("TFLOP/s")
    axes.set_xticks(x, ["x".join(map(str, s)) for s in shapes], rotation=90, fontsize=7)
    for label, shape in zip(axes.get_xticklabels(), shapes):
        if shape in picks:
            label.set_color("tab:red")
    axes.set_xlim(-0.5, len(shapes) - 0.5)
    axes.set_title(f"{title}: TFLOP/s per shape (MxNxK by (N, K), then M; held out shaded, labels red)")
    axes.legend(loc="best")
    axes.grid(True, axis="y", which="both", alpha=0.3)
    return figure


def kernel_map(plt, selection: Selection, report: Sequence[HeldOut], held: Sequence[Shape], title: str):
    """The table's kernel for M over M_RANGE on each (N, K) layer; training shapes dots, held-out ones crosses."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    table = selection.table
    layers = sorted({(s[1], s[2]) for s in list(selection.training) + list(held)}, key=lambda nk: (nk[0] * nk[1], nk))
    edges = np.geomspace(M_RANGE[0], M_RANGE[1], MAP_POINTS + 1)
    centres = np.sqrt(edges[:-1] * edges[1:])
    names = [kernel.name for kernel in table.chosen]
    # a build for any shape takes the colour of the kernel it stands for (the one measured at the rule)
    grid = np.array([[names.index(table.pick(max(1, int(round(m))), n, k).measured) for m in centres]
                     for n, k in layers])
    colours = plt.get_cmap("tab20" if len(names) > 10 else "tab10").colors[:len(names)]
    figure, axes = plt.subplots(figsize=(10, 1.2 + 0.5 * len(layers)))
    axes.pcolormesh(edges, np.arange(len(layers) + 1) - 0.5, grid, cmap=ListedColormap(colours),
                    vmin=-0.5, vmax=len(names) - 0.5, shading="flat")
    for shape in selection.training:
        axes.plot(shape[0], layers.index((shape[1], shape[2])), "o", color="black", markersize=4)
    for shape in held:
        axes.plot(shape[0], layers.index((shape[1], shape[2])), "x", color="white", markersize=7, mew=2)
        axes.plot(shape[0], layers.index((shape[1], shape[2])), "x", color="black", markersize=5, mew=1)
    axes.set_xscale("log")
    axes.set_xlim(*M_RANGE)
    axes.set_xlabel("M (tokens)")
    axes.set_yticks(range(len(layers)), [f"N={n} K={k}" for n, k in layers])
    axes.set_title(f"{title}: the table's kernel by M and (N, K) (dots: training shapes, crosses: held out)")
    handles = [Patch(color=colours[i], label=f"{table.short_name(name)} ({table.served(name)} rules)")
               for i, name in enumerate(names)]
    axes.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    return figure


def _tflops(shape: Shape, ms: float | None) -> float:
    return 2 * shape[0] * shape[1] * shape[2] / (ms * 1e-3) / 1e12 if ms else np.nan
