"""The GPU worker process: timeouts, crashes, faults and restarts.

The CPU tests use the fake backend and ProbeTask, which go through the same
parent-side paths as real kernels. The tests marked ``gpu`` run real kernels
through CuPy and skip where no GPU is attached; this file decides that itself
(through NVML, without importing CuPy into the test process).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import pathlib
import subprocess
import sys
import textwrap
import time

import pytest

from autotune.errors import FailureClass, NoGpuError
from autotune.gpu.backend import CONTEXT_LOST, STICKY_FAULTS, classify_cuda_status, describe_exception
from autotune.gpu.fake_backend import FakeBackend
from autotune.gpu.tasks import CublasTask, KernelTask, ProbeTask, verification_problems
from autotune.gpu.worker import GpuWorker
from autotune.problem import GemmProblem
from autotune.records import Failure, Measurement, Resources

REPO = pathlib.Path(__file__).resolve().parent.parent
SLACK_S = 30.0  # kill + join of a sleeping child on a loaded machine; still far from the 60 s it sleeps


@pytest.fixture
def fake():
    with GpuWorker(backend="fake", start_timeout_s=60) as worker:
        yield worker


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# -- fake backend: the parent-side paths ------------------------------------------------


def test_ok_probe_returns_a_measurement_and_keeps_the_worker(fake):
    pid = fake.pid
    for _ in range(3):
        assert isinstance(fake.run(ProbeTask("ok"), timeout_s=10), Measurement)
    assert fake.pid == pid
    assert fake.restarts == 0


def test_hang_times_out_and_the_next_task_runs_on_a_fresh_worker(fake):
    old_pid = fake.pid
    started = time.monotonic()
    result = fake.run(ProbeTask("sleep", seconds=60), timeout_s=1.0)
    elapsed = time.monotonic() - started
    assert isinstance(result, Failure)
    assert result.failure_class == FailureClass.TIMEOUT.value
    assert result.message == "no answer after 1.0 s; worker killed"
    assert elapsed < 1.0 + SLACK_S
    assert _pid_gone(old_pid)
    assert isinstance(fake.run(ProbeTask("ok"), timeout_s=10), Measurement)
    assert fake.restarts == 1
    assert fake.pid != old_pid


def test_exit_is_a_crash_and_the_next_task_runs(fake):
    result = fake.run(ProbeTask("exit"), timeout_s=10)
    assert result == Failure(FailureClass.CRASH.value, "worker exited with code 3")
    assert isinstance(fake.run(ProbeTask("ok"), timeout_s=10), Measurement)
    assert fake.restarts == 1


def test_fault_replaces_the_worker(fake):
    old_pid = fake.pid
    result = fake.run(ProbeTask("fault"), timeout_s=10)
    assert isinstance(result, Failure) and result.failure_class == FailureClass.FAULT.value
    assert fake.pid is None and _pid_gone(old_pid)
    assert isinstance(fake.run(ProbeTask("ok"), timeout_s=10), Measurement)
    assert fake.restarts == 1


def test_an_exception_in_the_child_is_a_failure_and_the_worker_stays(fake):
    pid = fake.pid
    result = fake.run(ProbeTask("raise"), timeout_s=10)
    assert result == Failure(FailureClass.CRASH.value, "RuntimeError: probe: simulated exception")
    assert fake.pid == pid and fake.restarts == 0
    assert isinstance(fake.run(ProbeTask("ok"), timeout_s=10), Measurement)


def test_failures_in_a_row_each_cost_one_worker(fake):
    outcomes = [
        fake.run(ProbeTask("exit"), timeout_s=10),
        fake.run(ProbeTask("sleep", seconds=60), timeout_s=0.5),
        fake.run(ProbeTask("fault"), timeout_s=10),
        fake.run(ProbeTask("ok"), timeout_s=10),
    ]
    assert [getattr(o, "failure_class", "ok") for o in outcomes] == ["crash", "timeout", "fault", "ok"]
    assert fake.restarts == 3


def test_close_leaves_no_child_alive():
    worker = GpuWorker(backend="fake")
    worker.start()
    pid = worker.pid
    worker.run(ProbeTask("ok"), timeout_s=10)
    worker.close()
    assert worker.pid is None
    assert _pid_gone(pid)
    worker.close()  # a second close is harmless


class SlowToStartBackend(FakeBackend):
    """The fake GPU, taking a minute to start (CuPy and a CUDA context take seconds)."""

    def __init__(self, device: int = 0):
        time.sleep(60)
        super().__init__(device)


class GatedBackend(FakeBackend):
    """The fake GPU, starting only once the file named by ``$AUTOTUNE_TEST_GATE`` exists."""

    def __init__(self, device: int = 0):
        gate, deadline = pathlib.Path(os.environ["AUTOTUNE_TEST_GATE"]), time.monotonic() + 120
        while not gate.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        super().__init__(device)


def test_closing_a_worker_still_starting_stops_it_at_once():
    worker = GpuWorker(backend=SlowToStartBackend)
    worker.begin()
    pid = worker.pid
    started = time.monotonic()
    worker.close()  # e.g. the database could not be opened: the search stops before the GPU is up
    assert time.monotonic() - started < SLACK_S
    assert worker.pid is None and _pid_gone(pid)


def test_close_after_a_timeout_leaves_no_child_alive():
    worker = GpuWorker(backend="fake")
    worker.start()
    first = worker.pid
    worker.run(ProbeTask("sleep", seconds=60), timeout_s=0.5)
    worker.close()
    assert worker.pid is None and _pid_gone(first)


def test_fake_environment_and_properties(fake):
    env = fake.environment()
    assert env.gpu_key == "h200-fake" and env.arch == "sm_90-fake"  # kept apart from a real H200
    props = fake.device_properties()
    assert props["sms"] == 132 and props["smem_per_block_optin"] == 232448 and props["l2_bytes"] > 0


def test_fake_backend_runs_kernel_and_cublas_tasks(fake):
    problem = GemmProblem(256, 128, 64)
    resources = Resources(64, 0, 0, 0, 0, 0)
    task = KernelTask(b"\0cubin", "k", (1, 1, 1), (128, 1, 1), 0, problem, seed=1, warmup=1, repeats=3,
                      resources=resources)  # fmt: skip
    kernel = fake.run(task, timeout_s=10)
    cublas = fake.run(CublasTask(problem, 1, 1, 3), timeout_s=10)
    assert isinstance(kernel, Measurement) and kernel.resources == resources
    assert kernel.tflops == pytest.approx(FakeBackend.kernel_tflops("k")) and cublas.tflops == pytest.approx(40.0)
    assert 3.0 <= kernel.tflops <= 10.0 and len(kernel.timing.samples_ms) == 3


def test_no_gpu_backend_raises_no_gpu_error_in_one_line():
    with pytest.raises(NoGpuError) as info:
        GpuWorker(backend="none").start()
    message = str(info.value)
    assert message.startswith("no CUDA GPU is available: ") and "\n" not in message


def test_unknown_backend_and_bad_probe_are_refused():
    with pytest.raises(ValueError, match="unknown backend"):
        GpuWorker(backend="opencl")
    with pytest.raises(ValueError, match="expected one of"):
        ProbeTask("explode")


def test_parent_never_imports_cupy():
    script = textwrap.dedent(
        """
        import sys
        from autotune.errors import NoGpuError
        from autotune.gpu.tasks import ProbeTask
        from autotune.gpu.worker import GpuWorker
        with GpuWorker(backend="fake") as worker:
            worker.environment()
            for action in ("ok", "fault", "exit", "ok"):
                worker.run(ProbeTask(action), timeout_s=10)
        try:  # the real backend: starts on a GPU machine, NoGpuError elsewhere
            with GpuWorker(backend="cupy") as worker:
                worker.environment()
                worker.run(ProbeTask("ok"), timeout_s=60)
        except NoGpuError as error:
            print("no gpu:", error)
        leaked = sorted(m for m in sys.modules if m.split(".")[0] in ("cupy", "cupy_backends", "cupyx"))
        leaked += [m for m in ("autotune.gpu.measure", "pynvml") if m in sys.modules]
        print("LEAKED", leaked)
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "LEAKED []" in done.stdout, done.stdout


