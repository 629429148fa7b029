/* What the library keeps per CUDA context: the device checked against the library's architecture,
   the kernels loaded so far (each module is loaded on its kernel's first launch), and the cuBLAS
   handle (made on the first call that runs cuBLAS). */
#ifndef AUTOTUNE_GEMM_CONTEXT_H
#define AUTOTUNE_GEMM_CONTEXT_H

#include <pthread.h>

#include "driver.h"

typedef struct autotune_context autotune_context;

/* A context's cuBLAS handle. Hold `lock` to make it (once: `tried`) and, so that no other thread sets
   its stream in between, while a call sets its stream and enqueues. */
typedef struct autotune_cublas_slot {
    pthread_mutex_t lock;
    int tried;         /* making the handle was tried */
    void* handle;      /* cublasHandle_t; NULL where making it failed */
    int create_status; /* what cublasCreate_v2 returned */
} autotune_cublas_slot;

/* The state of the calling thread's current context, made on its first use; NULL with the thread's
   message set (no current context, a device of another architecture, a failing driver call). */
autotune_context* autotune_gemm_context(const autotune_driver* driver, autotune_status* status);

/* The device ordinal of the context. */
int autotune_gemm_context_device(const autotune_context* context);

/* The context's cuBLAS handle slot. */
autotune_cublas_slot* autotune_gemm_context_cublas(autotune_context* context);

/* The device address of at least `bytes` of workspace for kernels launched on `stream` in the context: one
   buffer per stream, shared by the kernels launched on it (each launch leaves it zeroed), allocated on the
   stream's first call of a kernel that takes one (and again, larger, where a kernel needs more) and zeroed
   on the stream; kept for the life of the process. 0 with the thread's message set where the driver fails. */
CUdeviceptr autotune_gemm_workspace(const autotune_driver* driver, autotune_context* context, CUstream stream,
                                    size_t bytes, autotune_status* status);

/* The loaded function of kernel `index` (loaded now if it is not yet, with its shared-memory opt-in);
   NULL with the thread's message set where the driver refuses. */
CUfunction autotune_gemm_function(const autotune_driver* driver, autotune_context* context, int index,
                                  autotune_status* status);

#endif
