"""The one process that touches the GPU: a spawn-started worker, restartable.

The parent (the Optuna/database process) never imports CuPy or initialises
CUDA. It talks to a child process through a pipe:

* :class:`GpuWorker` (parent side) starts the child, sends tasks, waits with a
  timeout, and replaces the child after a fault, a timeout or a crash; each
  such event costs one worker, never the study.
* :func:`serve` (child side) builds a backend and answers tasks until told to
  stop. :class:`CupyBackend` runs kernels for real; :class:`FakeBackend` needs
  no GPU and lets the whole path be tested on a CPU machine.

Tasks are frozen dataclasses: :class:`KernelTask` (verify and time a compiled
kernel), :class:`CublasTask` (verify and time cuBLAS on the same operands),
:class:`EnergyTask` (power and energy per GEMM over a window of about 1 s) and
:class:`ProbeTask` (simulated hang, crash or fault, for tests).
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import hashlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import time
from collections.abc import Callable
from typing import Protocol

import numpy

from autotune.errors import AutotuneError, FailureClass, NoGpuError
from autotune.gpu.race import RaceStage
from autotune.gpu_specs import FAKE_SUFFIX, device_key, spec_for_device
from autotune.kernel_abi import TENSOR_MAP_BYTES, TensorMapError, TensorMapSpec
from autotune.kernel_abi import argument as map_argument
from autotune.problem import GemmProblem
from autotune.records import EnergyWindow, Environment, Failure, Measurement, Resources, Timing

SMEM_DEFAULT_LIMIT = 48 * 1024  # above this a kernel must opt in to dynamic shared memory
# A CUtensorMap passed by value: CuPy passes a one-element structured array as the struct.
TENSOR_MAP_DTYPE = numpy.dtype({"names": ["opaque"], "formats": [(numpy.uint64, TENSOR_MAP_BYTES // 8)],
                                "itemsize": TENSOR_MAP_BYTES})
FAULT_EXIT_CODE = 70  # the child exits with this after a fault poisoned its context
PROBE_EXIT_CODE = 3  # ProbeTask("exit")
CLOSE_WAIT_S = 5.0  # how long close() lets the child exit on its own
REAP_WAIT_S = 30.0  # how long to wait for a killed child to go away
MESSAGE_LIMIT = 500  # characters kept of an exception message
ENERGY_BATCH_MS = 20.0  # GPU time of one batch (one graph replay) in an energy window
MAX_BATCH_LAUNCHES = 10_000  # launches in one batch at most, however short a launch
ENERGY_SETTLE_S = 0.2  # wait before the idle baseline: NVML still shows earlier work for ~100 ms
ENERGY_WARMUP_S = 1.0  # unmeasured batches before an energy window, so power, clocks and heat settle
IDLE_BASELINE_MAX_AGE_S = 60.0  # the idle baseline is measured again when older than this

# CUDA status codes; the driver's CUresult and the runtime's cudaError_t agree on these.
STICKY_FAULTS = {
    700: "illegal address",
    702: "launch timeout",
    710: "device-side assert",
    714: "hardware stack error",
    715: "illegal instruction",
    716: "misaligned address",
    717: "invalid address space",
    718: "invalid program counter",
    719: "launch failed",
    999: "unknown error",
}
CONTEXT_LOST = {
    3: "not initialized",
    4: "deinitialized",
    46: "device unavailable",
    201: "invalid context",
    709: "context is destroyed",
}


class WorkerStartError(AutotuneError):
    """The GPU worker process could not be started (other than for lack of a GPU)."""


class GpuUnavailable(Exception):
    """Raised in the child by a backend that finds no usable GPU."""


# -- tasks ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class KernelTask:
    """Verify and time one compiled kernel.

    The kernel's signature is ``(const T* A, const T* B, T* C, int M, int N,
    int K, float alpha, float beta)``, row-major, launched as given, followed
    by its TMA tensor maps (if any), encoded for the launch's operands.
    """

    cubin: bytes
    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_smem: int
    problem: GemmProblem
    seed: int
    warmup: int
    repeats: int
    resources: Resources | None = None
    tensor_maps: tuple[TensorMapSpec, ...] = ()
    race: tuple[RaceStage, ...] = ()  # stages at which timing stops for a clearly slower kernel


@dataclasses.dataclass(frozen=True)
class CublasTask:
    """Verify and time cuBLAS on the problem's operands, the same way as kernels."""

    problem: GemmProblem
    seed: int
    warmup: int
    repeats: int