# -- pure helpers -----------------------------------------------------------------------


def test_cuda_status_classes():
    for status in (700, 714, 715, 716, 718, 719):
        assert classify_cuda_status(status) == (FailureClass.FAULT.value, False)
    for status in (1, 2, 200, 209, 218, 222, 500, 701, 720):
        assert classify_cuda_status(status) == (FailureClass.LAUNCH_ERROR.value, True)
    assert classify_cuda_status(709) == (FailureClass.CRASH.value, False)
    assert not set(STICKY_FAULTS) & set(CONTEXT_LOST)


def test_both_beta_paths_are_verified():
    zero = GemmProblem(8, 8, 8, alpha=1.5, beta=0.0)
    assert [p.beta for p in verification_problems(zero)] == [0.0, 0.5]
    one = dataclasses.replace(zero, beta=1.0)
    assert [p.beta for p in verification_problems(one)] == [1.0, 0.0]
    assert all(p.alpha == 1.5 for p in verification_problems(one))


def test_exception_descriptions_are_one_bounded_line():
    text = describe_exception(ValueError("first line\nsecond line " + "x" * 1000))
    assert "\n" not in text and text.startswith("ValueError: first line second line") and len(text) <= 500


# -- real GPU ---------------------------------------------------------------------------


@functools.cache
def _gpu_absent_reason() -> str | None:
    """None when NVML sees a GPU, else why not; CuPy stays out of this process."""
    try:
        import pynvml
    except ImportError:
        return "pynvml is not installed"
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
    except pynvml.NVMLError as error:
        return f"NVML unavailable ({error})"
    return None if count else "NVML reports 0 devices"


