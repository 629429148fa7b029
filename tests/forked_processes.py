"""Real processes for the tests of many processes on one database or study, forked from a server that
has imported autotune's results, study and command-line layers once: each has its own connections and
can be killed with SIGKILL, and costs no interpreter start-up and imports of its own.

:func:`processes` is the multiprocessing context; the functions below are what the processes run.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing

PRELOAD = ["autotune.cli", "autotune.results", "autotune.search.search", "autotune.gpu.worker", "sqlalchemy",
           "alembic", "optuna", "psycopg", "search_process", __name__]


def processes() -> multiprocessing.context.ForkServerContext:
    """The fork-server context whose server has imported :data:`PRELOAD` (started on first use)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def autotune_command(args: list[str], answer) -> None:
    """``autotune ARGS``; sends ``(exit code, stdout, stderr)`` through ``answer`` (a connection)."""
    from autotune.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    answer.send((code, out.getvalue(), err.getvalue()))


def search(argv: list[str], answer) -> None:
    """A search of tests/search_process.py in a session of its own (so that it can be killed with its GPU worker
    and compile process); sends how many configs it evaluated through ``answer`` (a connection)."""
    import os

    import search_process

    os.setsid()
    answer.send(search_process.search(argv))


def open_ledger(url: str, barrier, results) -> None:
    """Open the study "together" on ``url`` once every process has reached ``barrier``; put its id (or the
    error) on ``results``."""
    from autotune.search.study import StudyLedger

    barrier.wait()  # every process creates Optuna's tables and the study at the same moment
    try:
        ledger = StudyLedger(url, "together", ["minimize"], {}, budget=1, heartbeat_s=1, grace_s=2)
        ledger.close()
        results.put(ledger.study_id)
    except Exception as error:  # noqa: BLE001 - reported to the test
        results.put(f"{type(error).__name__}: {error}")


def write(url: str, proc: int, count: int, start) -> None:
    """``count`` measurements (a failure every 50th) over 8 kernels as study ``p<proc>``, once every writer
    has reached ``start`` (a barrier): they open the fresh database and write all at once."""
    from autotune.problem import GemmProblem
    from autotune.records import Environment, Failure, Measurement, Timing
    from autotune.results import ResultStore
    from autotune.space.family import Config

    env = Environment("h200", "NVIDIA H200", "sm_90", "580.159.04", "13.0", "13.0", "14.2.0")
    problem = GemmProblem(256, 256, 256)
    start.wait()
    store = ResultStore(url)
    for i in range(count):
        ms = 1.0 + proc * 1e-3 + i * 1e-7
        config = Config("sgemm", (("BM", 16 * (i % 8 + 1)),))
        store.add_measurement(env, problem, config, "h", Measurement(Timing(ms, ms, ms, ms, ms, (ms,)), 1.0, 0.0),
                              f"p{proc}")
        if i % 50 == 0:
            store.add_failure(env, problem, config, "h", Failure("timeout", f"{proc}/{i}"), f"p{proc}")
    store.close()


def victim(url: str, opened) -> None:
    """Open ``url``, set ``opened`` (a shared byte: no lock that a kill could leave held) to 1, and write
    measurements, energy windows and failures until killed."""
    from autotune.problem import GemmProblem
    from autotune.records import EnergyWindow, Environment, Failure, Measurement, Timing
    from autotune.results import ResultStore
    from autotune.space.family import Config

    env = Environment("h200", "NVIDIA H200", "sm_90", "580.159.04", "13.0", "13.0", "14.2.0")
    problem = GemmProblem(256, 256, 256)
    window = EnergyWindow(1.0, 1000, 600.0, 590.0, 0.6, 0.59, 120.0, 1980.0, 1980, 60, 0, False, 100)
    store = ResultStore(url)
    opened.value = 1
    i = 0
    while True:
        i += 1
        config = Config("sgemm", (("BM", 16 * (i % 8 + 1)),))
        ms = 1.0 + i * 1e-7
        timing = Timing(ms, ms, ms, ms, ms, (ms,))
        measured = store.add_measurement(env, problem, config, "h", Measurement(timing, 1.0, 0.0), "victim")
        store.add_energy(measured, window)
        store.add_failure(env, problem, config, "h", Failure("fault", str(i)), "victim")