@dataclasses.dataclass(frozen=True)
class EnergyTask:
    """Power and energy per GEMM over a window of back-to-back runs (not verified again).

    ``kernel`` None means cuBLAS; otherwise the kernel's cubin, entry and launch
    shape are used on this task's problem and seed (its warmup and repeats are not).
    """

    kernel: KernelTask | None
    problem: GemmProblem
    seed: int
    seconds: float = 1.0


PROBE_ACTIONS = ("ok", "sleep", "exit", "fault", "raise")


@dataclasses.dataclass(frozen=True)
class ProbeTask:
    """A test task on every backend: "ok", "sleep" (a hang), "exit" (a crash),
    "fault" (a poisoned context: answers, then the child exits) or "raise"."""

    action: str
    seconds: float = 0.0

    def __post_init__(self):
        if self.action not in PROBE_ACTIONS:
            raise ValueError(f"ProbeTask action {self.action!r}: expected one of {', '.join(PROBE_ACTIONS)}")


Task = KernelTask | CublasTask | EnergyTask | ProbeTask
Result = Measurement | EnergyWindow | Failure


def verification_problems(problem: GemmProblem) -> tuple[GemmProblem, GemmProblem]:
    """The problem as given, then with the other kind of beta.

    beta 0 is checked again with beta 0.5 (C must be read), and any other beta
    again with beta 0 (C must not be read: it is NaN-poisoned).
    """
    other_beta = 0.5 if problem.beta == 0 else 0.0
    return problem, dataclasses.replace(problem, beta=other_beta)


def classify_cuda_status(status: int) -> tuple[str, bool]:
    """``(failure class, worker still usable)`` for a CUDA driver/runtime status code."""
    if status in STICKY_FAULTS:
        return FailureClass.FAULT.value, False
    if status in CONTEXT_LOST:
        return FailureClass.CRASH.value, False
    return FailureClass.LAUNCH_ERROR.value, True


