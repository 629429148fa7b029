"""Call tuned kernels from a program: ``autotune.gemm(a, b)``.

The runtime picks, for the attached GPU and the call's shape and dtype, the
kernel the selection table names (from a loaded table file, the user's results
database, or the results that ship with autotune; see :mod:`autotune.runtime.sources`),
builds it once (an exported cubin, or NVRTC into the disk cache), and launches
it on the current stream. What no tuned kernel serves runs on cuBLAS;
:func:`explain` says which happens and why.

Arrays may be CuPy arrays or anything exposing ``__cuda_array_interface__`` or
DLPack; PyTorch CUDA tensors are used in place (no copies), on PyTorch's current
stream, and a result allocated by the runtime is then a tensor too. Host arrays
(NumPy, CPU tensors) are refused with what to pass instead, and so is an ``out``
that shares memory with ``a`` or ``b``.
"""

from __future__ import annotations

import os
import threading
import warnings
from pathlib import Path
from typing import Any

from autotune.errors import InputError
from autotune.runtime.dispatch import ALIGNMENT, Decision, TableChoice, decide, gemm_shape, HostCost, net_of_host_cost
from autotune.runtime.operands import (Operand, flat_rows, overlaps, refuse_autograd, refuse_host_memory,
                                       torch_element, torch_operand)
from autotune.runtime.routes import Route, layout_key, route_for
from autotune.runtime.sources import TABLE_VARIABLE, check_arch, choose_table
from autotune.runtime.tuning import Tuner, TuningSettings, search_commands, searchable
from autotune.select.kernel_table import KernelTable, read_table

PROBED_ROWS = tuple(sorted({2**i for i in range(15)} | {3 * 2**i for i in range(13)}))  # 1, 2, 3, 4, 6, ... 16384

__all__ = ["Runtime", "gemm", "matmul", "explain", "load", "tune_on_miss", "Decision"]


