"""The progress line of long commands: one line on stderr, redrawn in place, only on a terminal.

:class:`TerminalProgress` is a :class:`~autotune.progress.ProgressCallback`: each call redraws
``what: done/total (percent), about N s left`` (the estimate from the pace since ``done`` was 0), at
most every ``interval`` seconds and always as work starts. The line is cleared once its work is done
(``done == total``), and on the way out of a ``with`` block, so that what the command prints next
starts on a clean line. Where stderr is not a terminal (a pipe, a file, a test) it writes nothing.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

REDRAW_S = 0.1  # the least time between two redraws of the line


class TerminalProgress:
    """Draws progress on ``stream`` (stderr by default) when it is a terminal; quiet otherwise."""

    def __init__(self, stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic,
                 interval: float = REDRAW_S):
        self.stream = stream if stream is not None else sys.stderr
        self.clock, self.interval = clock, interval
        self.interactive = _is_terminal(self.stream)
        self._started: dict[str, float] = {}  # what -> when its work started (done 0)
        self._drawn_at: float | None = None
        self._shown = False

    def __call__(self, what: str, done: int, total: int) -> None:
        if not self.interactive:
            return
        now = self.clock()
        if done <= 0 or what not in self._started:
            self._started[what] = now
        if done >= total:
            self.close()
            return
        if done > 0 and self._drawn_at is not None and now - self._drawn_at < self.interval:
            return
        self._drawn_at = now
        self.stream.write("\r\033[K" + progress_text(what, done, total, now - self._started[what]))
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        """Clear the line (if one is drawn)."""
        if self._shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self._shown = False

    def __enter__(self) -> TerminalProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def progress_text(what: str, done: int, total: int, elapsed: float) -> str:
    """``compiling kernels: 12/32 (37%), about 9 s left``: the estimate once a step is done."""
    text = f"{what}: {done}/{total}"
    if total > 0:
        text += f" ({100 * done // total}%)"
    if 0 < done < total and elapsed > 0:
        text += f", about {duration_text(elapsed / done * (total - done))} left"
    return text


def duration_text(seconds: float) -> str:
    """``9 s``, ``2 min 5 s``, ``1 h 3 min`` (never less than ``1 s``)."""
    seconds = max(1, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
