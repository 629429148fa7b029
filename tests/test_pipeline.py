"""The pieces that keep a GPU busy: workers begun early, lanes, a compile pool that can be stopped."""

import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

from autotune.search.lanes import GpuLane


def test_begin_returns_at_once_and_the_environment_waits_for_the_worker(tmp_path, monkeypatch):
    from test_worker import GatedBackend

    from autotune.gpu.worker import GpuWorker

    gate = tmp_path / "gate"
    monkeypatch.setenv("AUTOTUNE_TEST_GATE", str(gate))
    worker = GpuWorker(backend=GatedBackend, start_timeout_s=120)  # says hello only once the gate opens
    try:
        worker.begin()
        worker.begin()  # still starting: not a second child
        assert worker.pid is not None  # begin() returned while the child could not have said hello
        first = worker.pid
        gate.touch()
        assert worker.environment().gpu_key == "h200-fake"  # the fake GPU is kept apart from a real H200
        assert worker.pid == first and worker.restarts == 0
    finally:
        gate.touch()
        worker.close()
    assert worker.pid is None


class Recorder:
    """A stand-in worker: each job appends its tag; the first job says it started, then waits until released."""

    device = 7

    def __init__(self):
        self.ran, self.started, self.release = [], threading.Event(), threading.Event()


def test_a_lane_runs_jobs_in_order_and_gives_back_those_not_started():
    events = queue.Queue()
    worker = Recorder()
    lane = GpuLane(0, worker, events)

    def job(tag):
        def run(w):
            if tag == "first":
                w.started.set()
                w.release.wait(60)
            w.ran.append(tag)
            return tag.upper()
        return run

    for tag in ("first", "second", "third", "fourth"):
        lane.submit(tag, job(tag))
    assert worker.started.wait(60)  # "first" is running, the others wait
    assert lane.cancel_waiting(lambda tag: tag in ("third", "fourth")) == ["third", "fourth"]
    assert lane.queued == 2 and lane.device == 7
    worker.release.set()
    results = [events.get(timeout=60) for _ in range(2)]
    lane.stop(timeout_s=60)
    assert [(tag, result) for _, tag, result in results] == [("first", "FIRST"), ("second", "SECOND")]
    assert worker.ran == ["first", "second"]


def test_a_failing_job_hands_its_exception_to_the_search():
    events = queue.Queue()
    lane = GpuLane(1, Recorder(), events)
    lane.submit("bad", lambda worker: 1 / 0)
    _, tag, result = events.get(timeout=60)
    lane.stop(timeout_s=60)
    assert tag == "bad" and isinstance(result, ZeroDivisionError)


def _ended(pid: int) -> bool:
    """Whether process ``pid`` has exited (gone, or a zombie not reaped yet)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status


def test_a_compile_pool_stopped_without_waiting_ends_its_processes():
    from autotune.kernel.compile import CompilePool

    pool = CompilePool(jobs=2)
    pool.warm_up()
    busy = pool._executor.submit(time.sleep, 60)  # a compile that would take a minute
    deadline = time.monotonic() + 60
    while not busy.running() and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = [process.pid for process in pool._executor._processes.values()]
    started = time.monotonic()
    pool.close(wait=False)
    while not all(_ended(pid) for pid in pids) and time.monotonic() - started < 60:  # at once, unless loaded
        time.sleep(0.05)
    assert pids and all(_ended(pid) for pid in pids)  # the minute-long compile was not waited for


STOPPED_WHILE_SENDING = """
import sys
import time
from pathlib import Path

from autotune.kernel.compile import CompilePool


def big_result():
    return b"x" * 50_000_000


def writing_to_a_pipe(pid: int) -> bool:
    return "pipe_write" in Path(f"/proc/{pid}/wchan").read_text()


if __name__ == "__main__":
    pool = CompilePool(jobs=1)
    pool.warm_up()
    sys.setswitchinterval(0.5)  # this thread holds the GIL: the executor's thread reads a chunk now and then
    future = pool._executor.submit(big_result)
    pid = pool._children()[0].pid
    deadline, caught = time.monotonic() + 60, False
    while not caught and time.monotonic() < deadline:
        caught = writing_to_a_pipe(pid)
    sending = caught and not future.done()
    pool.terminate()  # the process is stopped with its result half sent
    pool.close()
    print("stopped while sending" if sending else "not caught sending", flush=True)
"""


def test_a_compile_process_stopped_while_sending_its_result_does_not_hang_the_exit(tmp_path):
    script = tmp_path / "stop.py"
    script.write_text(STOPPED_WHILE_SENDING)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=90,
                            env=env)  # hung for ever before: the executor's thread waited for the rest
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "stopped while sending"