needs_gpu = pytest.mark.skipif(_gpu_absent_reason() is not None, reason=f"no CUDA GPU: {_gpu_absent_reason()}")

KERNELS = r"""
#define ARGS const float* A, const float* B, float* C, int M, int N, int K, float alpha, float beta
#define INDEX int r = blockIdx.y * blockDim.y + threadIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x; \
              if (r >= M || c >= N) return; \
              float s = 0.f; for (int k = 0; k < K; ++k) s += A[r * K + k] * B[k * N + c];
extern "C" __global__ void naive(ARGS) {
    INDEX
    C[r * N + c] = beta == 0.f ? alpha * s : alpha * s + beta * C[r * N + c];
}
extern "C" __global__ void naive_big_smem(ARGS) {  // needs 64 KiB of dynamic shared memory
    extern __shared__ float stash[];
    INDEX
    int slot = 16383 - (threadIdx.y * blockDim.x + threadIdx.x);
    stash[slot] = s;
    __syncthreads();
    s = stash[slot];
    C[r * N + c] = beta == 0.f ? alpha * s : alpha * s + beta * C[r * N + c];
}
extern "C" __global__ void ignores_beta(ARGS) {
    INDEX
    C[r * N + c] = alpha * s;
}
extern "C" __global__ void always_reads_c(ARGS) {
    INDEX
    C[r * N + c] = alpha * s + beta * C[r * N + c];
}
extern "C" __global__ void out_of_bounds(ARGS) {
    INDEX
    C[(long long)r * N + c + (1LL << 40)] = s;
}
extern "C" __global__ void never_ends(ARGS) {
    while (clock64() >= 0) { }  // clock64 is volatile: the loop stays, and never ends
    C[0] = alpha;
}
__device__ float h2f(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ unsigned short f2h(float f) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
extern "C" __global__ void naive_f16(const unsigned short* A, const unsigned short* B, unsigned short* C,
                                     int M, int N, int K, float alpha, float beta) {
    int r = blockIdx.y * blockDim.y + threadIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M || c >= N) return;
    float s = 0.f;
    for (int k = 0; k < K; ++k) s += h2f(A[r * K + k]) * h2f(B[k * N + c]);
    float v = alpha * s;
    if (beta != 0.f) v += beta * h2f(C[r * N + c]);
    C[r * N + c] = f2h(v);
}
"""

ODD = GemmProblem(127, 65, 33, alpha=1.5, beta=0.0)


@pytest.fixture(scope="module")
def gpu():
    with GpuWorker(backend="cupy") as worker:
        yield worker


@pytest.fixture(scope="module")
def cubin(gpu):
    """The kernels above compiled by NVRTC for the attached GPU (a cubin, not PTX)."""
    from cupy.cuda import nvrtc

    program = nvrtc.createProgram(KERNELS, "worker_test.cu", [], [])
    try:
        nvrtc.compileProgram(program, [f"--gpu-architecture={gpu.environment().arch}"])
        return nvrtc.getCUBIN(program)
    finally:
        nvrtc.destroyProgram(program)