def describe_exception(exc: BaseException) -> str:
    """``"TypeName: message"`` on one line, at most MESSAGE_LIMIT characters."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."


# -- backends (child side) -------------------------------------------------------------


class Backend(Protocol):
    """What :func:`serve` needs from a backend; built in the child by a factory."""

    def hello(self) -> dict:
        """Device description: name, arch, driver, cuda_runtime, nvrtc, cupy, properties."""

    def run(self, task: Task) -> Result:
        """Run a KernelTask, CublasTask or EnergyTask; may raise, see :meth:`classify`."""

    def classify(self, exc: Exception) -> tuple[str, bool]:
        """``(failure class, worker still usable)`` for an exception from :meth:`run`."""


class FakeBackend:
    """No GPU: a made-up H200 answers hello; kernels and cuBLAS "run" at fixed rates.

    Each kernel's rate is fixed by its name, between 30% and 100% of KERNEL_TFLOPS,
    so a search has something to find and racing has slower kernels to stop.
    """

    KERNEL_TFLOPS = 10.0
    CUBLAS_TFLOPS = 40.0
    POWER_W = 600.0
    IDLE_POWER_W = 120.0

    def __init__(self, device: int = 0):
        self.device = device

    def hello(self) -> dict:
        """A made-up H200, marked ``simulated`` so its results are stored apart from a real one's."""
        return {
            "simulated": True,
            "name": "NVIDIA H200 (fake)",
            "arch": "sm_90",
            "driver": "0.0 (fake)",
            "cuda_runtime": "0.0",
            "nvrtc": "0.0",
            "cupy": "none",
            "properties": {
                "l2_bytes": 60 * 1024 * 1024,
                "sms": 132,
                "smem_per_block": SMEM_DEFAULT_LIMIT,
                "smem_per_block_optin": 232448,
                "smem_per_sm": 233472,
                "regs_per_block": 65536,
                "regs_per_sm": 65536,
                "max_threads_per_block": 1024,
                "max_threads_per_sm": 2048,
                "total_memory_bytes": 141 * 1024**3,
                "pci_bus_id": "fake",
            },
        }

    def run(self, task: Task) -> Result:
        if isinstance(task, KernelTask):
            measurement = _fixed_rate_measurement(task.problem, self.kernel_tflops(task.entry), task.resources)
            ms = measurement.timing.median_ms
            lost = [stage.launches for stage in task.race if ms > stage.limit_ms and stage.launches < task.repeats]
            samples = (ms,) * min(lost, default=task.repeats)  # as on the GPU: the first stage it loses
            return dataclasses.replace(measurement, timing=Timing(ms, ms, ms, ms, ms, samples))
        if isinstance(task, CublasTask):
            return _fixed_rate_measurement(task.problem, self.CUBLAS_TFLOPS, None)
        if isinstance(task, EnergyTask):
            return self._energy_window(task)
        raise TypeError(f"FakeBackend cannot run {type(task).__name__}")

    @classmethod
    def kernel_tflops(cls, entry: str) -> float:
        """The made-up rate of the kernel called ``entry``."""
        fraction = int.from_bytes(hashlib.sha256(entry.encode()).digest()[:4], "little") / 2**32
        return cls.KERNEL_TFLOPS * (0.3 + 0.7 * fraction)

    def classify(self, exc: Exception) -> tuple[str, bool]:
        return FailureClass.CRASH.value, True

    def _energy_window(self, task: EnergyTask) -> EnergyWindow:
        """A made-up window at POWER_W: fixed rate, 10 ms samples, no waiting."""
        tflops = self.CUBLAS_TFLOPS if task.kernel is None else self.kernel_tflops(task.kernel.entry)
        launches = max(1, round(task.seconds * tflops * 1e12 / task.problem.flops))
        joules = self.POWER_W * task.seconds
        return EnergyWindow(
            seconds=task.seconds, launches=launches, mean_power_w=self.POWER_W, energy_counter_j=joules,
            energy_per_gemm_j=joules / launches, energy_per_gemm_counter_j=joules / launches,
            idle_power_w=self.IDLE_POWER_W, sm_clock_mhz_mean=1980.0, sm_clock_mhz_min=1980,
            temperature_c_max=50, throttle_reasons=0, throttled=False, samples=max(1, round(task.seconds / 0.01)),
        )  # fmt: skip


class UnavailableBackend:
    """A backend that always finds no GPU (tests the no-GPU path anywhere)."""

    def __init__(self, device: int = 0):
        raise GpuUnavailable(f"the 'none' backend has no device {device}")


def _fixed_rate_measurement(problem: GemmProblem, tflops: float, resources: Resources | None) -> Measurement:
    ms = problem.flops / (tflops * 1e12) * 1e3
    timing = Timing(ms, ms, ms, ms, ms, (ms,))
    return Measurement(timing=timing, tflops=problem.tflops(ms), max_error=0.0, resources=resources)


