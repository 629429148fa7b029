"""The GPU stage: a worker started from several threads at once, and the one kernel launcher that the
worker's CuPy backend and the runtime share (checked on stand-ins for CuPy, no GPU)."""

from __future__ import annotations

import ctypes
import dataclasses
import os
import pathlib
import threading
import time
import types

import numpy
import pytest

from autotune.gpu import launch as launch_module
from autotune.gpu.cupy_backend import CupyBackend
from autotune.gpu.fake_backend import FakeBackend
from autotune.gpu.launch import SMEM_DEFAULT_LIMIT, KernelLaunch, load_kernel
from autotune.gpu.tasks import KernelTask, ProbeTask
from autotune.gpu.worker import GpuWorker, WorkerStartError
from autotune.kernel_abi import TENSOR_MAP_BYTES, TensorMapSpec
from autotune.problem import GemmProblem
from autotune.records import Environment, Measurement

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "autotune"
THREADS = 6  # half ask for the environment, half run a task
ROUNDS = 3  # fresh workers per way of starting
START_TIMEOUT_S = 60.0
TASK_TIMEOUT_S = 30.0
# Past the worker's own limits (one start, every task in turn): a thread still waiting then is stuck
# (two threads reading one pipe wait for ever).
STUCK_S = START_TIMEOUT_S + THREADS * TASK_TIMEOUT_S


# -- a worker started from several threads ----------------------------------------------------------


