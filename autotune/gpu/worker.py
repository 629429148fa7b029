"""The parent's handle on the one process that touches the GPU: a spawn-started child, restartable.

The parent (the Optuna/database process) never imports CuPy or initialises CUDA. :class:`GpuWorker`
starts the child (:mod:`autotune.gpu.child`), sends it tasks (:mod:`autotune.gpu.tasks`), waits with a
timeout, and replaces the child after a fault, a timeout or a crash; each such event costs one worker,
never the study. The child runs a backend chosen by name (BACKENDS): CuPy on a GPU
(:mod:`autotune.gpu.cupy_backend`), or one that needs no GPU (:mod:`autotune.gpu.fake_backend`).
"""

from __future__ import annotations

import functools
import multiprocessing
import multiprocessing.connection
import signal
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
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn: multiprocessing.connection.Connection | None = None
        self._info: dict | None = None
        self._spawned = 0
        self._awaiting_hello = False  # begin() spawned a child whose hello is not read yet

    def __enter__(self) -> GpuWorker:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        """Process id of the current child, or None when none is running."""
        return self._process.pid if self._process is not None else None

    def begin(self) -> None:
        """Start a child if none is running, without waiting for its hello (:meth:`start` waits).

        The child imports CuPy and creates its CUDA context meanwhile, so the caller
        can compile or open databases in the seconds that takes.
        """
        if self._process is not None and (self._awaiting_hello or self._process.is_alive()):
            return
        self._reap()
        self._spawn()
        self._awaiting_hello = True

    def start(self) -> None:
        """Start a child if none is alive and wait for its hello.

        Raises:
            NoGpuError: the child found no usable CUDA GPU.
            WorkerStartError: the child failed or did not answer in time.
        """
        if not self._awaiting_hello:
            if self._process is not None and self._process.is_alive():
                return
            self._reap()
            self._spawn()
        self._awaiting_hello = False
        kind, payload = self._await_hello()
        if kind == "hello":
            self._info = payload
            return
        self._reap()
        if kind == "no_gpu":
            raise NoGpuError(f"no CUDA GPU is available: {payload}")
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

        ``timeout_s`` covers the task only, not starting a replacement child.
        A child that does not answer in time is killed: ``Failure(TIMEOUT)``;
        one that dies: ``Failure(CRASH)``; after either, or a FAULT, the next
        call starts a fresh child.
        """
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.start()
        try:
            self._conn.send(("task", task))
        except (BrokenPipeError, ConnectionResetError):
            return self._crashed()
        ready = multiprocessing.connection.wait([self._conn, self._process.sentinel], timeout_s)
        if not ready:
            return self._timed_out(timeout_s)
        try:
            _, result, usable = self._conn.recv()
        except (EOFError, ConnectionResetError):
            return self._crashed()
        if not usable:
            self._reap()
        return result

    def close(self) -> None:
        """Ask the child to exit; kill it if it has not within a few seconds. A child still starting
        (begun, its hello not read) is killed at once: it has nothing to finish, and it would read the
        request to exit only once CuPy and its CUDA context are up."""
        if self._process is None:
            return
        if self._awaiting_hello:
            self._process.kill()
        elif self._process.is_alive():
            try:
                self._conn.send(("close", None))
            except (BrokenPipeError, ConnectionResetError):
                pass  # it died on its own; _reap collects it
            self._process.join(CLOSE_WAIT_S)
        self._reap()

    # -- internals -----------------------------------------------------------------------

    def _device_info(self) -> dict:
        if self._info is None:
            self.start()
        return self._info

    def _spawn(self) -> None:
        parent_conn, child_conn = self._context.Pipe()
        process = self._context.Process(
            target=serve, args=(child_conn, self._factory), name=f"autotune-gpu{self.device}", daemon=True
        )
        process.start()
        child_conn.close()  # so the parent sees EOF when the child dies
        if self._spawned:
            self.restarts += 1
        self._spawned += 1
        self._process, self._conn = process, parent_conn

    def _await_hello(self) -> tuple[str, object]:
        ready = multiprocessing.connection.wait([self._conn, self._process.sentinel], self.start_timeout_s)
        if not ready:
            self._process.kill()
            self._reap()
            raise WorkerStartError(f"the GPU worker did not start within {self.start_timeout_s:g} s")
        try:
            return self._conn.recv()
        except (EOFError, ConnectionResetError):
            code = self._reap()
            raise WorkerStartError(f"the GPU worker exited with code {_exit_code(code)} while starting") from None

    def _timed_out(self, timeout_s: float) -> Failure:
        self._process.kill()
        self._reap()
        return Failure(FailureClass.TIMEOUT.value, f"no answer after {timeout_s:.1f} s; worker killed")

    def _crashed(self) -> Failure:
        code = self._reap()
        return Failure(FailureClass.CRASH.value, f"worker exited with code {_exit_code(code)}")

    def _reap(self) -> int | None:
        """Wait for (killing if needed) the current child and forget it; its exit code."""
        process, conn = self._process, self._conn
        self._process, self._conn = None, None
        self._awaiting_hello = False
        if conn is not None:
            conn.close()
        if process is None:
            return None
        process.join(REAP_WAIT_S)
        if process.is_alive():
            process.kill()
            process.join(REAP_WAIT_S)
        return process.exitcode


def _exit_code(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"{code} ({signal.Signals(-code).name})"
        except ValueError:
            return str(code)
    return str(code)
