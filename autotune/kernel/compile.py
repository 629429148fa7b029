"""Compile kernel source to a cubin with NVRTC for a named arch; no GPU needed.

NVRTC comes from pip (``nvidia-cuda-nvrtc``), called through :mod:`autotune.kernel.nvrtc`;
it works with no driver. ptxas's verbose report gives registers, shared
memory, stack frame and spills. Cubins (SASS for the exact arch, never PTX)
are cached on disk by source hash, arch, NVRTC version and options.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import hashlib
import json
import multiprocessing
import os
import re
import signal
import struct
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from autotune.errors import CompilerError
from autotune.kernel import nvrtc
from autotune.kernel.cubin import CubinError, check_cubin, read_resources
from autotune.kernel.includes import IncludeError, check_source
from autotune.kernel.source import KernelSource
from autotune.records import Resources

OPTIONS = ("-std=c++17", "--ptxas-options=-v")

_REGISTERS = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_SPILLS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


@dataclasses.dataclass(frozen=True)
class CompiledKernel:
    """A cubin and what ptxas said about it."""

    entry: str
    arch: str
    cubin: bytes
    resources: Resources
    log: str
    seconds: float = 0.0  # spent compiling it (0 from the disk cache)
    started: float = 0.0  # when the compile began, wall-clock (time.time())


@dataclasses.dataclass(frozen=True)
class CompileFailure:
    """NVRTC refused the source; ``message`` is its first error line."""

    entry: str
    message: str
    log: str
    seconds: float = 0.0  # spent compiling it
    started: float = 0.0  # when the compile began, wall-clock (time.time())


@functools.cache
def nvrtc_version() -> str:
    """The NVRTC version as ``"13.0"``; raises CompilerError when NVRTC cannot be loaded."""
    major, minor = nvrtc.version()
    return f"{major}.{minor}"


# Where pip's nvidia packages put the CUDA headers NVRTC needs (cuda_fp16.h, mma.h and the crt/ headers
# mma.h includes): CUDA 13's nvidia-cuda-runtime and nvidia-cuda-crt share one folder; in CUDA 12 the
# crt/ headers come with nvidia-cuda-nvcc-cu12.
PIP_HEADERS = ("nvidia/cu13/include", "nvidia/cuda_runtime/include", "nvidia/cuda_nvcc/include")
WHOLE_HEADERS = ("cuda_fp16.h", "crt/mma.h")  # what the shipped families need of a header set


@functools.cache
def include_dirs() -> tuple[str, ...]:
    """CUDA header directories: pip's nvidia packages where they hold every header the families include
    (``cuda_fp16.h`` and the ``crt/`` headers ``mma.h`` needs), else a CUDA toolkit's (``$CUDA_PATH``,
    ``$CUDA_HOME``, /usr/local/cuda); never both, which could mix CUDA versions. Where neither set is whole,
    the one that has ``cuda_fp16.h`` (pip's first)."""
    pip = tuple(dict.fromkeys(str(root / sub) for root in map(Path, sys.path) for sub in PIP_HEADERS
                              if (root / sub).is_dir()))
    toolkits = [Path(os.environ[env]) / "include" for env in ("CUDA_PATH", "CUDA_HOME") if os.environ.get(env)]
    toolkits.append(Path("/usr/local/cuda/include"))
    toolkit = tuple(dict.fromkeys(str(d) for d in toolkits if (d / "cuda_fp16.h").is_file()))[:1]
    for candidate in (pip, toolkit):
        if all(_holds(candidate, header) for header in WHOLE_HEADERS):
            return candidate
    return pip if _holds(pip, "cuda_fp16.h") else toolkit


def _holds(folders: tuple[str, ...], header: str) -> bool:
    return any((Path(folder) / header).is_file() for folder in folders)


def cache_dir() -> Path:
    """``$AUTOTUNE_CACHE`` or ``$XDG_CACHE_HOME/autotune`` (``~/.cache/autotune``)."""
    if os.environ.get("AUTOTUNE_CACHE"):
        return Path(os.environ["AUTOTUNE_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "autotune"


def parse_resources(log: str, dynamic_smem: int = 0) -> Resources:
    """Read registers, static smem, stack frame and spills from a ptxas ``-v`` log."""
    registers = _REGISTERS.search(log)
    smem = _SMEM.search(log)
    spills = _SPILLS.search(log)
    if not registers:
        raise CompilerError("ptxas reported no register count (was --ptxas-options=-v passed?)")
    return Resources(
        registers=int(registers.group(1)),
        smem_static=int(smem.group(1)) if smem else 0,
        smem_dynamic=dynamic_smem,
        stack_frame=int(spills.group(1)) if spills else 0,
        spill_stores=int(spills.group(2)) if spills else 0,
        spill_loads=int(spills.group(3)) if spills else 0,
    )


def _cache_key(source: KernelSource, arch: str) -> str:
    headers = [part for header in source.headers for part in ("header", *header)]
    text = "\0".join([source.code, arch, nvrtc_version(), *OPTIONS, *headers])
    return hashlib.sha256(text.encode()).hexdigest()


def compile_kernel(source: KernelSource, arch: str | None = None,
                   use_cache: bool = True) -> CompiledKernel | CompileFailure:
    """Compile ``source`` for ``arch`` (``"sm_90"``; by default the source's own target), from the
    disk cache when possible (an entry that is not a cubin of ``source.entry`` for ``arch`` is
    discarded and compiled again).

    A source that includes anything but its headers and CUDA headers is refused before NVRTC
    sees it (:func:`autotune.kernel.includes.check_source`)."""
    arch = arch or source.target
    if not arch:
        raise CompilerError(f"{source.entry}: no NVRTC target given")
    try:
        check_source(source.code, source.headers, include_dirs())
    except IncludeError as error:
        return CompileFailure(source.entry, f"refused before compiling: {error}", "")
    key = _cache_key(source, arch)
    cubin_path = cache_dir() / "cubins" / f"{key}.cubin"
    meta_path = cubin_path.with_suffix(".json")
    if use_cache:
        cached = _cached(cubin_path, meta_path, source.entry, arch)
        if cached is not None:
            return cached

    started, began = time.perf_counter(), time.time()
    options = [f"--gpu-architecture={arch}", *OPTIONS, *(f"-I{d}" for d in include_dirs())]
    output = nvrtc.compile_program(source.code, f"{source.entry}.cu", options, source.headers)
    log, cubin = output.log, output.cubin
    if cubin is None:
        first = next((line for line in log.splitlines() if "error" in line), log.strip()[:200])
        return CompileFailure(source.entry, first.strip(), log, time.perf_counter() - started, began)

    try:
        resources = parse_resources(log)
    except CompilerError:  # no ptxas report in the log: read the cubin instead
        try:
            resources = read_resources(cubin, source.entry)
        except (CompilerError, struct.error, ValueError, IndexError) as error:
            return CompileFailure(source.entry, f"no ptxas report and an unreadable cubin: {error}", log,
                                  time.perf_counter() - started, began)
    compiled = CompiledKernel(source.entry, arch, cubin, resources, log, time.perf_counter() - started, began)
    if use_cache:
        _store(cubin_path, meta_path, compiled)
    return compiled


def _cached(cubin_path: Path, meta_path: Path, entry: str, arch: str) -> CompiledKernel | None:
    """The cache's entry, where it holds one that is a cubin of ``entry`` for ``arch`` with its resources
    and log; an entry that is not is removed."""
    if not (cubin_path.exists() and meta_path.exists()):
        return None
    try:
        meta = json.loads(meta_path.read_text())
        resources = Resources(**meta["resources"])
        if not all(type(value) is int and value >= 0 for value in dataclasses.astuple(resources)):
            raise ValueError("resources are not counts")
        if not isinstance(meta["log"], str):
            raise ValueError("log is not text")
        cubin = cubin_path.read_bytes()
        check_cubin(cubin, entry, arch)
    except (OSError, ValueError, TypeError, KeyError, CubinError, struct.error):
        for path in (cubin_path, meta_path):
            path.unlink(missing_ok=True)
        return None
    return CompiledKernel(entry, arch, cubin, resources, meta["log"])


def _store(cubin_path: Path, meta_path: Path, compiled: CompiledKernel) -> None:
    cubin_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = cubin_path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(compiled.cubin)
    tmp.replace(cubin_path)
    meta = {"resources": dataclasses.asdict(compiled.resources), "log": compiled.log}
    tmp.write_text(json.dumps(meta))
    tmp.replace(meta_path)


def _pool_key(source: KernelSource, arch: str | None) -> tuple:
    """What makes two compiles the same: the code, the target and the headers (where it has any)."""
    key = (source.code, arch or source.target)
    return key + (source.headers,) if source.headers else key


COMPILE_NICENESS = 5  # compile processes yield the CPU to the GPU worker and the search loop


def _lower_priority() -> None:
    """Run this compile process at a lower priority, so that it never delays a GPU launch."""
    try:
        os.nice(COMPILE_NICENESS)
    except OSError:  # not permitted here: compile at normal priority
        pass


class CompilePool:
    """Compile many kernels in parallel CPU processes (NVRTC is single-threaded per program).

    The processes run at a lower priority (``COMPILE_NICENESS``) than the process that made
    the pool, so that compiling on every core never delays the GPU worker.
    """

    stops_unfinished = True  # close(wait=False) stops running compiles: a search may start more than it needs

    def __init__(self, jobs: int | None = None):
        self.jobs = jobs or max(1, min(16, os.cpu_count() or 1))
        self._running: dict[tuple, concurrent.futures.Future] = {}  # by source and arch (_pool_key)
        self._prefetched: dict[tuple, concurrent.futures.Future] = {}  # kept until submitted
        self._lock = threading.Lock()
        self._executor = concurrent.futures.ProcessPoolExecutor(
            max_workers=self.jobs, mp_context=multiprocessing.get_context("spawn"),
            initializer=_set_up_compile_process, initargs=(os.getpid(),),
        )

    def warm_up(self) -> None:
        """Start the processes and load NVRTC in them now, while the caller has other things to do."""
        for _ in range(self.jobs):
            self._executor.submit(nvrtc_version)

    def prefetch(self, source: KernelSource, arch: str | None = None) -> None:
        """Start compiling ``source`` for a caller still getting ready: its first :meth:`submit` of
        the same source gets this compile, running or finished."""
        future = self.submit(source, arch)
        with self._lock:
            self._prefetched[_pool_key(source, arch)] = future

    def submit(self, source: KernelSource, arch: str | None = None) -> concurrent.futures.Future:
        """Compile ``source`` in a pool process; a source already compiling, or prefetched, gets that
        compile's future."""
        key = _pool_key(source, arch)
        with self._lock:
            prefetched = self._prefetched.pop(key, None)
            if prefetched is not None and not prefetched.cancelled():
                return prefetched
            running = self._running.get(key)
            if running is not None and not running.cancelled():
                return running
            future = self._executor.submit(compile_kernel, source, arch)
            self._running[key] = future
        future.add_done_callback(lambda done: self._forget(key, done))
        return future

    def _forget(self, key: tuple, future: concurrent.futures.Future) -> None:
        with self._lock:
            if self._running.get(key) is future:
                del self._running[key]

    def map(self, sources: Iterable[KernelSource],
            arch: str | None = None) -> Iterator[CompiledKernel | CompileFailure]:
        """Compile in parallel; results come back in the order of ``sources``."""
        futures = [self.submit(source, arch) for source in sources]
        for future in futures:
            yield future.result()

    def close(self, wait: bool = True) -> None:
        """Shut the pool down: compiles not started are cancelled; running ones are waited for, or with
        ``wait=False`` stopped (their processes terminated), for a caller that needs none of them."""
        self._restore_signals()
        if wait:
            self._executor.shutdown(wait=True, cancel_futures=True)
        else:
            self.terminate()

    def __enter__(self) -> CompilePool:
        self._stop_on_signals()
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is not None:  # interrupted, terminated or failed: compiles still running are not wanted
            self.terminate()
        self.close()

    # -- stopping on SIGTERM and SIGINT ---------------------------------------------------

    def terminate(self) -> None:
        """Stop every compile process now, finished or not; the pool takes no more work.

        A process stopped while it sends a result leaves half a message in the result pipe, and the
        executor's thread, reading it, would wait for the rest for ever (and the interpreter's exit for
        that thread). Once the processes are gone, this process's copy of the pipe's write end is closed
        too: the read then ends, and so does the thread.
        """
        processes = self._children()
        results = getattr(self._executor, "_result_queue", None)  # the executor forgets it at shutdown
        self._kill(processes)
        self._executor.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.join(STOP_WAIT_S)
            if process.is_alive():
                process.kill()
                process.join(STOP_WAIT_S)
        writer = getattr(results, "_writer", None)
        if writer is not None:
            writer.close()

    def _children(self) -> list:
        return list((getattr(self._executor, "_processes", None) or {}).values())

    @staticmethod
    def _kill(processes: list) -> None:
        for process in processes:
            try:
                process.terminate()
            except (OSError, ValueError, AttributeError):  # already gone, or never started
                pass

    def _stop_on_signals(self) -> None:
        """While the pool is open, SIGTERM and SIGINT stop its processes before they end this one
        (SIGINT then raises KeyboardInterrupt as usual, SIGTERM exits with 128 + 15). Only the
        main thread can set handlers; elsewhere the children's watch on their parent is the guard."""
        self._previous_handlers: dict[int, object] = {}
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous = signal.getsignal(signum)
            if previous in (signal.SIG_IGN, None):
                continue
            self._previous_handlers[signum] = previous
            signal.signal(signum, self._on_signal)

    def _restore_signals(self) -> None:
        for signum, previous in getattr(self, "_previous_handlers", {}).items():
            signal.signal(signum, previous)
        self._previous_handlers = {}

    def _on_signal(self, signum: int, frame) -> None:
        previous = self._previous_handlers.get(signum, signal.SIG_DFL)
        self._kill(self._children())  # no locks here: the interrupted code may hold the executor's
        self._restore_signals()
        if callable(previous):
            previous(signum, frame)  # SIGINT's default raises KeyboardInterrupt
        raise SystemExit(128 + signum)


STOP_WAIT_S = 5.0
_PARENT_POLL_S = 0.5


def _set_up_compile_process(parent_pid: int) -> None:
    """A compile process's start: a lower priority, and an exit of its own once the parent is gone."""
    _lower_priority()
    _follow_parent(parent_pid)


def _follow_parent(parent_pid: int) -> None:
    """Set up a compile process: leave SIGINT to the parent (which stops the pool), and exit
    as soon as the parent is gone, however it ended."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(_PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="autotune-parent-watch", daemon=True).start()
