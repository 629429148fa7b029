"""Text output for the CLI: tables, the search progress line, and text fit for a terminal.

Text that comes from a database or a file (GPU names, config names, messages) may
hold anything; :func:`printable` shows its control characters escaped, so that it
cannot move the cursor, recolour the terminal or break a line. :func:`table`
applies it to every cell.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from autotune.search.search import Progress


def printable(text: object) -> str:
    """``str(text)`` with every character a terminal would act on or not show (escape sequences, newlines,
    tabs, bidirectional overrides, ...) written as its Python escape: ``\\x1b``, ``\\n``, ``\\u202e``."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else char.encode("unicode_escape").decode("ascii") for char in text)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain left-aligned text table (numbers right-aligned), every cell :func:`printable`."""
    headers = [printable(header) for header in headers]
    cells = [[printable(_cell(value)) for value in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [all(_is_number(row[i]) for row in rows) and rows for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in cells)])


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"
    return str(value)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) or value is None


def ratio_text(kernel_ms: float | None, cublas_ms: float | None) -> str:
    if not kernel_ms or not cublas_ms:
        return "-"
    return f"{cublas_ms / kernel_ms:.3f}x"


class ProgressLine:
    """One status line, redrawn in place on a terminal, printed every few trials elsewhere."""

    def __init__(self, stream: TextIO | None = None, every: int = 10):
        self.stream = stream if stream is not None else sys.stderr  # the stderr of the moment, not of the import
        self.every = every
        self.interactive = self.stream.isatty()
        self._last_printed = -1

    def __call__(self, progress: Progress) -> None:
        text = self.format(progress)
        if self.interactive:
            self.stream.write("\r\033[K" + text)
            self.stream.flush()
        elif progress.evaluated != self._last_printed and (
            progress.evaluated % self.every == 0 or progress.evaluated >= progress.target
        ):
            self._last_printed = progress.evaluated
            print(text, file=self.stream, flush=True)

    def finish(self) -> None:
        if self.interactive:
            self.stream.write("\n")

    @staticmethod
    def format(progress: Progress) -> str:
        width = len(str(progress.target))
        head = f"[{progress.evaluated:>{width}}/{progress.target}]"
        if progress.best_ms is None:
            return f"{head} no verified config yet"
        tflops = progress.problem.tflops(progress.best_ms)
        ratio = ratio_text(progress.best_ms, progress.cublas_ms)
        text = f"{head} best {tflops:.1f} TFLOP/s ({progress.best_ms:.4f} ms) = {ratio} cuBLAS"
        if progress.best_mj is not None:
            text += f"; least energy {progress.best_mj:.2f} mJ"
            if progress.cublas_mj:
                text += f" (cuBLAS {progress.cublas_mj:.2f})"
        if progress.front > 1:
            text += f"; front {progress.front} points"
        return text
