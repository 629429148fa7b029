"""The parent's handle on the one process that touches the GPU: a spawn-started child, restartable.

The parent (the Optuna/database process) never imports CuPy or initialises CUDA. :class:`GpuWorker`
starts the child (:mod:`autotune.gpu.child`), sends it tasks (:mod:`autotune.gpu.tasks`), waits with a
timeout, and replaces the child after a fault, a timeout or a crash; each such event costs one worker,
never the study. The child runs a backend chosen by name (BACKENDS): CuPy on a GPU
(:mod:`autotune.gpu.cupy_backend`), or one that needs no GPU (:mod:`autotune.gpu.fake_backend`).

A GpuWorker may be used from several threads: one of them starts the child while the others wait for its
hello, and tasks run one at a time.
"""

from __future__ import annotations

import dataclasses
import functools
import multiprocessing
import multiprocessing.connection
import signal
import threading
from collections.abc import Callable

from autotune.errors import AutotuneError, FailureClass, NoGpuError
from autotune.gpu.backend import Backend
from autotune.gpu.child import serve
from autotune.gpu.cupy_backend import CupyBackend
from autotune.gpu.fake_backend import FakeBackend, UnavailableBackend
from autotune.gpu.tasks import Result, Task
from autotune.gpu_specs import FAKE_SUFFIX, device_key, spec_for_device
from autotune.records import Environment, Failure

CLOSE_WAIT_S = 5.0  # how long close() lets the child exit on its own
REAP_WAIT_S = 30.0  # how long to wait for a killed child to go away

BACKENDS: dict[str, Callable[[int], Backend]] = {
    "cupy": CupyBackend,
    "fake": FakeBackend,
    "none": UnavailableBackend,
}


class WorkerStartError(AutotuneError):
    """The GPU worker process could not be started (other than for lack of a GPU)."""


@dataclasses.dataclass(eq=False)
class _Child:
    """One child process, the parent's end of its pipe, and whether its hello has been read."""

    process: multiprocessing.process.BaseProcess
    conn: multiprocessing.connection.Connection
    greeted: bool = False