class Runtime:
    """The runtime of one device: its table, its decisions and its loaded kernels.

    Args:
        device: a :class:`~autotune.runtime.devices.CupyDevice` or
            :class:`~autotune.runtime.devices.HostDevice`.
        table: a kernel table to use instead of looking one up (with the text that says where it is from).
    """

    def __init__(self, device, table: tuple[KernelTable, str] | None = None, tuning: TuningSettings | None = None,
                 commands=None):
        self.device = device
        self._loaded = table
        self._choice: TableChoice | None = None
        self._decisions: dict[tuple, Decision] = {}
        self._tensor_decisions: dict[tuple, Decision] = {}  # gemm_tensors' decisions, by the tensors' layout
        self._layer_rows: dict[tuple, int | None] = {}  # kernel_rows' answers
        self._routes: dict[tuple, Route | None] = {}  # gemm's routes, by the layout of the operands (None: none)
        self._lock = threading.Lock()
        self.tuner: Tuner | None = None
        if tuning is not None:
            self.tune(tuning, commands)

    def tune(self, settings: TuningSettings | None, commands=None) -> None:
        """Search the shapes this runtime misses in the background (:mod:`autotune.runtime.tuning`), within
        ``settings``' budget; None stops queueing new ones. ``commands(dtype, shape, layout)`` gives what a
        search runs (:func:`~autotune.runtime.tuning.search_commands` by default)."""
        if settings is None:
            self.tuner = None
            return
        if self._loaded is not None or os.environ.get(TABLE_VARIABLE):
            warnings.warn("autotune: no tuning on a miss with a table file loaded (autotune.load or "
                          f"${TABLE_VARIABLE}): a search's results go to the results database, whose table "
                          "the runtime then does not read", RuntimeWarning, stacklevel=3)
            return
        if commands is None:
            def commands(dtype, shape, layout):
                from autotune.results import default_url

                return search_commands(dtype, shape, self.device.index, default_url(), settings, layout)

        from autotune.kernel.compile import cache_dir

        self.tuner = Tuner(settings, commands, self._table_again, cache_dir() / "tuning" / f"{os.getpid()}.log")

    def _table_again(self, dtype: str, shape: tuple[int, int, int], layout: str) -> None:
        """Build the table again (a search at ``shape`` has added results), load the kernel it picks there,
        and use the table for the calls that follow."""
        choice = choose_table(self.device.name, self.device.arch, self.device.index, self._loaded)
        dtype_table = choice.table.for_layout(layout).get(dtype) if choice.table is not None else None
        if dtype_table is not None and dtype_table.rules and not dtype_table.outside(*shape):
            pick = dtype_table.pick(*shape)
            if not pick.cublas:
                self.device.warm(dtype_table.kernel(pick.kernel), choice.table.arch)
        with self._lock:
            self._choice, self._decisions, self._tensor_decisions, self._layer_rows, self._routes = \
                choice, {}, {}, {}, {}

    @property
    def choice(self) -> TableChoice:
        """The table this device uses and where it came from (found on first use)."""
        if self._choice is None:
            with self._lock:
                if self._choice is None:
                    self._choice = choose_table(self.device.name, self.device.arch, self.device.index, self._loaded)
        return self._choice

    def gemm(self, a: Any, b: Any, out: Any = None, alpha: float = 1.0, beta: float = 0.0) -> Any:
        """``out = alpha * a @ b + beta * out``; a new ``out`` when none is given (then beta must be 0).
        An ``a`` of more than two dimensions (``... x k``) is one ``m x k`` matrix of its rows, and the
        result (or ``out``) is ``... x n``.

        A call whose operands have the layout of an earlier one (CuPy arrays or PyTorch tensors) takes the
        route kept for it (:mod:`autotune.runtime.routes`): about cuBLAS's own host time."""
        batch = _batch_shape(a, out)
        rows, target = flat_rows(a, "a"), flat_rows(out, "out")
        key = layout_key(rows, b, target, self.device.array_type, beta) if out is not None or beta == 0 else None
        route = self._routes.get(key) if key is not None else None
        result = route(rows, b, target, alpha, beta) if route is not None else None
        if result is None:
            result = self._call(rows, b, target, alpha, beta, key)
        if out is not None:
            return out
        return result if batch is None else result.reshape(*batch, result.shape[-1])

    def _call(self, a: Any, b: Any, out: Any, alpha: float, beta: float, key: tuple | None) -> Any:
        """The full path of :meth:`gemm` for matrices ``a`` and ``out`` (or None): every operand described and
        checked, the table asked, the call run; the route of later calls like it kept under ``key``."""
        left, right = self.device.operand(a, "a"), self.device.operand(b, "b")
        refuse_autograd(a, b)
        result, target = self._output(left, right, out, a, beta)
        _refuse_aliasing(left, right, target)
        decision = self._decide(left, right, target, beta)
        stream = self.device.stream(a)
        if decision.kernel is None:
            self.device.cublas(left, right, target, alpha, beta, stream)
        else:
            self.device.launch(decision.kernel, self.choice.table.arch, left, right, target, alpha, beta, stream)
        if key is not None:
            arch = self.choice.table.arch if decision.kernel is not None else None
            self._routes[key] = route_for(self.device, arch, left, right, target, decision)
        return result

    def gemm_tensors(self, a: Any, b: Any, out: Any, alpha: float, beta: float, host: HostCost | None = None) -> None:
        """``out = alpha * a @ b + beta * out`` for :mod:`autotune.torch`: 2-D CUDA tensors of this device,
        ``out`` a new row-major ``m x n`` tensor. A repeated call costs a dictionary lookup
        (:meth:`tensor_decision`) and a launch (a tuned kernel on PyTorch's current stream) or PyTorch's
        ``addmm_`` (where cuBLAS is picked)."""
        decision = self.tensor_decision(a, b, host, beta)
        if decision.kernel is None:
            out.addmm_(a, b, beta=beta, alpha=alpha)
            return
        self.device.launch_pointers(decision.kernel, self.choice.table.arch, decision.shape,
                                    self.device.torch_stream(a.device), a.data_ptr(), b.data_ptr(), out.data_ptr(),
                                    a.element_size(), alpha, beta)

    def tensor_decision(self, a: Any, b: Any, host: HostCost | None = None, beta: float = 0.0) -> Decision:
        """What :meth:`gemm_tensors` runs for 2-D CUDA tensors ``a @ b`` (plus ``beta`` times a C) into a new
        row-major tensor: the decision of :meth:`gemm`, less the kernels not predicted faster once the caller's
        ``host`` time is counted (:func:`~autotune.runtime.dispatch.net_of_host_cost`); kept per shapes, strides,
        dtypes, alignment and whether beta is 0."""
        key = (a.shape, b.shape, a.stride(), b.stride(), a.dtype, b.dtype, a.data_ptr() % ALIGNMENT,
               b.data_ptr() % ALIGNMENT, host, beta != 0)
        decision = self._tensor_decisions.get(key)
        if decision is None:
            left, right = torch_operand(a, "a"), torch_operand(b, "b")
            fresh = Operand(None, (left.shape[0], right.shape[-1]), left.element, True, 0, left.device)
            decision = self._tensor_decisions[key] = net_of_host_cost(self._decide(left, right, fresh, beta), host)
        return decision

    def kernel_rows(self, dtype: Any, n: int, k: int, host: HostCost | None = None,
                    row_major: bool = True) -> int | None:
        """From how many rows of ``x`` :meth:`gemm_tensors` may run a tuned kernel for ``x @ w`` (``w`` a
        ``k x n`` tensor of torch ``dtype``, row-major, or not: the transpose of a row-major ``n x k`` one, as
        nn.Linear's ``weight.T``), judged at PROBED_ROWS (1 to 16384); None: at none.

        With ``host`` counted, a kernel can only win where cuBLAS's predicted time exceeds the host's time to
        the kernel; the answer is the fewest probed rows from which it does at every probe above, where a
        probe at or above it runs a kernel. Below it a layer may call PyTorch's matmul directly, without the
        operator's host time."""
        key = (dtype, n, k, host, row_major)
        if key not in self._layer_rows:
            element = torch_element(dtype)
            decisions = []
            for m in PROBED_ROWS:
                operands = [Operand(None, shape, element, rows_first, 0, self.device.index, not rows_first)
                            for shape, rows_first in (((m, k), True), ((k, n), row_major), ((m, n), True))]
                decisions.append((m, net_of_host_cost(decide(self.choice, *operands), host)))
            rows = None
            for m, decision in reversed(decisions):
                pick = decision.pick
                if host is not None and pick is not None and pick.cublas_ms is not None \
                        and pick.cublas_ms <= host.kernel_ms:
                    break
                rows = m
            kernels = [m for m, decision in decisions if decision.kernel is not None and rows is not None and m >= rows]
            self._layer_rows[key] = rows if kernels else None
        return self._layer_rows[key]

    def explain(self, a: Any, b: Any, out: Any = None, beta: float = 0.0) -> Decision:
        """What :meth:`gemm` would run for these operands (and ``beta``), and why."""
        a, out = flat_rows(a, "a"), flat_rows(out, "out")
        left, right = self.device.operand(a, "a"), self.device.operand(b, "b")
        target = self.device.operand(out, "out") if out is not None else _like(left, right)
        _refuse_aliasing(left, right, target)
        return self._decide(left, right, target, beta)

    def _output(self, left: Operand, right: Operand, out: Any, original: Any, beta: float) -> tuple[Any, Operand]:
        if out is not None:
            return out, self.device.operand(out, "out")
        if beta != 0:
            raise InputError("beta", beta, "0 when no out is given (beta scales the values already in out)")
        m, n, _ = gemm_shape(left, right, None)
        result, view = self.device.empty(m, n, left, original)
        return result, self.device.operand(view, "out")

    def _decide(self, a: Operand, b: Operand, c: Operand, beta: float = 0.0) -> Decision:
        key = (a.shape, b.shape, c.shape, a.element, b.element, c.element, a.row_major, b.row_major,
               b.column_major, c.row_major, a.pointer % 16, b.pointer % 16, c.pointer % 16, a.device, b.device, c.device,
               beta != 0)
        decision = self._decisions.get(key)
        if decision is None:
            decision = self._decisions[key] = decide(self.choice, a, b, c, beta)
            tuner = self.tuner
            if decision.missed and tuner is not None and searchable(decision.dtype, decision.layout):
                tuner.request(decision.dtype, decision.shape, decision.layout)
        return decision


