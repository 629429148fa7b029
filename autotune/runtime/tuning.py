"""Tuning on a miss: a shape the table was not tuned at is searched once, in the background.

Opt-in, never on by default: ``AUTOTUNE_TUNE=1`` in the environment, or
:func:`autotune.tune_on_miss`. A call whose shape the table was not tuned at (its kernel
carried from the nearest tuned shape, cuBLAS outside the tuned range, or no table for this
GPU) goes on as before, and the shape is queued with its layout (B row-major, or ``W.T`` of a
row-major weight, where a family serves that layout); one thread of the process runs the
queue's searches one after another, each ``autotune search`` a process of its own with a
bounded budget (trials and seconds), into the user's results database (which gets the
shipped results first, so its table still serves every other shape). When a search ends
the table is built again from that database, in the thread, and the runtime swaps it in:
the calls that follow, in this process and in any started later, use the tuned kernel
wherever the table finds it faster than cuBLAS. Nothing a call does waits on a search.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

TUNE_VARIABLE = "AUTOTUNE_TUNE"
RETIME_ROUNDS = 3  # rounds of the searched shape's fastest configs and cuBLAS, once the search is done


@dataclasses.dataclass(frozen=True)
class TuningSettings:
    """The budget of tuning on a miss: per search, and searches per process."""

    trials: int = 40
    timeout_s: float = 180.0
    max_searches: int = 16

    def __post_init__(self):
        from autotune.errors import InputError

        for name, low in (("trials", 1), ("timeout_s", 1), ("max_searches", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= low:
                raise InputError(name, value, f"a number >= {low}")
        if not isinstance(self.trials, int) or not isinstance(self.max_searches, int):
            raise InputError("trials, max_searches", (self.trials, self.max_searches), "whole numbers")

    @classmethod
    def from_environment(cls) -> "TuningSettings | None":
        """Settings where ``AUTOTUNE_TUNE`` is set to anything but ``0`` (or empty), else None."""
        value = os.environ.get(TUNE_VARIABLE, "").strip()
        return cls() if value and value != "0" else None


def search_commands(dtype: str, shape: tuple[int, int, int], device: int, db_url: str,
                    settings: TuningSettings, layout: str = "row") -> list[list[str]]:
    """The commands that tune one shape of ``layout`` (how B is stored): the shipped results into the
    database (once; a result already there is stored once), a bounded search on the attached GPU, then its
    fastest configs measured again beside cuBLAS (``autotune retime``: the table judges the shape by those
    rounds, not by the search's luckiest measurement)."""
    m, n, k = shape
    autotune = [sys.executable, "-m", "autotune"]
    gpu = ["--gpu", "auto", "--device", str(device), "--dtype", dtype, "--layout", layout]
    return [
        [*autotune, "results", "import", "--shipped", "--db", db_url],
        [*autotune, "search", *gpu, "--shape", f"{m}x{n}x{k}", "--trials", str(settings.trials), "--timeout",
         f"{settings.timeout_s:g}", "--db", db_url],
        [*autotune, "retime", *gpu, "--shapes", f"{m}x{n}x{k}", "--rounds", str(RETIME_ROUNDS), "--db", db_url],
    ]


@functools.cache
def searchable(dtype: str, layout: str) -> bool:
    """Whether ``dtype`` with B stored as ``layout`` has a shipped family meant to serve it (priority >= 0, not a
    teaching step such as ``naive``): only there can a search on a miss find a kernel worth the table's pick."""
    from autotune.space.family import families_for_dtype, load_space

    return any(load_space(name).priority >= 0 for name in families_for_dtype(dtype, layout))


class Tuner:
    """Searches the shapes a runtime missed, one at a time in a thread of their own, and calls
    ``on_tuned`` (which swaps in the new table) after each.

    Args:
        settings: the budget.
        commands: ``(dtype, shape, layout) -> [argv, ...]``, run in turn for each shape (a failing one ends
            that shape's turn); :func:`search_commands` by default.
        on_tuned: ``on_tuned(dtype, shape, layout)``, called in the tuning thread once a shape's commands
            have run.
        log: the file the commands' output is appended to.
    """

    def __init__(self, settings: TuningSettings,
                 commands: Callable[[str, tuple[int, int, int], str], Sequence[list[str]]],
                 on_tuned: Callable[[str, tuple[int, int, int], str], None], log: Path):
        self.settings = settings
        self.log = log
        self.requested: list[tuple[str, tuple[int, int, int], str]] = []  # (dtype, shape, layout)
        self.finished: list[tuple[str, tuple[int, int, int], str, int]] = []  # (dtype, shape, layout, exit code)
        self._commands, self._on_tuned = commands, on_tuned
        self._queue: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._idle = threading.Event()
        self._idle.set()

    def request(self, dtype: str, shape: tuple[int, int, int], layout: str = "row") -> bool:
        """Queue ``shape`` (of ``layout``) for a search, unless it was asked for already or the budget of
        searches is spent; returns whether it was queued. Never waits."""
        key = (dtype, tuple(shape), layout)
        with self._lock:
            if key in self.requested or len(self.requested) >= self.settings.max_searches:
                return False
            self.requested.append(key)
            self._idle.clear()
            self._queue.put(key)
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="autotune-tuning", daemon=True)
                self._thread.start()
        return True

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every queued shape is tuned and its table swapped in; whether that happened in time."""
        return self._idle.wait(timeout)

    def _work(self) -> None:
        while True:
            dtype, shape, layout = self._queue.get()
            code = self._run(dtype, shape, layout)
            try:
                self._on_tuned(dtype, shape, layout)
            except Exception as error:  # noqa: BLE001 - the calls go on with the table they have
                with self.log.open("a") as log:
                    log.write(f"the table was not built again: {type(error).__name__}: {error}\n")
            finally:
                with self._lock:
                    self.finished.append((dtype, shape, layout, code))
                    if self._queue.empty():
                        self._idle.set()

    def _run(self, dtype: str, shape: tuple[int, int, int], layout: str) -> int:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        limit = self.settings.timeout_s * 2 + 120  # the search stops itself at timeout_s; this is for a stuck one
        with self.log.open("a") as log:
            for command in self._commands(dtype, shape, layout):
                log.write(f"$ {' '.join(command)}\n")
                log.flush()
                try:
                    code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          timeout=limit).returncode
                except subprocess.TimeoutExpired:
                    code = -1
                if code != 0:
                    log.write(f"exit code {code}\n")
                    return code
        return 0