class CupyBackend:
    """CuPy on one CUDA device: load cubins, verify against cuBLAS, time, read NVML."""

    def __init__(self, device: int = 0):
        self.cupy = _import_cupy()
        _select_device(self.cupy, device)
        from autotune.gpu import measure

        self.measure = measure
        self.device = device
        self.stream = self.cupy.cuda.Stream(non_blocking=True)
        self.stream.use()
        self.cache = measure.OperandCache()
        self._power = None  # autotune.gpu.power.NvmlPower, opened by the first EnergyTask
        self._idle: tuple[float, float] | None = None  # (time.monotonic(), idle watts) of the last baseline

    def hello(self) -> dict:
        runtime = self.cupy.cuda.runtime
        props = runtime.getDeviceProperties(self.device)
        name = props["name"]
        return {
            "name": name.decode() if isinstance(name, bytes) else str(name),
            "arch": f"sm_{props['major']}{props['minor']}",
            "driver": self.measure.nvml_driver_version() or _cuda_version(runtime.driverGetVersion()),
            "cuda_runtime": _cuda_version(runtime.runtimeGetVersion()),
            "nvrtc": _nvrtc_version(),
            "cupy": self.cupy.__version__,
            "properties": _device_properties(props, self.cupy.cuda.Device(self.device).pci_bus_id),
        }

    def run(self, task: Task) -> Result:
        if isinstance(task, KernelTask):
            return self._run_kernel(task)
        if isinstance(task, CublasTask):
            return self._run_cublas(task)
        if isinstance(task, EnergyTask):
            return self._run_energy(task)
        raise TypeError(f"CupyBackend cannot run {type(task).__name__}")

    def classify(self, exc: Exception) -> tuple[str, bool]:
        if isinstance(exc, TensorMapError):
            return FailureClass.LAUNCH_ERROR.value, True
        status = self._cuda_status(exc)
        verdict = classify_cuda_status(status) if status is not None else (FailureClass.CRASH.value, True)
        if verdict[1]:
            return self._context_verdict() or verdict
        return verdict

    # -- kernels ---------------------------------------------------------------------

    def _run_kernel(self, task: KernelTask) -> Result:
        launch, operands = self._kernel_launch(task, task.problem, task.seed)
        worst = 0.0
        for problem in verification_problems(task.problem):
            ref, bound = self.cache.reference(problem, task.seed)
            check = self.measure.check(functools.partial(launch, problem), problem, operands, ref, bound)
            if not check.passed:
                return Failure(FailureClass.WRONG_ANSWER.value, f"{check.describe()} ({_scalars(problem)})")
            worst = max(worst, check.max_error)
        timing = self.measure.time_launches(
            functools.partial(launch, task.problem, operands.out), warmup=task.warmup, repeats=task.repeats,
            race=task.race,
        )
        return self._measurement(task.problem, timing, worst, task.resources)

    def _kernel_launch(self, task: KernelTask, problem: GemmProblem, seed: int):
        """``(launch, operands)``: the loaded kernel on the operands of ``problem`` and ``seed``."""
        function = self._load(task)
        operands = self.cache.operands(problem, seed)
        return _KernelLaunch(function, task, operands, self.stream), operands

    def _load(self, task: KernelTask):
        module = self.cupy.cuda.function.Module()
        module.load(task.cubin)
        function = module.get_function(task.entry)  # keeps the module loaded
        if task.dynamic_smem > SMEM_DEFAULT_LIMIT:
            driver = self.cupy.cuda.driver
            driver.funcSetAttribute(
                function.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, task.dynamic_smem
            )
        return function

    # -- cuBLAS ----------------------------------------------------------------------

    def _run_cublas(self, task: CublasTask) -> Result:
        problem = task.problem
        operands = self.cache.operands(problem, task.seed)
        ref, bound = self.cache.reference(problem, task.seed)

        def launch(out):
            self.measure.CublasGemm(operands.a, operands.b, out, problem.alpha, problem.beta)()

        check = self.measure.check(launch, problem, operands, ref, bound)
        if not check.passed:  # the bound is too tight if cuBLAS itself misses it
            return Failure(FailureClass.WRONG_ANSWER.value, f"cuBLAS: {check.describe()} ({_scalars(problem)})")
        timing = self.measure.time_launches(self._cublas_gemm(problem, task.seed), warmup=task.warmup,
                                            repeats=task.repeats)  # fmt: skip
        return self._measurement(problem, timing, check.max_error, None)

    def _cublas_gemm(self, problem: GemmProblem, seed: int):
        """One cuBLAS GEMM of ``problem`` into the cached operands' output buffer."""
        operands = self.cache.operands(problem, seed)
        return self.measure.CublasGemm(operands.a, operands.b, operands.out, problem.alpha, problem.beta)

    # -- energy ----------------------------------------------------------------------

    def _run_energy(self, task: EnergyTask) -> Result:
        """Idle baseline, then a window of ~20 ms batches: graph replays for a kernel, plain calls for cuBLAS."""
        from autotune.gpu import power

        if task.kernel is None:
            launch = self._cublas_gemm(task.problem, task.seed)
        else:
            kernel_launch, operands = self._kernel_launch(task.kernel, task.problem, task.seed)
            launch = functools.partial(kernel_launch, task.problem, operands.out)
        meter = self._power_meter()
        self.stream.synchronize()
        idle_w = self._idle_baseline(meter)
        count = launches_per_batch(self._launch_ms(launch))
        run_batch = _loop_batch(launch, count) if task.kernel is None else self._graph_batch(launch, count)
        return power.measure_window(run_batch, meter, task.seconds, synchronize=self.stream.synchronize,
                                    idle_w=idle_w, warmup_s=ENERGY_WARMUP_S)  # fmt: skip

    def _idle_baseline(self, meter) -> float:
        """Idle watts, measured again only when the last baseline is over a minute old: each baseline
        lets the GPU cool, and the windows that follow would start from a different state."""
        from autotune.gpu import power

        now = time.monotonic()
        if self._idle is None or now - self._idle[0] > IDLE_BASELINE_MAX_AGE_S:
            self._idle = (now, power.idle_power(meter, settle_s=ENERGY_SETTLE_S))
        return self._idle[1]

    def _launch_ms(self, launch: Callable[[], None], repeats: int = 3) -> float:
        """Mean time of one launch after a warm-up launch, in ms."""
        start, end = self.cupy.cuda.Event(), self.cupy.cuda.Event()
        launch()
        start.record(self.stream)
        for _ in range(repeats):
            launch()
        end.record(self.stream)
        end.synchronize()
        return self.cupy.cuda.get_elapsed_time(start, end) / repeats

    def _graph_batch(self, launch: Callable[[], None], count: int) -> Callable[[], int]:
        """``run_batch`` replaying a CUDA graph of ``count`` launches; replayed once here to warm it."""
        graph = capture_graph(self.stream, launch, count)
        graph.upload(self.stream)
        graph.launch(self.stream)

        def run_batch() -> int:
            graph.launch(self.stream)
            return count

        return run_batch

    def _power_meter(self):
        if self._power is None:
            from autotune.gpu.power import NvmlPower

            self._power = NvmlPower(self.cupy.cuda.Device(self.device).pci_bus_id)
        return self._power

    # -- shared ----------------------------------------------------------------------

    def _measurement(self, problem: GemmProblem, timing: Timing, max_error: float, resources) -> Measurement:
        return Measurement(
            timing=timing,
            tflops=problem.tflops(timing.median_ms),
            max_error=max_error,
            resources=resources,
            **self.measure.nvml_snapshot(),
        )

    def _cuda_status(self, exc: Exception) -> int | None:
        cuda_errors = (self.cupy.cuda.driver.CUDADriverError, self.cupy.cuda.runtime.CUDARuntimeError)
        return getattr(exc, "status", None) if isinstance(exc, cuda_errors) else None

    def _context_verdict(self) -> tuple[str, bool] | None:
        """None if the context still works, else the verdict for the error it now gives."""
        try:
            self.cupy.cuda.runtime.deviceSynchronize()
        except self.cupy.cuda.runtime.CUDARuntimeError as exc:
            return classify_cuda_status(exc.status)
        return None