def _task(cubin: bytes, entry: str, problem: GemmProblem = ODD, smem: int = 0) -> KernelTask:
    block = (16, 16, 1)
    grid = (-(-problem.n // 16), -(-problem.m // 16), 1)
    return KernelTask(cubin, entry, grid, block, smem, problem, seed=7, warmup=2, repeats=5, resources=None)


def _assert_sane(result) -> None:
    assert isinstance(result, Measurement), result
    timing = result.timing
    assert len(timing.samples_ms) == 5 or len(timing.samples_ms) == 10
    assert 0 < timing.min_ms <= timing.q25_ms <= timing.median_ms <= timing.q75_ms <= timing.max_ms
    assert 0 <= result.max_error <= 1.0 and result.tflops > 0


@pytest.mark.gpu
@needs_gpu
def test_gpu_environment(gpu):
    env = gpu.environment()
    assert env.arch.startswith("sm_") and env.cuda_runtime.count(".") == 1 and env.cupy
    assert gpu.device_properties()["sms"] > 0


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("beta", [0.0, 0.75])
def test_gpu_naive_kernel_verifies(gpu, cubin, beta):
    _assert_sane(gpu.run(_task(cubin, "naive", dataclasses.replace(ODD, beta=beta)), timeout_s=60))


@pytest.mark.gpu
@needs_gpu
def test_gpu_dynamic_shared_memory_past_48k_is_opted_in(gpu, cubin):
    _assert_sane(gpu.run(_task(cubin, "naive_big_smem", smem=64 * 1024), timeout_s=60))
    pid = gpu.pid
    too_much = gpu.run(_task(cubin, "naive_big_smem", smem=1024 * 1024), timeout_s=60)
    assert isinstance(too_much, Failure) and too_much.failure_class == FailureClass.LAUNCH_ERROR.value, too_much
    assert gpu.pid == pid


@pytest.mark.gpu
@needs_gpu
def test_gpu_f16_naive_kernel_verifies(gpu, cubin):
    problem = GemmProblem(127, 65, 1000, dtype="f16", alpha=1.0, beta=0.5)
    _assert_sane(gpu.run(_task(cubin, "naive_f16", problem), timeout_s=60))


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("entry, beta", [("ignores_beta", 0.0), ("always_reads_c", 0.0), ("ignores_beta", 1.0)])
def test_gpu_wrong_answers_are_caught(gpu, cubin, entry, beta):
    result = gpu.run(_task(cubin, entry, dataclasses.replace(ODD, beta=beta)), timeout_s=60)
    assert isinstance(result, Failure) and result.failure_class == FailureClass.WRONG_ANSWER.value, result
    assert " at (" in result.message and "got " in result.message


@pytest.mark.gpu
@needs_gpu
def test_gpu_fault_costs_one_worker(gpu, cubin):
    restarts = gpu.restarts
    result = gpu.run(_task(cubin, "out_of_bounds"), timeout_s=60)
    assert isinstance(result, Failure) and result.failure_class == FailureClass.FAULT.value, result
    _assert_sane(gpu.run(_task(cubin, "naive"), timeout_s=60))
    assert gpu.restarts == restarts + 1


@pytest.mark.gpu
@needs_gpu
def test_gpu_hang_times_out_and_the_next_task_runs(gpu, cubin):
    restarts = gpu.restarts
    gpu.run(_task(cubin, "naive"), timeout_s=60)  # operands and module paths warm
    started = time.monotonic()
    result = gpu.run(_task(cubin, "never_ends"), timeout_s=5)
    assert isinstance(result, Failure) and result.failure_class == FailureClass.TIMEOUT.value, result
    assert time.monotonic() - started < 5 + 35
    _assert_sane(gpu.run(_task(cubin, "naive"), timeout_s=60))
    assert gpu.restarts == restarts + 1


@pytest.mark.gpu
@needs_gpu
def test_gpu_missing_entry_is_a_launch_error(gpu, cubin):
    pid = gpu.pid
    result = gpu.run(_task(cubin, "no_such_kernel"), timeout_s=60)
    assert isinstance(result, Failure) and result.failure_class == FailureClass.LAUNCH_ERROR.value, result
    assert gpu.pid == pid


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_gpu_cublas_measurement_is_sane(gpu, dtype):
    problem = GemmProblem(512, 384, 256, dtype=dtype, alpha=1.0, beta=0.5)
    result = gpu.run(CublasTask(problem, seed=3, warmup=3, repeats=10), timeout_s=120)
    _assert_sane(result)
    assert result.tflops < 2000  # a 512x384x256 GEMM cannot be this fast; catches unit slips