def _all_at_once(worker: GpuWorker) -> list:
    """What THREADS threads get, released together, from environment() or run() on ``worker``."""
    barrier = threading.Barrier(THREADS)
    outcomes: list = [None] * THREADS

    def call(index: int) -> None:
        barrier.wait()
        try:
            if index % 2:
                outcomes[index] = worker.run(ProbeTask("ok"), timeout_s=TASK_TIMEOUT_S)
            else:
                outcomes[index] = worker.environment()
        except Exception as error:  # the outcome to check
            outcomes[index] = error

    threads = [threading.Thread(target=call, args=(i,), daemon=True) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + STUCK_S
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert not any(thread.is_alive() for thread in threads), f"threads stuck: {outcomes}"
    return outcomes


@pytest.mark.parametrize("begun", [False, True], ids=["cold", "begun"])
def test_threads_that_find_the_worker_starting_wait_for_its_hello(begun):
    # The search begins the worker, then a lane thread runs cuBLAS while the main thread asks for the
    # environment: whichever comes second waits for the hello the first one reads.
    for _ in range(ROUNDS):
        worker = GpuWorker(backend="fake", start_timeout_s=START_TIMEOUT_S)
        if begun:
            worker.begin()
        try:
            outcomes = _all_at_once(worker)
            pid = worker.pid
        finally:
            worker.close()
        environments = outcomes[0::2]
        results = outcomes[1::2]
        assert all(isinstance(env, Environment) and env.gpu_key == "h200-fake" for env in environments), outcomes
        assert all(isinstance(result, Measurement) for result in results), outcomes
        assert worker.restarts == 0 and pid is not None  # one child, started once


class SlowToStartBackend(FakeBackend):
    """The fake GPU, taking a minute to start (CuPy and a CUDA context take seconds)."""

    def __init__(self, device: int = 0):
        time.sleep(60)
        super().__init__(device)


def test_closing_a_worker_that_another_thread_is_starting_stops_it():
    worker = GpuWorker(backend=SlowToStartBackend, start_timeout_s=600)
    errors: list[Exception] = []

    def start() -> None:
        try:
            worker.start()
        except Exception as error:
            errors.append(error)

    starter = threading.Thread(target=start)
    starter.start()
    while worker.pid is None and starter.is_alive():
        time.sleep(0.01)
    pid = worker.pid
    worker.close()  # e.g. the study could not be opened while a lane thread waits for the GPU
    starter.join()
    assert worker.pid is None and _pid_gone(pid)
    assert len(errors) == 1 and isinstance(errors[0], WorkerStartError), errors
    assert "while starting" in str(errors[0])


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# -- the launcher -----------------------------------------------------------------------------------


class FakeCupy:
    """CuPy's module loading and cuLaunchKernel, recorded."""

    def __init__(self):
        self.launches: list[tuple] = []
        self.attributes: list[tuple] = []
        fake = self

        class Module:
            def load(self, cubin):
                self.cubin = cubin

            def get_function(self, entry):
                return types.SimpleNamespace(ptr=0xF00, entry=entry, module=self)

        def launch_kernel(function, gx, gy, gz, bx, by, bz, shared_mem, stream, parameters, extra):
            fake.launches.append(((gx, gy, gz), (bx, by, bz), shared_mem, stream, _arguments(parameters)))

        def set_attribute(function, attribute, value):
            fake.attributes.append((function, attribute, value))

        driver = types.SimpleNamespace(launchKernel=launch_kernel, funcSetAttribute=set_attribute,
                                       CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES=8)
        self.cuda = types.SimpleNamespace(driver=driver, function=types.SimpleNamespace(Module=Module))


def _arguments(parameters: int) -> dict:
    """What a kernel launched with this parameter array would read (the GEMM arguments, then the maps)."""
    count = 8 + LAUNCH_MAPS
    address = numpy.frombuffer(ctypes.string_at(parameters, 8 * count), numpy.uint64)

    def read(i: int, dtype, size: int):
        return numpy.frombuffer(ctypes.string_at(int(address[i]), size), dtype)[0].item()

    return {
        "pointers": tuple(read(i, numpy.uint64, 8) for i in range(3)),
        "sizes": tuple(read(i, numpy.int32, 4) for i in range(3, 6)),
        "scalars": (read(6, numpy.float32, 4), read(7, numpy.float32, 4)),
        "maps": tuple(ctypes.string_at(int(address[i]), TENSOR_MAP_BYTES) for i in range(8, count)),
    }


LAUNCH_MAPS = 2
SPECS = (TensorMapSpec("map_a", "A", (64, 64), 128), TensorMapSpec("map_c", "C", (32, 64), 64))


def test_a_kernel_opts_in_to_more_shared_memory_only_past_the_default():
    cupy = FakeCupy()
    function = load_kernel(cupy, b"cubin", "k", SMEM_DEFAULT_LIMIT)
    assert function.entry == "k" and function.module.cubin == b"cubin" and cupy.attributes == []
    load_kernel(cupy, b"cubin", "k", 64 * 1024, opt_in=False)
    assert cupy.attributes == []
    load_kernel(cupy, b"cubin", "k", 64 * 1024)
    assert cupy.attributes == [(0xF00, 8, 64 * 1024)]


def test_a_launch_rewrites_only_what_changed(monkeypatch):
    encoded = []

    def argument(spec, pointer, m, n, k, element_bytes, b_transposed=False):
        encoded.append((spec.name, pointer, (m, n, k), element_bytes))
        return bytes([len(encoded)]) * TENSOR_MAP_BYTES

    monkeypatch.setattr(launch_module, "argument", argument)
    cupy = FakeCupy()
    launch = KernelLaunch(cupy, types.SimpleNamespace(ptr=0xF00), (3, 2, 1), (128, 1, 1), 70_000, (100, 200, 300),
                          SPECS)
    launch(0x57, 0x1000, 0x2000, 0x3000, 2, 1.5, 0.0)
    grid, block, smem, stream, args = cupy.launches[-1]
    assert (grid, block, smem, stream) == ((3, 2, 1), (128, 1, 1), 70_000, 0x57)
    assert args["pointers"] == (0x1000, 0x2000, 0x3000) and args["sizes"] == (100, 200, 300)
    assert args["scalars"] == (1.5, 0.0)
    assert encoded == [("map_a", 0x1000, (100, 200, 300), 2), ("map_c", 0x3000, (100, 200, 300), 2)]
    assert args["maps"] == (bytes([1]) * TENSOR_MAP_BYTES, bytes([2]) * TENSOR_MAP_BYTES)

    launch(0x57, 0x1000, 0x2000, 0x3000, 2, 1.5, 0.5)  # another beta: the maps stay
    assert len(encoded) == 2 and cupy.launches[-1][4]["scalars"] == (1.5, 0.5)
    launch(0x57, 0x1000, 0x2000, 0x4000, 2, 1.5, 0.5)  # another output: encoded again
    args = cupy.launches[-1][4]
    assert [pointer for _, pointer, _, _ in encoded[2:]] == [0x1000, 0x4000]
    assert args["pointers"] == (0x1000, 0x2000, 0x4000) and args["maps"][1] == bytes([4]) * TENSOR_MAP_BYTES
    assert len(cupy.launches) == 3


def test_the_cupy_backend_launches_the_task_as_given():
    cupy = FakeCupy()
    backend = object.__new__(CupyBackend)
    backend.cupy = cupy
    backend.stream = types.SimpleNamespace(ptr=0x57)

    def array(pointer: int):
        return types.SimpleNamespace(data=types.SimpleNamespace(ptr=pointer), itemsize=2)

    operands = types.SimpleNamespace(a=array(0x1000), b=array(0x2000), out=array(0x3000))
    backend.cache = types.SimpleNamespace(operands=lambda problem, seed: operands)
    problem = GemmProblem(128, 256, 512, "f16", alpha=2.0, beta=0.0)
    # maps of operands TMA cannot address are zeros, and need no driver here
    specs = (TensorMapSpec("map_a", "A", (64, 64), 128), TensorMapSpec("map_b", "B", (64, 64), 128))
    operands.a.data.ptr, operands.b.data.ptr = 0x1008, 0x2008
    task = KernelTask(b"cubin", "k", (4, 2, 1), (256, 1, 1), 100_000, problem, seed=1, warmup=1, repeats=3,
                      tensor_maps=specs)
    launch, given = backend._kernel_launch(task, problem, task.seed)
    assert given is operands and cupy.attributes == [(0xF00, 8, 100_000)]
    launch(dataclasses.replace(problem, alpha=3.0, beta=0.5), array(0x5000))  # a verification problem
    grid, block, smem, stream, args = cupy.launches[-1]
    assert (grid, block, smem, stream) == ((4, 2, 1), (256, 1, 1), 100_000, 0x57)
    assert args["pointers"] == (0x1008, 0x2008, 0x5000) and args["sizes"] == (128, 256, 512)
    assert args["scalars"] == (3.0, 0.5) and args["maps"] == (bytes(TENSOR_MAP_BYTES),) * 2


def test_only_the_launcher_loads_and_launches_kernels():
    # One launcher: the GPU worker and the runtime load modules, raise the shared-memory limit and call
    # cuLaunchKernel through autotune/gpu/launch.py alone.
    calls = ("launchKernel(", "funcSetAttribute(", "Module()")
    found = [f"{path.relative_to(PACKAGE)}: {call}" for path in sorted(PACKAGE.rglob("*.py"))
             for call in calls if call in path.read_text() and path.name != "launch.py"]
    assert found == []
