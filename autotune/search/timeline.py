"""A search's timeline: what the search loop, each GPU and the compile processes did, and when.

``autotune search --trace FILE`` writes it in the Chrome trace-event format (open it in
Perfetto, ui.perfetto.dev, or chrome://tracing): one row for the search loop, one per GPU
and one per compile process, each span named after its activity or its config. Times are
wall-clock seconds (``time.time()``), which every process of one host shares, so compiles
timed in their own processes line up with the search's spans.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

SEARCH = "search"
COMPILE = "compile"  # compile spans are packed onto rows "compile 1", "compile 2", ...
PACKING_SLACK_S = 0.005  # a compile's end, timed in its process, may pass the next one's start by this much


@dataclasses.dataclass(frozen=True)
class Span:
    track: str
    name: str
    start: float  # wall-clock seconds
    seconds: float
    args: tuple[tuple[str, object], ...] = ()


class Timeline:
    """Spans from any thread, written out once at the end. ``origin`` is time zero of the trace."""

    def __init__(self, origin: float | None = None):
        self.origin = time.time() if origin is None else origin
        self._spans: list[Span] = []
        self._lock = threading.Lock()

    def add(self, track: str, name: str, start: float, seconds: float, **args) -> None:
        """A span on ``track`` that began at wall-clock ``start`` and lasted ``seconds``."""
        with self._lock:
            self._spans.append(Span(track, name, start, max(seconds, 0.0), tuple(args.items())))

    @contextlib.contextmanager
    def on(self, track: str, name: str) -> Iterator[None]:
        """Record the body as a span."""
        start = time.time()
        try:
            yield
        finally:
            self.add(track, name, start, time.time() - start)

    @property
    def spans(self) -> list[Span]:
        with self._lock:
            return list(self._spans)

    def events(self) -> list[dict]:
        """The trace events: one row per track (compile spans packed onto the fewest rows)."""
        spans = _pack_compiles(sorted(self.spans, key=lambda span: span.start))
        rows: dict[str, int] = {}
        events = []
        for span in spans:
            row = rows.setdefault(span.track, len(rows) + 1)
            events.append({"name": span.name, "ph": "X", "pid": 1, "tid": row,
                           "ts": round((span.start - self.origin) * 1e6), "dur": round(span.seconds * 1e6),
                           "args": dict(span.args)})
        names = [{"name": "thread_name", "ph": "M", "pid": 1, "tid": row, "args": {"name": track}}
                 for track, row in rows.items()]
        order = [{"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": row, "args": {"sort_index": row}}
                 for row in rows.values()]
        return [{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "autotune search"}},
                *names, *order, *events]

    def write(self, path: str | Path) -> None:
        """Write the trace as JSON (replacing ``path`` in one step); ``origin_unix_s`` is its time zero."""
        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps({"traceEvents": self.events(), "displayTimeUnit": "ms",
                                   "origin_unix_s": self.origin}))
        tmp.replace(path)


def span(timeline: Timeline | None, track: str, name: str):
    """The body as a span of ``timeline``; nothing where there is none."""
    return contextlib.nullcontext() if timeline is None else timeline.on(track, name)


def _pack_compiles(spans: list[Span]) -> list[Span]:
    """Spans on the COMPILE track, each moved to the first row "compile N" free at its start
    (one row per compile process busy at once); other spans unchanged. ``spans`` by start."""
    ends: list[float] = []  # per row, when its last span ended
    packed = []
    for span in spans:
        if span.track != COMPILE:
            packed.append(span)
            continue
        row = next((i for i, end in enumerate(ends) if end <= span.start + PACKING_SLACK_S), len(ends))
        if row == len(ends):
            ends.append(0.0)
        ends[row] = span.start + span.seconds
        packed.append(dataclasses.replace(span, track=f"{COMPILE} {row + 1}"))
    return packed
