"""How the launcher passes tensor maps, checked without a GPU where no encoding is needed."""

import types

import numpy

from autotune.gpu.worker import TENSOR_MAP_DTYPE, _KernelLaunch
from autotune.kernel_abi import TensorMapSpec
from autotune.problem import GemmProblem


def _array(pointer, itemsize=2):
    return types.SimpleNamespace(data=types.SimpleNamespace(ptr=pointer), itemsize=itemsize)


def test_maps_of_operands_tma_cannot_address_are_zeros_and_follow_the_gemm_arguments():
    calls = []
    function = lambda grid, block, args, shared_mem, stream: calls.append(args)  # noqa: E731
    specs = (TensorMapSpec("map_a", "A", (64, 64), 128), TensorMapSpec("map_b", "B", (64, 64), 128))
    task = types.SimpleNamespace(tensor_maps=specs, grid=(1, 1, 1), block=(128, 1, 1), dynamic_smem=0)
    operands = types.SimpleNamespace(a=_array(0x1008), b=_array(0x2008))  # not 16-byte aligned: no encoding
    launch = _KernelLaunch(function, task, operands, stream=None)
    out = _array(0x3000)
    launch(GemmProblem(17, 33, 65, "f16"), out)
    args = calls[0]
    assert len(args) == 8 + 2
    for map_arg in args[8:]:
        assert map_arg.dtype == TENSOR_MAP_DTYPE and map_arg.shape == (1,) and map_arg.nbytes == 128
        assert not map_arg.tobytes().strip(b"\0")
    assert numpy.int32(17) == args[3] and numpy.float32(0.0) == args[7]

