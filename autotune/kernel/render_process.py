"""A process that renders the templates of a user's family, with a deadline and a memory limit.

Jinja's sandbox keeps a template from reaching the host, but not from looping
for ever (loops nested deep), asking for gigabytes (``"x".center(3 * 10**9)``,
``lipsum(10**8)``) or squaring an integer until it fills memory. Such work runs
inside a single call that nothing in the same process can interrupt, so a
user's template renders in a process of its own: it may use RENDER_MEMORY_BYTES
of address space beyond what it starts with, and whoever waits on a render longer
than RENDER_SECONDS stops the process (the next render starts a fresh one).
The process is started at the first render and serves every render after it,
so a render costs a round trip through a pipe, not a process start.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable

from autotune.errors import SpaceError

RENDER_SECONDS = 20.0  # the longest a render may take, its template compiled included
RENDER_MEMORY_BYTES = 1 << 30  # the address space a render may take beyond the process's own at its start
START_SECONDS = 120.0  # the longest the process may take to start (a loaded machine), before any render
STOP_WAIT_S = 5.0
_READY = "ready"

Renderer = Callable[[str, str, dict], str]  # (template folder, template, variables) -> source


class RenderProcess:
    """Renders with ``renderer`` in a process of its own; one render at a time, from any thread."""

    def __init__(self, renderer: Renderer):
        self.renderer = renderer
        self._lock = threading.Lock()
        self._process: multiprocessing.Process | None = None
        self._connection = None

    def render(self, template_dir: str, template: str, variables: dict) -> str:
        """What ``renderer`` returns for these arguments in the render process.

        Raises:
            SpaceError: what the renderer raised, or the render took longer than RENDER_SECONDS, or
                the process ended during it (a template that outgrew its memory, say).
        """
        with self._lock:
            connection = self._started()
            try:
                connection.send((template_dir, template, variables))
                if not connection.poll(RENDER_SECONDS):
                    self._stop()
                    raise SpaceError(f"{template}: rendering took longer than {RENDER_SECONDS:g} s "
                                     "(a loop that never ends?)")
                done, value = connection.recv()
            except (EOFError, OSError):  # the process is gone
                self._stop()
                raise SpaceError(f"{template}: rendering stopped the render process (memory or recursion "
                                 "beyond its bounds?)") from None
        if not done:
            raise SpaceError(value)
        return value

    def _started(self):
        """The pipe to a running render process, started (and waited for) where none runs."""
        if self._process is not None and self._process.is_alive():
            return self._connection
        self._stop()
        context = multiprocessing.get_context("spawn")
        mine, theirs = context.Pipe()
        self._process = context.Process(target=_serve, args=(theirs, self.renderer), daemon=True,
                                        name="autotune-render")
        self._process.start()
        theirs.close()
        self._connection = mine
        try:
            ready = mine.poll(START_SECONDS) and mine.recv() == _READY
        except (EOFError, OSError):
            ready = False
        if not ready:
            self._stop()
            raise SpaceError(f"the render process did not start within {START_SECONDS:g} s")
        return mine

    def _stop(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.join(STOP_WAIT_S)


def _serve(connection, renderer: Renderer) -> None:
    """The render process: render what arrives until the pipe closes. A render's errors (those it
    reports, running out of memory, nesting too deep) go back as messages; Ctrl-C is the parent's."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _limit_memory()
    connection.send(_READY)
    while True:
        try:
            template_dir, template, variables = connection.recv()
        except (EOFError, OSError):
            return
        _limit_cpu()
        try:
            reply = (True, renderer(template_dir, template, variables))
        except SpaceError as error:
            reply = (False, str(error))
        except MemoryError:
            reply = (False, f"{template}: rendering needs more than {RENDER_MEMORY_BYTES >> 20} MiB")
        except RecursionError:
            reply = (False, f"{template}: nests too deeply")
        connection.send(reply)


def _limit_memory() -> None:
    try:
        import resource

        with open("/proc/self/statm") as statm:
            size = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = size + RENDER_MEMORY_BYTES
        resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
    except (ImportError, OSError, ValueError):  # no /proc or no rlimits here: the deadline still holds
        pass


def _limit_cpu() -> None:
    """A render that outlives its parent's wait (the parent killed meanwhile) ends at the CPU limit."""
    try:
        import resource

        used = time.process_time()
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        limit = int(used + 2 * RENDER_SECONDS) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
    except (ImportError, OSError, ValueError):
        pass
