"""How the launcher passes tensor maps, checked without a GPU where no encoding is needed."""

import ctypes
import types

import numpy

from autotune.gpu.launch import KernelLaunch
from autotune.kernel_abi import TENSOR_MAP_BYTES, TensorMapSpec


def _fake_cupy(calls: list) -> types.SimpleNamespace:
    def launch_kernel(function, gx, gy, gz, bx, by, bz, shared_mem, stream, parameters, extra):
        calls.append(parameters)

    return types.SimpleNamespace(cuda=types.SimpleNamespace(driver=types.SimpleNamespace(launchKernel=launch_kernel)))


def test_maps_of_operands_tma_cannot_address_are_zeros_and_follow_the_gemm_arguments():
    calls = []
    specs = (TensorMapSpec("map_a", "A", (64, 64), 128), TensorMapSpec("map_b", "B", (64, 64), 128))
    function = types.SimpleNamespace(ptr=0xF00)
    launch = KernelLaunch(_fake_cupy(calls), function, (1, 1, 1), (128, 1, 1), 0, (17, 33, 65), specs)
    # A and B not 16-byte aligned: no encoding
    launch(0, 0x1008, 0x2008, 0x3000, 2, 1.0, 0.0)
    args = numpy.frombuffer(ctypes.string_at(calls[0], 8 * len(launch.parameters)), numpy.uint64)
    assert len(args) == 8 + 2
    for map_arg in args[8:]:
        assert int(map_arg) % 64 == 0  # CUtensorMap's alignment
        assert not ctypes.string_at(int(map_arg), TENSOR_MAP_BYTES).strip(b"\0")
    assert numpy.frombuffer(ctypes.string_at(int(args[3]), 4), numpy.int32)[0] == 17
    assert numpy.frombuffer(ctypes.string_at(int(args[7]), 4), numpy.float32)[0] == 0.0


def _fake_cupy_with_memory(calls: list, made: list) -> types.SimpleNamespace:
    """A stand-in CuPy whose device allocations are fake addresses; ``made`` notes each (bytes) and each memset
    (address, value, bytes, stream)."""

    class Memory:
        def __init__(self, nbytes):
            made.append(nbytes)
            self.ptr, self.size = 0x10_0000 * len([m for m in made if isinstance(m, int)]), nbytes

    fake = _fake_cupy(calls)
    fake.cuda.memory = types.SimpleNamespace(Memory=Memory)
    fake.cuda.runtime = types.SimpleNamespace(getDevice=lambda: 0,
                                              memsetAsync=lambda ptr, value, size, stream: made.append(
                                                  (ptr, value, size, stream)))
    return fake


def _arguments(address: int, count: int) -> numpy.ndarray:
    return numpy.frombuffer(ctypes.string_at(address, 8 * count), numpy.uint64)


def test_a_workspace_pointer_follows_beta_before_the_maps_one_zeroed_buffer_per_stream():
    from autotune.gpu.launch import WorkspacePool

    calls, made, pointers = [], [], []
    cupy = _fake_cupy_with_memory(calls, made)
    record = cupy.cuda.driver.launchKernel

    def launch_kernel(function, gx, gy, gz, bx, by, bz, shared_mem, stream, parameters, extra):
        pointers.append(int(_arguments(int(_arguments(parameters, 10)[8]), 1)[0]))  # what slot 8 holds now
        record(function, gx, gy, gz, bx, by, bz, shared_mem, stream, parameters, extra)

    cupy.cuda.driver.launchKernel = launch_kernel
    specs = (TensorMapSpec("map_a", "A", (64, 64), 128),)
    pool = WorkspacePool(cupy)
    small = KernelLaunch(cupy, types.SimpleNamespace(ptr=1), (1, 1, 1), (128, 1, 1), 0, (17, 33, 65), specs,
                         workspace=1000, workspaces=pool)
    large = KernelLaunch(cupy, types.SimpleNamespace(ptr=2), (1, 1, 1), (128, 1, 1), 0, (17, 33, 65), specs,
                         workspace=5000, workspaces=pool)
    small(7, 0x1008, 0x2008, 0x3000, 2, 1.0, 0.0)
    small(7, 0x1008, 0x2008, 0x3000, 2, 1.0, 0.0)
    small(9, 0x1008, 0x2008, 0x3000, 2, 1.0, 0.0)
    large(7, 0x1008, 0x2008, 0x3000, 2, 1.0, 0.0)
    small(7, 0x1008, 0x2008, 0x3000, 2, 1.0, 0.0)
    # one buffer for stream 7, one for stream 9, then a larger one for stream 7, each zeroed on its own stream
    assert made == [1000, (0x10_0000, 0, 1000, 7), 1000, (0x20_0000, 0, 1000, 9), 5000, (0x30_0000, 0, 5000, 7)]
    assert pointers == [0x10_0000, 0x10_0000, 0x20_0000, 0x30_0000, 0x30_0000]
    for address in calls:  # the map still comes last, 64-byte aligned
        assert int(_arguments(address, 10)[9]) % 64 == 0
    assert len(small.parameters) == 8 + 1 + 1


def test_a_kernel_without_a_workspace_takes_no_pointer_and_allocates_nothing():
    calls, made = [], []
    launch = KernelLaunch(_fake_cupy_with_memory(calls, made), types.SimpleNamespace(ptr=1), (1, 1, 1), (128, 1, 1),
                          0, (17, 33, 65))
    launch(7, 0x1000, 0x2000, 0x3000, 2, 1.0, 0.0)
    assert len(launch.parameters) == 8 and made == []
