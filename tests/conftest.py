"""Shared test setup and helpers.

GPU tests skip with a reason where no NVIDIA GPU is attached. Every test's cache folder is the
session's (:func:`session_cache`: each kernel compiled once per session) and the default database
stays out of the user's home. :func:`postgres` is the session's one PostgreSQL server. The command
line runs in this process (:func:`autotune`) or, where only a process of its own shows what is
tested, as one (:func:`autotune_process`). Bounds on the work a call does are on
:func:`cpu_seconds`, never on wall time.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
import resource
import subprocess
import sys
import traceback
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def gpu_absent_reason() -> str | None:
    """None when an NVIDIA GPU is attached, else why not (checked through NVML, no CUDA context)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            count = pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
    except Exception as error:  # no driver, no library
        return f"no NVIDIA GPU: NVML unavailable ({type(error).__name__})"
    return None if count else "no NVIDIA GPU: NVML reports 0 devices"


def pytest_collection_modifyitems(config, items):
    reason = gpu_absent_reason()
    if reason is None:
        return
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="module")
def pool():
    """Compile processes for a module of tests that build many kernels (one per core); a module that needs
    another count defines its own."""
    from autotune.kernel.compile import CompilePool

    with CompilePool(2) as compile_pool:
        yield compile_pool


@pytest.fixture(scope="module")
def worker():
    """A GPU worker process on the attached GPU for a module of GPU tests (modules that play a GPU define their
    own, with the fake backend)."""
    from autotune.gpu.worker import GpuWorker

    with GpuWorker() as gpu_worker:
        yield gpu_worker


@pytest.fixture(scope="module")
def gpu(worker):
    """The attached GPU's spec, as its worker reports it."""
    from autotune.gpu_specs import GPUS

    return GPUS[worker.environment().gpu_key]


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory) -> Path:
    """The session's cache folder, every test's ``$AUTOTUNE_CACHE``: a kernel is compiled once per session
    (the cache key is its source, target, NVRTC version and options), the shipped results imported once."""
    return tmp_path_factory.getbasetemp() / "cache"


@pytest.fixture(autouse=True)
def _isolated_dirs(session_cache, tmp_path_factory, monkeypatch):
    """Keep the cubin cache and the default database out of the user's home, and the output's width the same
    wherever the tests run ($COLUMNS unset: a test that wants a width sets it)."""
    monkeypatch.setenv("AUTOTUNE_CACHE", str(session_cache))
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.getbasetemp() / "data"))


@pytest.fixture(scope="session")
def postgres(pytestconfig):
    """The session's throwaway PostgreSQL server (tests/postgres_server.py), started on first use; a skip
    with the reason where it cannot start here. Each test makes its own database on it."""
    from postgres_server import missing, server_for

    reason = missing()
    if reason:
        pytest.skip(reason)
    return server_for(pytestconfig)


def cpu_seconds() -> float:
    """CPU seconds spent so far by this process and the processes it has waited for: a bound on what a call
    costs that holds however loaded the machine is (a bound on wall time does not)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


# -- the command line ----------------------------------------------------------------------------


def autotune(*args, env: dict[str, str] | None = None, cwd: str | os.PathLike | None = None,
             timeout: float | None = None) -> subprocess.CompletedProcess:
    """``autotune ARGS`` run in this process through :func:`autotune.cli.main`, as the command would run.

    Returns its exit code and what it printed, as :func:`subprocess.run` would: an exception
    that escapes the command is a traceback on stderr and exit code 1; warnings show as in a fresh
    interpreter. ``env`` is added to the environment and ``cwd`` is the working directory while it
    runs. What the processes it starts (GPU worker, compile processes) print is not captured;
    ``timeout`` is taken for :func:`autotune_process`'s sake and not enforced.
    """
    from autotune.cli import main

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, _fresh_warnings(), _logging_to(err):
        for name, value in (env or {}).items():
            patch.setenv(name, value)
        if cwd is not None:
            patch.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(arg) for arg in args])
            except SystemExit as exit:  # argparse: --help, a bad argument
                code = _exit_code(exit)
            except Exception:  # noqa: BLE001 - what the interpreter prints before it exits with 1
                traceback.print_exc()
                code = 1
    return subprocess.CompletedProcess(["autotune", *map(str, args)], code, out.getvalue(), err.getvalue())


def autotune_process(*args, env: dict[str, str] | None = None, cwd: str | os.PathLike | None = None,
                     timeout: float = 600, **popen):
    """``python -m autotune ARGS`` as a process of its own, this tree first on its path: for what only a
    process shows (the entry point, signals, processes started together). Without ``popen`` options,
    the finished process (text output captured); with them, the started :class:`subprocess.Popen`."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    full_env = {**os.environ, "PYTHONPATH": path, **(env or {})}
    command = [sys.executable, "-m", "autotune", *map(str, args)]
    if popen:
        return subprocess.Popen(command, env=full_env, cwd=cwd, text=True, **popen)
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=cwd)


def cli(capsys, *args: str) -> tuple[int, str, str]:
    """``autotune ARGS`` in this process, its output read from pytest's ``capsys``: (exit code, stdout, stderr)."""
    from autotune.cli import main

    try:
        code = main(list(args))
    except SystemExit as stop:
        code = stop.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    """Exit code 2, one line on stderr, no traceback, and each fragment in that line."""
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def _exit_code(exit: SystemExit) -> int:
    if exit.code is None:
        return 0
    if isinstance(exit.code, int):
        return exit.code
    print(exit.code, file=sys.stderr)
    return 1


@contextlib.contextmanager
def _fresh_warnings():
    """Warnings filtered and printed (on the current stderr) as a fresh interpreter does."""
    with warnings.catch_warnings():
        warnings.resetwarnings()
        for category in (ResourceWarning, ImportWarning, PendingDeprecationWarning, DeprecationWarning):
            warnings.simplefilter("ignore", category)
        warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
        warnings.showwarning = _show_warning
        yield


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


@contextlib.contextmanager
def _logging_to(stream: io.StringIO):
    """Optuna's log handler writes to ``stream`` meanwhile (a process of its own would print its lines
    on stderr); a handler made meanwhile is given the stderr of before."""
    before = sys.stderr
    handlers = [handler for handler in logging.getLogger("optuna").handlers
                if isinstance(handler, logging.StreamHandler)]
    streams = [handler.setStream(stream) for handler in handlers]
    try:
        yield
    finally:
        for handler, old in zip(handlers, streams):
            handler.setStream(old)
        for name in ("optuna", None):
            for handler in logging.getLogger(name).handlers:
                if isinstance(handler, logging.StreamHandler) and handler.stream is stream:
                    handler.setStream(before)
