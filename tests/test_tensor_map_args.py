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
