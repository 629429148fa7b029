"""Dev probe: launch TMA configs and cuBLAS twice each at 1024 (for ncu)."""
import numpy as np, cupy as cp
from autotune.space import load_space
from autotune.render import render
from autotune.compile import compile_kernel
from autotune.gpus import GPUS
from autotune.problem import GemmProblem
from autotune import tensor_map

space = load_space("hgemm_wgmma"); gpu = GPUS["h200"]
BASE = dict(WG_M=1, WG_N=1, M_TILES=1, WN=128, BK=64, STAGES=6, WAIT_DEPTH=1, SMEM_OPT_IN=1, GROUP_M=1,
            SMEM_EPILOGUE=1, SPLIT_K=1, PRODUCER=1, TMA=1, CLUSTER_M=1, CLUSTER_N=1)
configs = [dict(BASE, WG_M=2, WN=64), dict(BASE, WG_N=2, WN=64, CLUSTER_M=2, STAGES=8)]
m = n = k = 1024
rng = np.random.default_rng(0)
A = cp.asarray(rng.standard_normal((m, k)).astype(np.float16))
B = cp.asarray(rng.standard_normal((k, n)).astype(np.float16))
C = cp.zeros((m, n), dtype=cp.float16)
p = GemmProblem(m, n, k, "f16")
for params in configs:
    c = space.config(params)
    kern = compile_kernel(render(space, c, gpu))
    mod = cp.cuda.function.Module(); mod.load(kern.cubin); fn = mod.get_function(kern.entry)
    L = space.launch(c, gpu, p)
    for spec in L.tensor_maps:
        arr = A if spec.operand == "A" else B
        rows, cols = spec.shape(m, n, k)
        enc = np.frombuffer(tensor_map.encode(spec, arr.data.ptr, rows, cols, 2), dtype=np.uint8)
        cp.cuda.runtime.memcpy(mod.get_global_var(spec.symbol), enc.ctypes.data, 128, cp.cuda.runtime.memcpyHostToDevice)
    cp.cuda.driver.funcSetAttribute(fn.ptr, cp.cuda.driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, L.dynamic_smem)
    for _ in range(2):
        fn(L.grid, L.block, (A, B, C, np.int32(m), np.int32(n), np.int32(k), np.float32(1), np.float32(0)), shared_mem=L.dynamic_smem)
    cp.cuda.runtime.deviceSynchronize()
    print("launched", c.name, L.grid, L.block)
from autotune.measure import CublasGemm
g = CublasGemm(A, B, C, 1.0, 0.0)
for _ in range(2):
    g()
cp.cuda.runtime.deviceSynchronize()