class _KernelLaunch:
    """``launch(problem, out)``: one launch of a loaded kernel on fixed A and B.

    The kernel's tensor maps (if any) follow the GEMM arguments; they are encoded
    for the first launch and again only when the problem or the output changes.
    """

    def __init__(self, function, task: KernelTask, operands, stream):
        self.function, self.task, self.operands, self.stream = function, task, operands, stream
        self._maps: tuple = ()
        self._mapped: tuple | None = None  # (m, n, k, output address) the maps describe

    def __call__(self, problem: GemmProblem, out) -> None:
        if self.task.tensor_maps:
            mapped = (problem.m, problem.n, problem.k, out.data.ptr)
            if mapped != self._mapped:
                self._maps = tuple(self._encode(spec, problem, out) for spec in self.task.tensor_maps)
                self._mapped = mapped
        args = (
            self.operands.a, self.operands.b, out,
            numpy.int32(problem.m), numpy.int32(problem.n), numpy.int32(problem.k),
            numpy.float32(problem.alpha), numpy.float32(problem.beta), *self._maps,
        )  # fmt: skip
        self.function(self.task.grid, self.task.block, args, shared_mem=self.task.dynamic_smem, stream=self.stream)

    def _encode(self, spec, problem: GemmProblem, out):
        """The map of ``spec``'s operand as a 128-byte kernel argument; zeros for an operand TMA cannot
        address (the kernel checks the same and copies element-wise)."""
        array = {"A": self.operands.a, "B": self.operands.b, "C": out}[spec.operand]
        encoded = map_argument(spec, array.data.ptr, problem.m, problem.n, problem.k, array.itemsize)
        return numpy.frombuffer(encoded, dtype=TENSOR_MAP_DTYPE).copy()


