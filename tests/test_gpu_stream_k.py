"""hgemm_wgmma's stream-K kernels launched again and again on one stream, through one workspace, as the runtime
launches them: every result right, shape after shape, and the workspace's flags all zero after each launch (what
the kernel ABI promises the next launch)."""

import pytest

from autotune.space.family import load_space

pytestmark = pytest.mark.gpu

STREAM_K = {"WG_M": 2, "WG_N": 1, "M_TILES": 1, "WN": 256, "BK": 64, "STAGES": 4, "WAIT_DEPTH": 1, "SMEM_OPT_IN": 1,
            "GROUP_M": 8, "SMEM_EPILOGUE": 1, "SPLIT_K": 1, "PRODUCER": 1, "TMA": 1, "CLUSTER_M": 1, "CLUSTER_N": 1,
            "PERSISTENT": 1, "SETMAXNREG": 1, "STREAM_K": 1}
# Tiles of 128x256 on 132 SMs: under one wave (each tile shared by a few blocks), between one and two, several
# whole waves and a part (stream-K for the last ones), whole waves only (none shared), a tile shared by a dozen
# blocks, K not a multiple of the k-tile, and operands TMA cannot address (K odd).
SHAPES = [(2048, 2048, 2048), (1000, 3000, 1100), (4096, 4096, 1024), (4224, 2048, 512), (300, 500, 4000),
          (2049, 2050, 129), (777, 1333, 555)]
ROUNDS = 3


def test_stream_k_launches_share_one_workspace_and_leave_its_flags_zero():
    cupy = pytest.importorskip("cupy")
    from autotune.gpu.launch import KernelLaunch, WorkspacePool, load_kernel
    from autotune.gpu_specs import spec_for_device
    from autotune.kernel.build import build_kernel
    from autotune.problem import GemmProblem

    props = cupy.cuda.runtime.getDeviceProperties(0)
    gpu = spec_for_device(props["name"].decode() if isinstance(props["name"], bytes) else props["name"])
    if gpu is None or gpu.arch != 90:
        pytest.skip("stream-K is built into hgemm_wgmma, which needs sm_90a (Hopper)")
    space = load_space("hgemm_wgmma")
    config = space.config(STREAM_K)
    built = build_kernel(space, config, gpu)
    assert not hasattr(built, "failure_class"), built
    workspace = built.launch.workspace
    assert workspace == 4096 + gpu.sms * 128 * 256 * 4
    function = load_kernel(cupy, built.cubin, built.entry, built.launch.dynamic_smem)
    pool = WorkspacePool(cupy)
    stream = cupy.cuda.Stream(non_blocking=True)
    stream.use()  # as the GPU worker does: operands, NaN fills and checks on the launches' stream
    rng = cupy.random.default_rng(3)
    wrong = []
    for m, n, k in SHAPES * ROUNDS:
        a = rng.standard_normal((m, k), dtype=cupy.float32).astype(cupy.float16)
        b = rng.standard_normal((k, n), dtype=cupy.float32).astype(cupy.float16)
        c = cupy.full((m, n), cupy.nan, dtype=cupy.float16)
        grid = built.launch.grid_for(m, n, k)
        launch = KernelLaunch(cupy, function, grid, built.launch.block, built.launch.dynamic_smem, (m, n, k),
                              built.launch.tensor_maps, False, workspace, pool)
        launch(stream.ptr, a.data.ptr, b.data.ptr, c.data.ptr, 2, 1.0, 0.0)
        assert cupy.cuda.get_current_stream().ptr == stream.ptr  # the workspace's allocation leaves it so
        stream.synchronize()
        expected = a.astype(cupy.float32) @ b.astype(cupy.float32)
        error = float(cupy.abs(c.astype(cupy.float32) - expected).max())
        bound = 2e-3 * k ** 0.5 * 4 + 0.05  # fp16 rounding of the output and fp32 sums of k terms
        if not error <= bound:
            wrong.append(f"{m}x{n}x{k} grid {grid}: max error {error} > {bound}")
        flags = cupy.ndarray((1024,), cupy.uint32, cupy.cuda.MemoryPointer(
            cupy.cuda.UnownedMemory(pool.address(stream.ptr, workspace), 4096, pool), 0))
        if int(cupy.count_nonzero(flags)):
            wrong.append(f"{m}x{n}x{k}: {int(cupy.count_nonzero(flags))} flags left set")
    cupy.cuda.Stream.null.use()
    assert not wrong, "\n".join(wrong)
