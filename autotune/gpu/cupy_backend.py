"""The real backend: CuPy on one CUDA device loads cubins, verifies them against cuBLAS, times them and
reads NVML. It runs in the worker's child only; CuPy and :mod:`autotune.gpu.measure` are imported when
it is built, never by the parent."""

from __future__ import annotations

import functools

from autotune.errors import FailureClass
from autotune.gpu.backend import GpuUnavailable, classify_cuda_status, describe_exception
from autotune.gpu.energy import EnergyMeter
from autotune.gpu.launch import KernelLaunch, load_kernel
from autotune.gpu.tasks import CublasTask, EnergyTask, KernelTask, Result, Task, verification_problems
from autotune.kernel_abi import TensorMapError
from autotune.problem import GemmProblem
from autotune.records import Failure, Measurement, Timing


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
        self.energy = EnergyMeter(self.cupy, self.stream, device)

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
        timing = self._time(functools.partial(launch, task.problem, operands.out), task, race=task.race)
        return self._measurement(task.problem, timing, worst, task.resources)

    def _time(self, launch, task: KernelTask | CublasTask, race=()) -> Timing:
        """``launch`` timed as ``task`` asks: flushed launches, or samples of ``task.back_to_back`` launches."""
        if task.back_to_back:
            return self.measure.time_back_to_back(launch, task.back_to_back, task.warmup, task.repeats)
        return self.measure.time_launches(launch, warmup=task.warmup, repeats=task.repeats, race=race)

    def _kernel_launch(self, task: KernelTask, problem: GemmProblem, seed: int):
        """``(launch, operands)``: ``launch(problem, out)`` runs the loaded kernel on the A and B of
        ``problem`` and ``seed`` into ``out``, with the alpha and beta of the ``problem`` it is given
        (one of the same size)."""
        kernel = KernelLaunch(self.cupy, self._load(task), task.grid, task.block, task.dynamic_smem,
                              (problem.m, problem.n, problem.k), task.tensor_maps, problem.b_transposed,
                              task.workspace)
        operands = self.cache.operands(problem, seed)

        def launch(problem: GemmProblem, out) -> None:
            a, b = operands.a, operands.b
            kernel(self.stream.ptr, a.data.ptr, b.data.ptr, out.data.ptr, a.itemsize, problem.alpha, problem.beta)

        return launch, operands

    def _load(self, task: KernelTask):
        return load_kernel(self.cupy, task.cubin, task.entry, task.dynamic_smem)

    # -- cuBLAS ----------------------------------------------------------------------

    def _run_cublas(self, task: CublasTask) -> Result:
        problem = task.problem
        operands = self.cache.operands(problem, task.seed)
        ref, bound = self.cache.reference(problem, task.seed)

        def launch(out):
            self.measure.CublasGemm(operands.a, operands.b, out, problem.alpha, problem.beta, problem.element,
                                   problem.b_transposed)()

        check = self.measure.check(launch, problem, operands, ref, bound)
        if not check.passed:  # the bound is too tight if cuBLAS itself misses it
            return Failure(FailureClass.WRONG_ANSWER.value, f"cuBLAS: {check.describe()} ({_scalars(problem)})")
        timing = self._time(self._cublas_gemm(problem, task.seed), task)
        return self._measurement(problem, timing, check.max_error, None)

    def _cublas_gemm(self, problem: GemmProblem, seed: int):
        """One cuBLAS GEMM of ``problem`` into the cached operands' output buffer."""
        operands = self.cache.operands(problem, seed)
        return self.measure.CublasGemm(operands.a, operands.b, operands.out, problem.alpha, problem.beta,
                                       problem.element, problem.b_transposed)

    # -- energy ----------------------------------------------------------------------

    def _run_energy(self, task: EnergyTask) -> Result:
        """A window of cuBLAS or of the task's kernel (see :mod:`autotune.gpu.energy`)."""
        if task.kernel is None:
            return self.energy.window(self._cublas_gemm(task.problem, task.seed), task.seconds, graph=False)
        kernel_launch, operands = self._kernel_launch(task.kernel, task.problem, task.seed)
        launch = functools.partial(kernel_launch, task.problem, operands.out)
        return self.energy.window(launch, task.seconds, graph=True)

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