def launches_per_batch(launch_ms: float, batch_ms: float = ENERGY_BATCH_MS) -> int:
    """How many launches take about ``batch_ms``: at least 1, at most MAX_BATCH_LAUNCHES."""
    if launch_ms <= 0:
        return MAX_BATCH_LAUNCHES
    return max(1, min(MAX_BATCH_LAUNCHES, round(batch_ms / launch_ms)))


def capture_graph(stream, launch: Callable[[], None], count: int):
    """A CUDA graph of ``count`` calls of ``launch()`` captured on ``stream`` (the current stream)."""
    stream.begin_capture()
    try:
        for _ in range(count):
            launch()
    except BaseException:
        try:
            stream.end_capture()  # leave capture mode; the launch's error is the one to report
        except Exception:
            pass
        raise
    return stream.end_capture()


def _loop_batch(launch: Callable[[], None], count: int) -> Callable[[], int]:
    """``run_batch`` enqueuing ``count`` plain calls (cuBLAS cannot be graph-captured here)."""

    def run_batch() -> int:
        for _ in range(count):
            launch()
        return count

    return run_batch


def _import_cupy():
    try:
        import cupy
    except (ImportError, RuntimeError, OSError) as exc:
        raise GpuUnavailable(f"CuPy cannot be imported: {describe_exception(exc)}") from exc
    return cupy


def _select_device(cupy, device: int) -> None:
    """Make ``device`` current and create its context, or raise GpuUnavailable."""
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except (RuntimeError, OSError) as exc:  # CUDARuntimeError is a RuntimeError; so is a missing libcuda
        raise GpuUnavailable(describe_exception(exc)) from exc
    if count == 0:
        raise GpuUnavailable("the CUDA runtime reports 0 devices")
    if not 0 <= device < count:
        raise GpuUnavailable(f"device {device} was asked for but {count} are present")
    try:
        cupy.cuda.Device(device).use()
        cupy.zeros(1, dtype=cupy.float32)  # creates the context now: a broken GPU shows at start
        cupy.cuda.runtime.deviceSynchronize()
    except RuntimeError as exc:
        raise GpuUnavailable(describe_exception(exc)) from exc


def _cuda_version(version: int) -> str:
    """13000 -> "13.0"."""
    return f"{version // 1000}.{version % 1000 // 10}"


