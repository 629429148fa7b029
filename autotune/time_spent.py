"""Where a search's time went: seconds per activity, added up from any thread.

The search reports it at the end (``autotune search`` prints one line), so a slow
search says whether its GPU waited for candidates (compiling, proposing or
recording held it up) or the candidates kept it busy.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Iterator


class TimeSpent:
    """Seconds and occurrences per activity name; thread-safe."""

    def __init__(self):
        self._seconds: collections.Counter[str] = collections.Counter()
        self._counts: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def add(self, activity: str, seconds: float, count: int = 1) -> None:
        with self._lock:
            self._seconds[activity] += seconds
            self._counts[activity] += count

    @contextlib.contextmanager
    def on(self, activity: str) -> Iterator[None]:
        """Time the body as ``activity``."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.add(activity, time.perf_counter() - started)

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
