"""A compile pool that compiles nothing: a search replayed over a measured table (with
:class:`~autotune.gpu.replay_backend.ReplayBackend` as its GPU) gets each candidate's build from
the table, after a compile cost of its choosing.

A config the table says failed to build (NVRTC, ptxas's resources) fails the same way in the search's
build checks, and never reaches the GPU; any other gets a placeholder cubin (an ELF file with no
kernel, which lists no parameters) and its recorded ptxas resources (a config whose launch failed its
build checks gets through them here, and fails on the replayed GPU with its recorded failure). ``compile_s`` is how long each
compile takes, with ``jobs`` of them at a time, as the search's own pool runs ``jobs`` processes; 0
(a warm cache) answers at once. A compile waits on an event, so closing the pool stops it.
"""

from __future__ import annotations

import concurrent.futures
import struct
import threading
import time

from autotune.errors import FailureClass
from autotune.gpu.replay_backend import ReplayTable
from autotune.kernel.compile import CompiledKernel, CompileFailure
from autotune.kernel.source import KernelSource
from autotune.records import Resources

UNKNOWN_RESOURCES = Resources(registers=32, smem_static=0, smem_dynamic=0, spill_stores=0, spill_loads=0,
                              stack_frame=0)  # a config the table does not hold: its GPU answer fails it


def placeholder_cubin() -> bytes:
    """A 64-bit ELF file with a section-name table and nothing else: a cubin that names no kernel."""
    names = b"\0.shstrtab\0".ljust(16, b"\0")
    shoff = 64 + len(names)
    header = (b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
              + struct.pack("<HHIQQQIHHHHHH", 2, 190, 1, 0, 0, shoff, 0, 64, 0, 0, 64, 2, 1))
    null = bytes(64)
    shstrtab = struct.pack("<IIQQQQIIQQ", 1, 3, 0, 0, 64, len(names), 0, 0, 1, 0)
    return header + names + null + shstrtab


class ReplayPool:
    """The search's compile pool (:class:`~autotune.kernel.compile.CompilePool`'s interface), answered
    from ``table`` after ``compile_s`` seconds per compile, ``jobs`` at a time."""

    stops_unfinished = True

    def __init__(self, table: ReplayTable, jobs: int = 16, compile_s: float = 0.0):
        if compile_s < 0:
            raise ValueError(f"compile_s must be >= 0, got {compile_s}")
        self.table, self.jobs, self.compile_s = table, jobs, compile_s
        self._cubin = placeholder_cubin()
        self._closed = threading.Event()
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="replay-compile")

    def warm_up(self) -> None:
        """Nothing to start."""

    def submit(self, source: KernelSource, arch: str | None = None) -> concurrent.futures.Future:
        """The build of ``source``'s config, after the compile cost."""
        return self._executor.submit(self._compile, source, arch or source.target)

    def prefetch(self, source: KernelSource, arch: str | None = None) -> None:
        """Nothing ahead of time: every compile costs the same."""

    def _compile(self, source: KernelSource, arch: str) -> CompiledKernel | CompileFailure:
        started = time.time()
        if self.compile_s and self._closed.wait(self.compile_s):
            return CompileFailure(source.entry, "the pool was closed", "", time.time() - started, started)
        row = self.table.rows.get(source.entry)
        if row is not None and row.failure == FailureClass.COMPILE_ERROR.value:
            return CompileFailure(source.entry, row.message, "", self.compile_s, started)
        resources = row.resources if row is not None and row.resources is not None else UNKNOWN_RESOURCES
        return CompiledKernel(source.entry, arch, self._cubin, resources, "", self.compile_s, started)

    def close(self, wait: bool = True) -> None:
        """Stop: compiles not started are cancelled, running ones end at once."""
        self._closed.set()
        self._executor.shutdown(wait=wait, cancel_futures=True)

    def __enter__(self) -> ReplayPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
