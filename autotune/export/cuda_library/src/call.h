/* One GEMM call as the caller made it, its checks, and its launch. */
#ifndef AUTOTUNE_GEMM_CALL_H
#define AUTOTUNE_GEMM_CALL_H

#include "context.h"
#include "driver.h"
#include "table.h"

typedef struct autotune_call {
    const autotune_dtype_table* table;
    int m, n, k;
    float alpha, beta;
    const void* a;
    const void* b;
    void* c;
    CUstream stream;
} autotune_call;

/* Sizes of at least 1 whose operands have at most 2^31 - 1 elements. */
autotune_status autotune_gemm_check_sizes(const autotune_call* call);

/* The sizes, then null pointers and alignment, checked without the driver. */
autotune_status autotune_gemm_check_arguments(const autotune_call* call);

/* Each operand is memory of the context's device, with room for its elements where the driver says. */
autotune_status autotune_gemm_check_memory(const autotune_driver* driver, const autotune_context* context,
                                           const autotune_call* call);

/* Encode the kernel's tensor maps, compute its grid and enqueue it on the call's stream. */
autotune_status autotune_gemm_launch(const autotune_driver* driver, CUfunction function,
                                     const autotune_kernel* kernel, const autotune_call* call);

#endif