class GpuWorker:
    """Parent-side handle on the GPU worker process (a context manager).

    Args:
        device: CUDA device index the child uses.
        start_timeout_s: how long a child may take to start and say hello.
        backend: "cupy" (real GPU), "fake" (no GPU, fixed rates), "none" (no
            GPU found), or a module-level callable ``factory(device) -> Backend``.

    The child starts on :meth:`start` or lazily on first use and is kept across
    tasks; after a fault, timeout or crash a fresh one starts before the next
    task (:attr:`restarts` counts them). The child is spawn-started, so a script
    that makes a GpuWorker must guard its top level with
    ``if __name__ == "__main__":``.
    """

    def __init__(self, device: int = 0, start_timeout_s: float = 120.0, backend: str | Callable = "cupy"):
        if isinstance(backend, str) and backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}: expected one of {', '.join(BACKENDS)}")
        factory = BACKENDS[backend] if isinstance(backend, str) else backend
        self.device = device
        self.start_timeout_s = start_timeout_s
        self.restarts = 0
        self._factory = functools.partial(factory, device)
        self._context = multiprocessing.get_context("spawn")
        self._child: _Child | None = None
        self._info: dict | None = None  # the latest hello
        self._spawned = 0
        self._starting = threading.Lock()  # held while a child is spawned and its hello awaited
        self._tasking = threading.Lock()  # held for one task's round trip
        self._forgetting = threading.Lock()  # held while the current child is forgotten

    def __enter__(self) -> GpuWorker:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        """Process id of the current child, or None when none is running."""
        child = self._child
        return child.process.pid if child is not None else None

    def begin(self) -> None:
        """Start a child if none is running, without waiting for its hello (:meth:`start` waits).

        The child imports CuPy and creates its CUDA context meanwhile, so the caller
        can compile or open databases in the seconds that takes.
        """
        if not self._starting.acquire(blocking=False):
            return  # another thread is starting one
        try:
            child = self._child
            if child is not None and (not child.greeted or child.process.is_alive()):
                return
            if child is not None:
                self._reap(child)
            self._child = self._spawn()
        finally:
            self._starting.release()

    def start(self) -> None:
        """Start a child if none is alive and wait for its hello; a thread that finds another
        starting one waits for that one's hello.

        Raises:
            NoGpuError: the child found no usable CUDA GPU.
            WorkerStartError: the child failed or did not answer in time.
        """
        with self._starting:
            child = self._child
            if child is not None and child.greeted:
                if child.process.is_alive():
                    return
                self._reap(child)
                child = None
            if child is None:
                child = self._child = self._spawn()
            kind, payload = self._await_hello(child)
            if kind == "hello":
                self._info = payload
                child.greeted = True
                return
            self._reap(child)
        if kind == "no_gpu":
            raise NoGpuError(no_gpu_message(payload))
        raise WorkerStartError(f"the GPU worker failed to start: {payload}")

    def environment(self) -> Environment:
        """The machine as the child sees it (starts the child if needed).

        ``gpu_key`` is the built-in spec's key (``h200``), or one made from the device name
        (``rtx-a6000``) for a GPU without one; a simulated device (the fake backend) gets
        ``-fake`` after its key and its arch (``h200-fake``, ``sm_90-fake``), so its results
        never mix with a real GPU's, nor stand in for those of a real architecture.
        """
        info = self._device_info()
        spec = spec_for_device(info["name"])
        key = spec.key if spec else device_key(info["name"])
        suffix = FAKE_SUFFIX if info.get("simulated") else ""
        return Environment(
            gpu_key=key + suffix,
            gpu_name=info["name"],
            arch=info["arch"] + suffix,
            driver=info["driver"],
            cuda_runtime=info["cuda_runtime"],
            nvrtc=info["nvrtc"],
            cupy=info["cupy"],
        )

    def device_properties(self) -> dict:
        """l2_bytes, sms, smem_per_block(_optin), smem_per_sm, regs, threads, memory."""
        return dict(self._device_info()["properties"])

    def run(self, task: Task, timeout_s: float) -> Result:
        """Run one task in the child; never raises for what the task does.

        ``timeout_s`` covers the task only, not starting a replacement child, nor
        waiting for another thread's task. A child that does not answer in time is
        killed: ``Failure(TIMEOUT)``; one that dies: ``Failure(CRASH)``; after either,
        or a FAULT, the next call starts a fresh child.
        """
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        with self._tasking:
            self.start()
            child = self._child
            if child is None:  # closed meanwhile
                return self._crashed(None)
            try:
                child.conn.send(("task", task))
                ready = multiprocessing.connection.wait([child.conn, child.process.sentinel], timeout_s)
            except OSError:  # the child has gone, or close() closed the pipe
                return self._crashed(child)
            if not ready:
                return self._timed_out(child, timeout_s)
            try:
                _, result, usable = child.conn.recv()
            except (EOFError, OSError):
                return self._crashed(child)
            if not usable:
                self._reap(child)
            return result

    def close(self) -> None:
        """Ask the child to exit; kill it if it has not within a few seconds. A child still starting
        (its hello not read) is killed at once: it has nothing to finish, and it would read the
        request to exit only once CuPy and its CUDA context are up."""
        child = self._child
        if child is None:
            return
        if not child.greeted:
            child.process.kill()
        elif child.process.is_alive():
            try:
                child.conn.send(("close", None))
            except OSError:
                pass  # it died on its own; _reap collects it
            child.process.join(CLOSE_WAIT_S)
        self._reap(child)

    # -- internals -----------------------------------------------------------------------

    def _device_info(self) -> dict:
        if self._info is None:
            self.start()
        return self._info

    def _spawn(self) -> _Child:
        parent_conn, child_conn = self._context.Pipe()
        process = self._context.Process(
            target=serve, args=(child_conn, self._factory), name=f"autotune-gpu{self.device}", daemon=True
        )
        process.start()
        child_conn.close()  # so the parent sees EOF when the child dies
        if self._spawned:
            self.restarts += 1
        self._spawned += 1
        return _Child(process, parent_conn)

    def _await_hello(self, child: _Child) -> tuple[str, object]:
        try:
            ready = multiprocessing.connection.wait([child.conn, child.process.sentinel], self.start_timeout_s)
            if ready:
                return child.conn.recv()
        except (EOFError, OSError):  # it exited, or close() killed it
            code = self._reap(child)
            raise WorkerStartError(f"the GPU worker exited with code {_exit_code(code)} while starting") from None
        child.process.kill()
        self._reap(child)
        raise WorkerStartError(f"the GPU worker did not start within {self.start_timeout_s:g} s")

    def _timed_out(self, child: _Child, timeout_s: float) -> Failure:
        child.process.kill()
        self._reap(child)
        return Failure(FailureClass.TIMEOUT.value, f"no answer after {timeout_s:.1f} s; worker killed")

    def _crashed(self, child: _Child | None) -> Failure:
        code = self._reap(child) if child is not None else None
        return Failure(FailureClass.CRASH.value, f"worker exited with code {_exit_code(code)}")

    def _reap(self, child: _Child) -> int | None:
        """Wait for (killing if needed) ``child``, and forget it if it is the current one; its exit code."""
        with self._forgetting:
            if self._child is child:
                self._child = None
        child.conn.close()
        child.process.join(REAP_WAIT_S)
        if child.process.is_alive():
            child.process.kill()
            child.process.join(REAP_WAIT_S)
        return child.process.exitcode


def _exit_code(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"{code} ({signal.Signals(-code).name})"
        except ValueError:
            return str(code)
    return str(code)


# What the CUDA runtime's refusals mean, in the words of someone setting up a machine.
_NO_GPU_CAUSES = (
    ("InsufficientDriver", "no NVIDIA driver is installed, or one older than CuPy's CUDA"),
    ("NoDevice", "no NVIDIA GPU is visible to this process (check nvidia-smi and CUDA_VISIBLE_DEVICES)"),
    ("libcuda", "no NVIDIA driver is installed (libcuda.so is missing)"),
)


def no_gpu_message(reason: str) -> str:
    """Why the worker found no usable GPU: ``reason`` as the backend gave it, and what it means where known."""
    meaning = next((text for marker, text in _NO_GPU_CAUSES if marker in reason), None)
    return f"no CUDA GPU is available: {reason}" + (f" ({meaning})" if meaning else "")