def _batch_shape(a: Any, out: Any) -> tuple[int, ...] | None:
    """The dimensions of an ``a`` of more than two but its last (None for a matrix, or where ``out`` is given)."""
    shape = getattr(a, "shape", ())
    return tuple(shape[:-1]) if len(shape) > 2 and out is None else None


def _refuse_aliasing(a: Operand, b: Operand, out: Operand) -> None:
    """InputError for an ``out`` whose memory overlaps ``a``'s or ``b``'s: a kernel would read what it writes."""
    for name, operand in (("a", a), ("b", b)):
        if overlaps(out, operand):
            raise InputError("out", f"an array sharing memory with {name}",
                             "an array that shares no memory with a or b (a GEMM reads them while it writes out): "
                             "leave out unset for a new array, or copy the operand first")


def _like(a: Operand, b: Operand) -> Operand:
    """The output operand a call without ``out`` would get (aligned, row-major, a's dtype and device)."""
    m, n, _ = gemm_shape(a, b, None)
    return Operand(array=None, shape=(m, n), element=a.element, row_major=True, pointer=0, device=a.device)


# -- the process-wide runtime ---------------------------------------------------------------

_runtimes: dict[int, Runtime] = {}
_loaded_table: tuple[KernelTable, str] | None = None
_lock = threading.Lock()


