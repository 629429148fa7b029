"""Text output for the CLI: tables, the search progress line, and text fit for a terminal.

Text that comes from a database or a file (GPU names, config names, messages) may
hold anything; :func:`printable` shows its control characters escaped, so that it
cannot move the cursor, recolour the terminal or break a line. :func:`table`
applies it to every cell.

On a terminal, tables and paragraphs fit its width (:func:`terminal_width`): long
config names wrap at their underscores, and a table still too wide is cut into
several, each repeating the first column. ``--wide`` (or output to a pipe or a
file without ``$COLUMNS``) prints every line whole.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from autotune.search.search import Progress

GAP = "  "  # between two columns
MIN_WRAPPED = 24  # the narrowest a wrapped column gets (a config name's family and first knobs)
CONTINUED = "  "  # before the lines of a wrapped cell after its first
_KNOB_BREAKS = re.compile(r".*?(?:(?<=\d)_|[ ,/]+|$)")  # text up to where a line breaks best, with the separator
_UNDERSCORE_BREAKS = re.compile(r"[^_]*_*")  # text up to any underscore, with it


def printable(text: object) -> str:
    """``str(text)`` with every character a terminal would act on or not show (escape sequences, newlines,
    tabs, bidirectional overrides, ...) written as its Python escape: ``\\x1b``, ``\\n``, ``\\u202e``."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else char.encode("unicode_escape").decode("ascii") for char in text)


def terminal_width(wide: bool = False, stream: TextIO | None = None) -> int | None:
    """The width output to ``stream`` (stdout by default) should fit: ``$COLUMNS``, else the terminal's; None
    (no limit) with ``wide``, or where the stream is not a terminal and ``$COLUMNS`` is not set."""
    if wide:
        return None
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    stream = stream if stream is not None else sys.stdout
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return None
    return shutil.get_terminal_size().columns


def paragraph(text: str, width: int | None, indent: str = "") -> str:
    """``text`` (:func:`printable`) after ``indent``, broken into lines of at most ``width`` characters that
    each start with ``indent`` (None: one line)."""
    text = printable(text)
    if not width:
        return indent + text
    return textwrap.fill(text, width, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], width: int | None = None,
          wrap: Sequence[str] = ()) -> str:
    """A plain left-aligned text table (numbers right-aligned), every cell :func:`printable`.

    With ``width``, its lines fit in ``width`` characters: the cells of the columns named in ``wrap`` wrap
    (after underscores, spaces, commas and slashes) down to MIN_WRAPPED characters, and a table still too
    wide is cut into several tables of fewer columns, one after the other, each repeating the first column.
    """
    headers = [printable(header) for header in headers]
    cells = [[printable(_cell(value)) for value in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [bool(rows) and all(_is_number(row[i]) for row in rows) for i in range(len(headers))]
    if width is not None:
        widths = _wrapped_widths(widths, [h in wrap for h in headers], width)
    lines = [[wrap_text(value, widths[i], CONTINUED) if len(value) > widths[i] else [value]
              for i, value in enumerate(row)] for row in cells]
    widths = [max([len(h)] + [len(line) for row in lines for line in row[i]]) for i, h in enumerate(headers)]
    groups = _column_groups(widths, width) if width is not None else [list(range(len(headers)))]
    return "\n\n".join(_render(headers, lines, widths, numeric, group) for group in groups)


def _wrapped_widths(widths: list[int], wraps: list[bool], width: int) -> list[int]:
    """``widths`` with the wrapping columns, widest first, narrowed (to MIN_WRAPPED at least) until the
    table fits ``width`` or they can narrow no more."""
    widths = list(widths)
    excess = _line_width(widths) - width
    for index in sorted((i for i, wraps_here in enumerate(wraps) if wraps_here), key=lambda i: -widths[i]):
        if excess <= 0:
            break
        narrower = max(min(widths[index], MIN_WRAPPED), widths[index] - excess)
        excess -= widths[index] - narrower
        widths[index] = narrower
    return widths


def _column_groups(widths: list[int], width: int) -> list[list[int]]:
    """The columns of each table a table too wide for ``width`` is cut into: the first column, then as
    many of the next ones as fit (at least one)."""
    if _line_width(widths) <= width or len(widths) < 2:
        return [list(range(len(widths)))]
    groups, group = [], [0]
    for index in range(1, len(widths)):
        if len(group) > 1 and _line_width([widths[i] for i in group + [index]]) > width:
            groups.append(group)
            group = [0]
        group.append(index)
    return groups + [group]


def _line_width(widths: Sequence[int]) -> int:
    return sum(widths) + len(GAP) * max(0, len(widths) - 1)


def _render(headers: list[str], rows: list[list[list[str]]], widths: list[int], numeric: list[bool],
            columns: list[int]) -> str:
    """The table of ``columns``: ``rows`` hold each cell's lines."""
    def line(values: Sequence[str]) -> str:
        return GAP.join(values[i].rjust(widths[i]) if numeric[i] else values[i].ljust(widths[i])
                        for i in columns).rstrip()

    lines = [line(headers), line(["-" * w for w in widths])]
    for row in rows:
        for depth in range(max(len(row[i]) for i in columns)):
            lines.append(line([own[depth] if depth < len(own) else "" for own in row]))
    return "\n".join(lines)


def wrap_text(text: str, width: int, indent: str = "") -> list[str]:
    """``text`` in lines of at most ``width`` characters, the lines after the first starting with ``indent``.
    A line breaks after a space, comma or slash, or after an underscore that follows a digit (a config name's
    knob values: ``..._bk64_|stages7_...``); a piece still too long breaks after any underscore, and last
    where the line ends. Spaces at a break are dropped."""
    lines, current = [], ""
    room = max(1, width - len(indent))
    for piece in _pieces(text, room):
        if current and len(current) + len(piece.rstrip(" ")) > (width if not lines else room):
            lines.append(current.rstrip(" "))
            current = ""
        current += piece
    if current or not lines:
        lines.append(current.rstrip(" "))
    return lines[:1] + [indent + line for line in lines[1:]]


def _pieces(text: str, width: int) -> list[str]:
    """``text`` cut where a line may break (see :func:`wrap_text`), no piece longer than ``width``."""
    pieces = []
    for piece in _KNOB_BREAKS.findall(text):
        if len(piece.rstrip(" ")) > width:
            for part in _UNDERSCORE_BREAKS.findall(piece):
                pieces += [part[start:start + width] for start in range(0, len(part), width)] or [part]
        elif piece:
            pieces.append(piece)
    return pieces


def same_in_every_row(headers: Sequence[str], rows: Sequence[Sequence[object]],
                      columns: Sequence[str]) -> tuple[list[str], list[list[object]], str]:
    """Of ``columns`` (headers), those with one value in every row (of two or more) left out of the table:
    (headers, rows, and a line naming their values, ``gpu NVIDIA H200, driver 580.159.04``, or "")."""
    constant = [i for i, header in enumerate(headers) if header in columns and len(rows) > 1
                and len({printable(_cell(row[i])) for row in rows}) == 1]
    if not constant:
        return list(headers), [list(row) for row in rows], ""
    note = ", ".join(f"{headers[i]} {printable(_cell(rows[0][i]))}" for i in constant)
    kept = [i for i in range(len(headers)) if i not in constant]
    return [headers[i] for i in kept], [[row[i] for i in kept] for row in rows], note


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
