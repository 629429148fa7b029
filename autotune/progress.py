"""How long work says how far it has come: a callback ``progress(what, done, total)``.

A stage function that can take seconds takes an optional ``progress`` and calls it as it goes:
``what`` says what it is doing (``"compiling kernels"``), ``done`` of ``total`` steps are finished
(0 as it starts, ``total`` as it ends). By default nothing is reported (:func:`no_progress`); the
command line passes one that draws a line on a terminal (:mod:`autotune.cli.progress`).
"""

from __future__ import annotations

from typing import Protocol


class ProgressCallback(Protocol):
    """``progress(what, done, total)``: ``done`` of ``total`` steps of ``what`` are finished."""

    def __call__(self, what: str, done: int, total: int) -> None: ...


def no_progress(what: str, done: int, total: int) -> None:
    """The default callback: reports nothing."""