def load(path: str | Path) -> KernelTable:
    """Use the kernel table in ``path`` (``autotune export --format python``) for every later call.

    Raises:
        TableError: the file is not a kernel table, or one of an unknown schema version.
    """
    global _loaded_table
    table = read_table(Path(path))
    with _lock:
        _loaded_table = (table, str(path))
        for index, runtime in list(_runtimes.items()):
            check_arch(table, str(path), runtime.device.name, runtime.device.arch, index)
        _runtimes.clear()
    return table


_tuning: tuple[TuningSettings | None] | None = None  # set by tune_on_miss; None: as $AUTOTUNE_TUNE says


def tune_on_miss(enabled: bool = True, trials: int = 40, timeout_s: float = 180.0, max_searches: int = 16) -> None:
    """Search, in the background, each shape a call meets that the table was not tuned at (or stop).

    Calls go on as before (the nearest tuned shape's kernel, or cuBLAS) and never wait; each missed shape
    is searched once, one at a time, ``trials`` evaluations or ``timeout_s`` seconds each, at most
    ``max_searches`` per process, into the user's results database, whose table the calls that follow
    use. ``AUTOTUNE_TUNE=1`` does the same with these defaults. See :mod:`autotune.runtime.tuning`.
    """
    global _tuning
    settings = TuningSettings(trials, timeout_s, max_searches) if enabled else None
    with _lock:
        _tuning = (settings,)
        for runtime in _runtimes.values():
            runtime.tune(settings)


def runtime_for(device_index: int) -> Runtime:
    """The runtime of CUDA device ``device_index`` (made on first use)."""
    runtime = _runtimes.get(device_index)
    if runtime is None:
        from autotune.runtime.devices import CupyDevice

        with _lock:
            runtime = _runtimes.get(device_index)
            if runtime is None:
                tuning = _tuning[0] if _tuning is not None else TuningSettings.from_environment()
                runtime = _runtimes[device_index] = Runtime(CupyDevice(device_index), _loaded_table, tuning)
    return runtime


def gemm(a: Any, b: Any, out: Any = None, alpha: float = 1.0, beta: float = 0.0) -> Any:
    """``out = alpha * a @ b + beta * out`` on the GPU that holds ``a``, with the tuned kernel for its shape.

    a (m x k) and b (k x n) are 2-D GPU arrays of one dtype; float32, float16 and (PyTorch) bfloat16
    run tuned kernels where the table has them, anything else runs on cuBLAS.
    Returns ``out``, or a new m x n array (a tensor for PyTorch inputs).

    Raises:
        InputError: the shapes do not chain, the operands are on different GPUs, an
            operand is in host memory (NumPy: pass ``cupy.asarray(x)``), ``out`` shares
            memory with ``a`` or ``b``, or beta is not 0 with no ``out``.
        TableError: the loaded table was built for another GPU architecture.
    """
    return runtime_for(_device_of(a)).gemm(a, b, out, alpha, beta)


def matmul(a: Any, b: Any, out: Any = None) -> Any:
    """``a @ b`` for 2-D operands (:func:`gemm` with alpha 1, beta 0)."""
    return gemm(a, b, out)


def explain(a: Any, b: Any, out: Any = None, beta: float = 0.0) -> Decision:
    """Which kernel :func:`gemm` runs for these operands (and ``beta``), or why cuBLAS does (``str()`` of it reads
    as a sentence)."""
    return runtime_for(_device_of(a)).explain(a, b, out, beta)


def _device_of(value: Any) -> int:
    refuse_host_memory(value, "a")  # NumPy 2's ndarray.device is "cpu": not a device index
    data = getattr(value, "data", None)
    device_id = getattr(data, "device_id", None)  # a CuPy array
    if isinstance(device_id, int):
        return device_id
    device = getattr(value, "device", None)
    index = getattr(device, "index", None)  # a PyTorch tensor
    if isinstance(index, int):
        return index
    from autotune.runtime.operands import as_cupy

    return as_cupy(value, "a").data.device_id
