"""Dev probe: per-block SM, start, main-loop end and end times (globaltimer, clock64) of hgemm_wgmma variants."""
import functools, time
import numpy, cupy
from autotune.space import load_space
from autotune.render import render, KernelSource
from autotune.compile import CompilePool, CompileFailure
from autotune.gpus import GPUS
from autotune.problem import GemmProblem
from autotune.study import kernel_task
from autotune.worker import CupyBackend, _KernelLaunch
from autotune.records import Failure
from limit_probe import BASE, NO_LOAD, NO_MMA

TRACE = [
    ("#include <cuda_fp16.h>\n", "#include <cuda_fp16.h>\n__device__ unsigned long long trace_buf[8192];\n"
     "__device__ __forceinline__ unsigned long long gtimer() { unsigned long long t; asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t)); return t; }\n"
     "__device__ __forceinline__ unsigned smid() { unsigned s; asm volatile(\"mov.u32 %0, %%smid;\" : \"=r\"(s)); return s; }\n"),
    ("    const int tid = threadIdx.x;\n", "    const int tid = threadIdx.x;\n    const unsigned long long g_start = gtimer(); const long long c_start = clock64();\n"),
    ("    wgmma_wait<0>();\n", "    wgmma_wait<0>();\n    const unsigned long long g_main = gtimer(); const long long c_main = clock64();\n"),
]
END = ("    if (tid == 0) { const int b = blockIdx.y * gridDim.x + blockIdx.x; unsigned long long* t = trace_buf + 8 * b;"
       " t[0] = smid(); t[1] = g_start; t[2] = g_main; t[3] = gtimer(); t[4] = c_start; t[5] = c_main; t[6] = clock64(); }\n}\n")
VARIANTS = [
    ("64x128 s9 wd1", dict(STAGES=9, WAIT_DEPTH=1), [], [64, 1024, 4096]),
    ("64x128 s9 wd1 no-load", dict(STAGES=9, WAIT_DEPTH=1), NO_LOAD, [4096]),
    ("64x128 cm2 s8 wd1", dict(CLUSTER_M=2, WAIT_DEPTH=1), [], [1024, 4096]),
    ("64x128 cm2 s8 wd1 no-load", dict(CLUSTER_M=2, WAIT_DEPTH=1), NO_LOAD, [4096]),
    ("128x64 cn2 s8 wd1", dict(WG_M=2, WN=64, CLUSTER_N=2, WAIT_DEPTH=1), [], [4096]),
]


def stats(x):
    return f"{numpy.min(x):8.0f} {numpy.median(x):8.0f} {numpy.max(x):8.0f}"


def main():
    space = load_space("hgemm_wgmma"); gpu = GPUS["h200"]
    space.knobs["STAGES"] = list(range(2, 10))
    jobs = []
    for label, change, edits, ks in VARIANTS:
        config = space.config({**BASE, **change})
        source = render(space, config, gpu)
        code = source.code
        for old, new in list(edits) + TRACE:
            assert code.count(old) >= 1, (label, old)
            code = code.replace(old, new, 1)
        assert code.endswith("}\n")
        code = code[:-2] + END
        jobs.append((label, config, ks, KernelSource(source.entry, code, label, source.target)))
    with CompilePool() as pool:
        kernels = list(pool.map(src for *_, src in jobs))
    backend = CupyBackend()
    from autotune import measure
    flush = cupy.empty(measure.default_flush_bytes(), dtype=cupy.uint8)
    for (label, config, ks, _), kernel in zip(jobs, kernels):
        if isinstance(kernel, CompileFailure):
            print(label, "compile failure", kernel.message[:600]); continue
        module = cupy.cuda.function.Module(); module.load(kernel.cubin)
        function = module.get_function(kernel.entry)
        for k in ks:
            p = GemmProblem(1024, 1024, k, "f16")
            task = kernel_task(space, config, kernel, gpu, p, 0, 10, 200)
            if task.dynamic_smem > 48 * 1024:
                cupy.cuda.driver.funcSetAttribute(function.ptr, cupy.cuda.driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, task.dynamic_smem)
            operands = backend.cache.operands(p, 0)
            launch = _KernelLaunch(function, task, operands, backend.stream)
            g = module.get_global_var("trace_buf")
            ptr = g if isinstance(g, int) else g[0]
            trace = cupy.ndarray((8192,), cupy.uint64, cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(ptr, 8192 * 8, module), 0))
            blocks = task.grid[0] * task.grid[1]
            for rep in range(20):
                launch(p, operands.out)
            times = []
            for rep in range(5):
                trace.fill(0)
                flush.fill(0)
                s, e = cupy.cuda.Event(), cupy.cuda.Event()
                s.record(backend.stream); launch(p, operands.out); e.record(backend.stream); e.synchronize()
                times.append(cupy.cuda.get_elapsed_time(s, e) * 1e3)
            t = trace.get().reshape(-1, 8)[:blocks].astype(numpy.int64)
            g0 = t[:, 1].min()
            print(f"== {label} K={k}: event {numpy.median(times):.2f} us (last {times[-1]:.2f}); {blocks} blocks on {len(set(t[:, 0]))} SMs; "
                  f"globaltimer steps seen: {numpy.unique(numpy.diff(numpy.sort(t[:, 1])))[:6]}", flush=True)
            print(f"   start ns      {stats(t[:, 1] - g0)}\n   main end ns   {stats(t[:, 2] - g0)}\n   end ns        {stats(t[:, 3] - g0)}")
            print(f"   main cycles   {stats(t[:, 5] - t[:, 4])}\n   epi cycles    {stats(t[:, 6] - t[:, 5])}")
            order = numpy.argsort(t[:, 2] - t[:, 1])
            print(f"   slowest main (block, sm, start, main ns): {[(int(b), int(t[b, 0]), int(t[b, 1] - g0), int(t[b, 2] - t[b, 1])) for b in order[-4:]]}")
            print(f"   fastest main: {[(int(b), int(t[b, 0]), int(t[b, 1] - g0), int(t[b, 2] - t[b, 1])) for b in order[:4]]}", flush=True)


if __name__ == "__main__":
    main()
