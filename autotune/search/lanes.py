"""GPU lanes: one thread per GPU worker, so that the search loop never waits on a GPU.

A lane runs jobs on its worker one after the other, in the order they were
submitted, and puts each result on the search's event queue. The search keeps a
job queued behind the running one, so a worker starts its next candidate the
moment it answers, while the search records the last one and compiles ahead.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

Job = Callable[[Any], Any]  # job(worker) -> result, run in the lane's thread


class GpuLane:
    """One GPU worker and the thread that feeds it.

    ``queued`` counts the jobs submitted whose results the search has not taken yet;
    the search updates it (:meth:`submit` adds one, the search takes one per result).
    Events are ``(lane, tag, result)``; an exception a job raises is its result.
    """

    def __init__(self, index: int, worker, events: queue.Queue):
        self.index, self.worker, self.events = index, worker, events
        self.queued = 0
        self.submitted = 0  # jobs ever submitted
        self.cublas_ms: float | None = None  # the reference this lane measured; sets its candidates' timeouts
        self.busy_s = 0.0  # seconds spent running jobs on the worker
        self.waited_s = 0.0  # seconds the worker waited for a job between its first and its last
        self._inbox: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._serve, name=f"autotune-lane{index}", daemon=True)
        self._thread.start()

    @property
    def device(self) -> int:
        return self.worker.device

    def submit(self, tag: Any, job: Job) -> None:
        self.queued += 1
        self.submitted += 1
        self._inbox.put((tag, job))

    def cancel_waiting(self, which: Callable[[Any], bool] = lambda tag: True) -> list[Any]:
        """Take back the jobs not started yet whose tag ``which`` picks (the others stay, in order);
        their tags."""
        taken, kept = [], []
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                break
            if item is not None and which(item[0]):
                taken.append(item[0])
                self.queued -= 1
            else:
                kept.append(item)
        for item in kept:
            self._inbox.put(item)
        return taken

    def stop(self, timeout_s: float | None = None) -> None:
        """Let the running job finish (its result still goes to the events), then end the thread."""
        self._inbox.put(None)
        self._thread.join(timeout_s)

    def _serve(self) -> None:
        finished: float | None = None  # when the last job ended
        while (item := self._inbox.get()) is not None:
            started = time.perf_counter()
            if finished is not None:
                self.waited_s += started - finished
            tag, job = item
            try:
                result = job(self.worker)
            except BaseException as error:  # handed to the search, which decides
                result = error
            finished = time.perf_counter()
            self.busy_s += finished - started
            self.events.put((self, tag, result))
