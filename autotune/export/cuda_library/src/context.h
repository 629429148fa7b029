/* What the library keeps per CUDA context: the device checked against the library's architecture,
   and the kernels loaded so far (each module is loaded on its kernel's first launch). */
#ifndef AUTOTUNE_GEMM_CONTEXT_H
#define AUTOTUNE_GEMM_CONTEXT_H

#include "driver.h"

typedef struct autotune_context autotune_context;

/* The state of the calling thread's current context, made on its first use; NULL with the thread's
   message set (no current context, a device of another architecture, a failing driver call). */
autotune_context* autotune_gemm_context(const autotune_driver* driver, autotune_status* status);

/* The device ordinal of the context. */
int autotune_gemm_context_device(const autotune_context* context);

/* The loaded function of kernel `index` (loaded now if it is not yet, with its shared-memory opt-in);
   NULL with the thread's message set where the driver refuses. */
CUfunction autotune_gemm_function(const autotune_driver* driver, autotune_context* context, int index,
                                  autotune_status* status);

#endif
