"""The worker's child process: build a backend, say hello, then answer tasks until told to stop.

Replies are ``("hello", info)``, ``("no_gpu", reason)``, ``("start_error", reason)`` and ``("result",
result, usable)``. After a result with usable False (a poisoned CUDA context) the child exits at once
with FAULT_EXIT_CODE; ProbeTasks simulate a hang, a crash and a fault on any backend.
"""

from __future__ import annotations

import gc
import multiprocessing.connection
import os
import signal
import time
from collections.abc import Callable

from autotune.errors import FailureClass
from autotune.gpu.backend import Backend, GpuUnavailable, describe_exception
from autotune.gpu.tasks import ProbeTask, Result, Task
from autotune.records import Failure, Measurement, Timing

FAULT_EXIT_CODE = 70  # the child exits with this after a fault poisoned its context
PROBE_EXIT_CODE = 3  # ProbeTask("exit")


def serve(conn: multiprocessing.connection.Connection, backend_factory: Callable[[], Backend]) -> None:
    """The child's main loop: say hello, then answer tasks until "close" or EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    backend = _start_backend(conn, backend_factory)
    if backend is None:
        return
    while True:
        try:
            kind, task = conn.recv()
        except EOFError:  # the parent has gone
            return
        if kind == "close":
            gc.freeze()  # the interpreter's teardown then skips walking CuPy's objects: the parent waits for it
            return
        result, usable = _execute(backend, task)
        conn.send(("result", result, usable))
        if not usable:
            conn.close()
            os._exit(FAULT_EXIT_CODE)  # no cleanup: the CUDA context cannot be trusted


def _start_backend(conn, backend_factory) -> Backend | None:
    try:
        backend = backend_factory()
        info = backend.hello()
    except GpuUnavailable as exc:
        conn.send(("no_gpu", " ".join(str(exc).split())))
        return None
    except Exception as exc:  # reported to the parent, which raises WorkerStartError
        conn.send(("start_error", describe_exception(exc)))
        return None
    conn.send(("hello", info))
    return backend


def _execute(backend: Backend, task: Task) -> tuple[Result, bool]:
    try:
        if isinstance(task, ProbeTask):
            return _run_probe(task)
        return backend.run(task), True
    except Exception as exc:  # becomes a Failure; the backend says if the worker survives
        failure_class, usable = backend.classify(exc)
        return Failure(failure_class, describe_exception(exc)), usable


_PROBE_OK = Measurement(timing=Timing(0.0, 0.0, 0.0, 0.0, 0.0, (0.0,)), tflops=0.0, max_error=0.0)


def _run_probe(task: ProbeTask) -> tuple[Result, bool]:
    if task.action == "sleep":
        time.sleep(task.seconds)
    elif task.action == "exit":
        os._exit(PROBE_EXIT_CODE)
    elif task.action == "fault":
        return Failure(FailureClass.FAULT.value, "probe: simulated fault; the worker exits"), False
    elif task.action == "raise":
        raise RuntimeError("probe: simulated exception")
    return _PROBE_OK, True
