"""Dev probe: per-iteration producer/consumer clock64 stamps (blocks x=0, y<4) and epilogue stamps."""
import numpy, cupy
from autotune.space import load_space
from autotune.render import render, KernelSource
from autotune.compile import CompilePool, CompileFailure
from autotune.gpus import GPUS
from autotune.problem import GemmProblem
from autotune.study import kernel_task
from autotune.worker import CupyBackend, _KernelLaunch
from limit_probe import BASE, NO_LOAD
from trace_probe import TRACE, END

REC = "(blockIdx.x == 0 && blockIdx.y < 4 && t < 64)"
TR = "tl_buf[blockIdx.y * 256 + {s} * 64 + t] = clock64() - c_start"
TIMELINE = [
    ("__device__ unsigned long long trace_buf[8192];\n",
     "__device__ unsigned long long trace_buf[8192];\n__device__ long long tl_buf[1024];\n__device__ long long ep_buf[8192];\n"),
    ("                    mbarrier_wait(empty + 8 * stage, (use - 1) & 1);\n",
     "                    mbarrier_wait(empty + 8 * stage, (use - 1) & 1);\n                    if " + REC + " " + TR.format(s=0) + ";\n"),
    ("                const unsigned bar = full + 8 * stage, base = smem + stage * STAGE_BYTES;\n",
     "                if " + REC + " " + TR.format(s=1) + ";\n                const unsigned bar = full + 8 * stage, base = smem + stage * STAGE_BYTES;\n"),
    ("        mbarrier_wait(full + 8 * stage, use & 1);\n",
     "        mbarrier_wait(full + 8 * stage, use & 1);\n        if (tid == 0 && " + REC + ") " + TR.format(s=2) + ";\n"),
    ("        if (++stage == STAGES) stage = 0, ++use;\n    }\n    wgmma_wait<0>();\n",
     "        if (tid == 0 && " + REC + ") " + TR.format(s=3) + ";\n        if (++stage == STAGES) stage = 0, ++use;\n    }\n    wgmma_wait<0>();\n"),
]
EP = "if (tid == 0) ep_buf[(blockIdx.y * gridDim.x + blockIdx.x) * 8 + {s}] = clock64() - c_start;"
EPILOGUE = [
    ("        consumer_sync();  // every warpgroup is done reading the stages\n",
     "        " + EP.format(s=0) + "\n        consumer_sync();  // every warpgroup is done reading the stages\n        " + EP.format(s=1) + "\n"),
    ("        fence_proxy_async();  // the tile's writes, visible to the TMA store\n        consumer_sync();\n",
     "        " + EP.format(s=2) + "\n        fence_proxy_async();  // the tile's writes, visible to the TMA store\n        " + EP.format(s=3) + "\n        consumer_sync();\n        " + EP.format(s=4) + "\n"),
    ("            tma_store_drain();\n", "            " + EP.format(s=5) + "\n            tma_store_drain();\n            " + EP.format(s=6) + "\n"),
]
VARIANTS = [
    ("64x128 s9 wd1", dict(STAGES=9, WAIT_DEPTH=1), [], [64, 1024]),
    ("64x128 s8 wd1 no-load", dict(WAIT_DEPTH=1), NO_LOAD, [4096]),
    ("64x128 cm2 s8 wd1 no-load", dict(CLUSTER_M=2, WAIT_DEPTH=1), NO_LOAD, [4096]),
    ("64x128 cm2 s8 wd1", dict(CLUSTER_M=2, WAIT_DEPTH=1), [], [4096]),
]


def buffer(module, name, count):
    g = module.get_global_var(name)
    ptr = g if isinstance(g, int) else g[0]
    return cupy.ndarray((count,), cupy.int64, cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(ptr, count * 8, module), 0))


def main():
    space = load_space("hgemm_wgmma"); gpu = GPUS["h200"]
    space.knobs["STAGES"] = list(range(2, 10))
    jobs = []
    for label, change, edits, ks in VARIANTS:
        config = space.config({**BASE, **change})
        code = render(space, config, gpu).code
        for old, new in list(edits) + TRACE + TIMELINE + EPILOGUE:
            assert code.count(old) == 1, (label, old, code.count(old))
            code = code.replace(old, new, 1)
        code = code[:-2] + END
        source = render(space, config, gpu)
        jobs.append((label, config, ks, KernelSource(source.entry, code, label, source.target)))
    with CompilePool() as pool:
        kernels = list(pool.map(src for *_, src in jobs))
    backend = CupyBackend()
    from autotune import measure
    flush = cupy.empty(measure.default_flush_bytes(), dtype=cupy.uint8)
    for (label, config, ks, _), kernel in zip(jobs, kernels):
        if isinstance(kernel, CompileFailure):
            print(label, "compile failure", kernel.message[:800]); continue
        module = cupy.cuda.function.Module(); module.load(kernel.cubin)
        function = module.get_function(kernel.entry)
        tl, ep = buffer(module, "tl_buf", 1024), buffer(module, "ep_buf", 8192)
        for k in ks:
            p = GemmProblem(1024, 1024, k, "f16")
            task = kernel_task(space, config, kernel, gpu, p, 0, 10, 200)
            cupy.cuda.driver.funcSetAttribute(function.ptr, cupy.cuda.driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, task.dynamic_smem)
            operands = backend.cache.operands(p, 0)
            launch = _KernelLaunch(function, task, operands, backend.stream)
            for rep in range(20):
                launch(p, operands.out)
            for rep in range(3):
                tl.fill(0); ep.fill(0); flush.fill(0)
                launch(p, operands.out)
            backend.stream.synchronize()
            blocks = task.grid[0] * task.grid[1]
            e = ep.get().reshape(-1, 8)[:blocks]
            print(f"== {label} K={k}")
            names = ["epi start", "sync1", "smem written", "fenced", "sync2", "stores issued", "drained"]
            med = numpy.median(e[:, :7], axis=0)
            print("   epilogue median cycles from block start: " + ", ".join(f"{n} {v:.0f}" for n, v in zip(names, med)))
            t = tl.get().reshape(4, 4, 64)
            n = min(64, (k + 63) // 64)
            for b in range(4):
                pe, pp, cf, cr = t[b, 0, :n], t[b, 1, :n], t[b, 2, :n], t[b, 3, :n]
                print(f"   block y={b}: consumer full-wait done per tile (diff): {numpy.diff(cf)[:40].tolist()}")
                print(f"      producer empty-done[t]: {pe[:24].tolist()}")
                print(f"      producer issue[t]:      {pp[:24].tolist()}")
                print(f"      consumer full[t]:       {cf[:24].tolist()}")
                print(f"      consumer release[t]:    {cr[:24].tolist()}")
            print(flush=True)


if __name__ == "__main__":
    main()
