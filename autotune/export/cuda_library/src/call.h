/* One GEMM call as the caller made it, its checks, and its launch. */
#ifndef AUTOTUNE_GEMM_CALL_H
#define AUTOTUNE_GEMM_CALL_H

#include "context.h"
#include "driver.h"
#include "table.h"

/* C (m x n, rows ldc apart) = alpha * op(A) op(B) + beta * C, all row-major: A stored m x k (transa N) or
   k x m (T), rows lda apart; B stored k x n (transb N) or n x k (T), rows ldb apart. */
typedef struct autotune_call {
    const autotune_dtype_table* table;
    int m, n, k;
    float alpha, beta;
    const void* a;
    const void* b;
    void* c;
    CUstream stream;
    int transa, transb; /* autotune_op */
    int lda, ldb, ldc;
} autotune_call;

/* A call of autotune_sgemm, autotune_hgemm or autotune_bgemm: no transposes, each leading dimension its row length. */
autotune_call autotune_gemm_natural_call(const autotune_dtype_table* table, int m, int n, int k, float alpha,
                                         const void* a, const void* b, float beta, void* c, CUstream stream);

/* The table of the call's layout where tuned kernels take it: the dtype's own for transa = transb = N with
   lda = k, ldb = n and ldc = n; its table for B stored N x K (nt) for transb = T with ldb = k, where the
   library has one; else NULL. */
const autotune_dtype_table* autotune_gemm_layout_table(const autotune_call* call);

/* 1 for a layout tuned kernels take (autotune_gemm_layout_table is not NULL). */
int autotune_gemm_kernel_layout(const autotune_call* call);

/* "transa = N, transb = T, lda = 64, ldb = 64, ldc = 64" into text; returns text. */
const char* autotune_gemm_describe_layout(const autotune_call* call, char* text, size_t size);

/* Sizes of at least 1 whose operands have at most 2^31 - 1 elements. */
autotune_status autotune_gemm_check_sizes(const autotune_call* call);

/* transa and transb each N or T, sizes of at least 1, and each leading dimension at least its operand's
   stored row length; then, for the layout the kernels take, at most 2^31 - 1 elements per operand. */
autotune_status autotune_gemm_check_layout(const autotune_call* call);

/* The layout, then null pointers and, for the layout the kernels take, alignment, checked without the
   driver. */
autotune_status autotune_gemm_check_arguments(const autotune_call* call);

/* Each operand is memory of the context's device, with room for its elements where the driver says. */
autotune_status autotune_gemm_check_memory(const autotune_driver* driver, const autotune_context* context,
                                           const autotune_call* call);

/* Encode the kernel's tensor maps, compute its grid, find its workspace (if it takes one) and enqueue it on the
   call's stream. */
autotune_status autotune_gemm_launch(const autotune_driver* driver, autotune_context* context, CUfunction function,
                                     const autotune_kernel* kernel, const autotune_call* call);

#endif