def _nvrtc_version() -> str:
    try:
        from cupy.cuda import nvrtc

        major, minor = nvrtc.getVersion()
    except (ImportError, RuntimeError, OSError) as exc:
        return f"unavailable ({describe_exception(exc)[:80]})"
    return f"{major}.{minor}"


def _device_properties(props: dict, pci_bus_id: str) -> dict:
    return {
        "l2_bytes": int(props.get("l2CacheSize", 0)),
        "sms": int(props.get("multiProcessorCount", 0)),
        "smem_per_block": int(props.get("sharedMemPerBlock", 0)),
        "smem_per_block_optin": int(props.get("sharedMemPerBlockOptin", 0)),
        "smem_per_sm": int(props.get("sharedMemPerMultiprocessor", 0)),
        "regs_per_block": int(props.get("regsPerBlock", 0)),
        "regs_per_sm": int(props.get("regsPerMultiprocessor", 0)),
        "max_threads_per_block": int(props.get("maxThreadsPerBlock", 0)),
        "max_threads_per_sm": int(props.get("maxThreadsPerMultiProcessor", 0)),
        "total_memory_bytes": int(props.get("totalGlobalMem", 0)),
        "pci_bus_id": pci_bus_id,
    }


def _scalars(problem: GemmProblem) -> str:
    return f"alpha={problem.alpha:g}, beta={problem.beta:g}"


BACKENDS: dict[str, Callable[[int], Backend]] = {
    "cupy": CupyBackend,
    "fake": FakeBackend,
    "none": UnavailableBackend,
}


# -- the child's loop --------------------------------------------------------------------


def serve(conn: multiprocessing.connection.Connection, backend_factory: Callable[[], Backend]) -> None:
    """The child's main loop: say hello, then answer tasks until "close" or EOF.

    Replies are ``("hello", info)``, ``("no_gpu", reason)``, ``("start_error",
    reason)`` and ``("result", result, usable)``; after a result with usable
    False (a poisoned context) the child exits at once.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    backend = _start_backend(conn, backend_factory)
    if backend is None:
        return
    while True:
        try:
            kind, task = conn.recv()
        except EOFError:  # the parent has gone
            return
        if kind == "close":
            gc.freeze()  # the interpreter's teardown then skips walking CuPy's objects: the parent waits for it
            return
        result, usable = _execute(backend, task)
        conn.send(("result", result, usable))
        if not usable:
            conn.close()
            os._exit(FAULT_EXIT_CODE)  # no cleanup: the CUDA context cannot be trusted


def _start_backend(conn, backend_factory) -> Backend | None:
    try:
        backend = backend_factory()
        info = backend.hello()
    except GpuUnavailable as exc:
        conn.send(("no_gpu", " ".join(str(exc).split())))
        return None
    except Exception as exc:  # reported to the parent, which raises WorkerStartError
        conn.send(("start_error", describe_exception(exc)))
        return None
    conn.send(("hello", info))
    return backend


def _execute(backend: Backend, task: Task) -> tuple[Result, bool]:
    try:
        if isinstance(task, ProbeTask):
            return _run_probe(task)
        return backend.run(task), True
    except Exception as exc:  # becomes a Failure; the backend says if the worker survives
        failure_class, usable = backend.classify(exc)
        return Failure(failure_class, describe_exception(exc)), usable


_PROBE_OK = Measurement(timing=Timing(0.0, 0.0, 0.0, 0.0, 0.0, (0.0,)), tflops=0.0, max_error=0.0)


def _run_probe(task: ProbeTask) -> tuple[Result, bool]:
    if task.action == "sleep":
        time.sleep(task.seconds)
    elif task.action == "exit":
        os._exit(PROBE_EXIT_CODE)
    elif task.action == "fault":
        return Failure(FailureClass.FAULT.value, "probe: simulated fault; the worker exits"), False
    elif task.action == "raise":
        raise RuntimeError("probe: simulated exception")
    return _PROBE_OK, True


# -- the parent's handle ------------------------------------------------------------------


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
