"""Where a search's time went: seconds per activity, added up from any thread.

The search reports it at the end (``autotune search`` prints one line), so a slow
search says whether its GPU waited for candidates (compiling, proposing or
recording held it up) or the candidates kept it busy.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import threading
import time
from collections.abc import Iterator

from autotune.search.timeline import SEARCH, Timeline


@dataclasses.dataclass
class Occurrences:
    """How many times an activity happened in one timed stretch."""

    count: int = 1


class TimeSpent:
    """Seconds and occurrences per activity name; thread-safe. With a ``timeline``, each
    activity timed with :meth:`on` is also a span on its search row."""

    def __init__(self, timeline: Timeline | None = None):
        self.timeline = timeline
        self._seconds: collections.Counter[str] = collections.Counter()
        self._counts: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def add(self, activity: str, seconds: float, count: int = 1) -> None:
        with self._lock:
            self._seconds[activity] += seconds
            self._counts[activity] += count

    @contextlib.contextmanager
    def on(self, activity: str) -> Iterator[Occurrences]:
        """Time the body as ``activity``: one occurrence, or as many as the body sets
        (``with spent.on("propose") as occurrences: ...; occurrences.count = n``)."""
        started, began = time.perf_counter(), time.time()
        occurrences = Occurrences()
        try:
            yield occurrences
        finally:
            seconds = time.perf_counter() - started
            self.add(activity, seconds, occurrences.count)
            if self.timeline is not None:
                self.timeline.add(SEARCH, activity, began, seconds)

    def seconds(self, activity: str) -> float:
        with self._lock:
            return self._seconds[activity]

    def count(self, activity: str) -> int:
        with self._lock:
            return self._counts[activity]

    def as_dict(self) -> dict[str, dict[str, float]]:
        """``{activity: {"seconds": s, "count": n}}``, rounded to milliseconds."""
        with self._lock:
            return {name: {"seconds": round(self._seconds[name], 3), "count": self._counts[name]}
                    for name in sorted(self._seconds)}
