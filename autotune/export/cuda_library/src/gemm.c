/* The public functions: check the call, pick the kernel or cuBLAS (chosen at the nearest tuned shape, and
   cuBLAS outside the tuned range), and run cuBLAS where it is picked and loads, else launch the kernel.
   Layouts the kernels do not take run on cuBLAS only; B stored N x K (transb = T) takes the dtype's nt
   kernels where the library has them. */
#include <string.h>

#include "autotune_gemm.h"
#include "call.h"
#include "context.h"
#include "cublas.h"
#include "dispatch.h"
#include "driver.h"
#include "error.h"
#include "table.h"

/* The dtypes the library has kernels for, for messages: "f32, f16 and bf16", "f32 only", ... */
/* Whether the library has kernels of the dtype, in any layout. */
static int has_kernels(const autotune_dtype_table* table) {
    return table->rule_count > 0 || (table->nt != NULL && table->nt->rule_count > 0);
}

static const char* available_dtypes(void) {
    static const char* const names[8] = {"none", "f32 only", "f16 only", "f32 and f16", "bf16 only",
                                         "f32 and bf16", "f16 and bf16", "f32, f16 and bf16"};
    return names[(has_kernels(&autotune_gemm_f32) ? 1 : 0) | (has_kernels(&autotune_gemm_f16) ? 2 : 0) |
                 (has_kernels(&autotune_gemm_bf16) ? 4 : 0)];
}

/* Where the table sends m x n x k: the kernel (index into autotune_gemm_kernels), and *cublas 1 where it
   picks cuBLAS there, m x n x k is outside the tuned range, or beta is not 0 and the kernel reads C slowly
   (autotune.runtime.dispatch.decide). */
static int route(const autotune_dtype_table* table, int m, int n, int k, float beta, int* cublas) {
    int kernel = autotune_gemm_pick(table, m, n, k, cublas);
    long long low = 0, high = 0;
    if (autotune_gemm_outside(table, m, n, k, &low, &high) != 0)
        *cublas = 1;
    if (kernel >= 0 && beta != 0.0f && autotune_gemm_kernels[kernel].reads_c_slowly)
        *cublas = 1;
    return kernel;
}

/* A call no tuned kernel runs (each kernel of the nearest tuned shape is built for other shapes) and cuBLAS
   did not run. */
static autotune_status unserved(const char* function, const autotune_call* call) {
    return autotune_gemm_fail(AUTOTUNE_ERROR_UNSUPPORTED,
                              "%s: no tuned kernel of this library runs %d x %d x %d (those of its nearest tuned shape "
                              "are built for other shapes), and cuBLAS, which would, is not loaded: %s",
                              function, call->m, call->n, call->k, autotune_gemm_cublas_absence());
}

static autotune_status gemm(const char* function, autotune_call call) {
    autotune_gemm_clear_error();
    if (!has_kernels(call.table))
        return autotune_gemm_fail(AUTOTUNE_ERROR_UNSUPPORTED, "%s: this library has no %s kernels (it has %s)",
                                  function, call.table->dtype, available_dtypes());
    autotune_status status = autotune_gemm_check_arguments(&call);
    if (status != AUTOTUNE_SUCCESS)
        return status;
    const autotune_driver* driver = autotune_gemm_driver(&status);
    if (driver == NULL)
        return status;
    autotune_context* context = autotune_gemm_context(driver, &status);
    if (context == NULL)
        return status;
    if ((status = autotune_gemm_check_memory(driver, context, &call)) != AUTOTUNE_SUCCESS)
        return status;
    const autotune_dtype_table* table = autotune_gemm_layout_table(&call);
    if (table == NULL || table->rule_count == 0)
        return autotune_gemm_cublas_only(function, context, &call);
    int cublas = 0;
    int kernel = route(table, call.m, call.n, call.k, call.beta, &cublas);
    const autotune_cublas* library = cublas ? autotune_gemm_cublas() : NULL;
    if (library != NULL) {
        int ran = 0;
        status = autotune_gemm_cublas_gemm(library, context, &call, &ran);
        if (ran || status != AUTOTUNE_SUCCESS)
            return status;
    }
    if (kernel < 0)
        return unserved(function, &call);
    CUfunction loaded = autotune_gemm_function(driver, context, kernel, &status);
    if (loaded == NULL)
        return status;
    return autotune_gemm_launch(driver, context, loaded, &autotune_gemm_kernels[kernel], &call);
}

autotune_status autotune_sgemm(int m, int n, int k, float alpha, const float* A, const float* B, float beta,
                               float* C, autotune_stream_t stream) {
    return gemm("autotune_sgemm",
                autotune_gemm_natural_call(&autotune_gemm_f32, m, n, k, alpha, A, B, beta, C, stream));
}

autotune_status autotune_hgemm(int m, int n, int k, float alpha, const void* A, const void* B, float beta, void* C,
                               autotune_stream_t stream) {
    return gemm("autotune_hgemm",
                autotune_gemm_natural_call(&autotune_gemm_f16, m, n, k, alpha, A, B, beta, C, stream));
}

autotune_status autotune_bgemm(int m, int n, int k, float alpha, const void* A, const void* B, float beta, void* C,
                               autotune_stream_t stream) {
    return gemm("autotune_bgemm",
                autotune_gemm_natural_call(&autotune_gemm_bf16, m, n, k, alpha, A, B, beta, C, stream));
}

/* The call of an _ex function: the natural one, with the caller's transposes and leading dimensions. */
static autotune_call call_ex(const autotune_dtype_table* table, autotune_op transa, autotune_op transb, int m, int n,
                             int k, float alpha, const void* a, int lda, const void* b, int ldb, float beta, void* c,
                             int ldc, CUstream stream) {
    autotune_call call = autotune_gemm_natural_call(table, m, n, k, alpha, a, b, beta, c, stream);
    call.transa = (int)transa;
    call.transb = (int)transb;
    call.lda = lda;
    call.ldb = ldb;
    call.ldc = ldc;
    return call;
}

autotune_status autotune_sgemm_ex(autotune_op transa, autotune_op transb, int m, int n, int k, float alpha,
                                  const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc,
                                  autotune_stream_t stream) {
    return gemm("autotune_sgemm_ex",
                call_ex(&autotune_gemm_f32, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, stream));
}

autotune_status autotune_hgemm_ex(autotune_op transa, autotune_op transb, int m, int n, int k, float alpha,
                                  const void* A, int lda, const void* B, int ldb, float beta, void* C, int ldc,
                                  autotune_stream_t stream) {
    return gemm("autotune_hgemm_ex",
                call_ex(&autotune_gemm_f16, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, stream));
}

autotune_status autotune_bgemm_ex(autotune_op transa, autotune_op transb, int m, int n, int k, float alpha,
                                  const void* A, int lda, const void* B, int ldb, float beta, void* C, int ldc,
                                  autotune_stream_t stream) {
    return gemm("autotune_bgemm_ex",
                call_ex(&autotune_gemm_bf16, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, stream));
}

/* The dtype's table for the questions about a call; NULL (error set) for a bad dtype or one the library
   lacks. */
static const autotune_dtype_table* dtype_table(const char* dtype) {
    const autotune_dtype_table* table = NULL;
    if (dtype != NULL && (strcmp(dtype, "f32") == 0 || strcmp(dtype, "sgemm") == 0))
        table = &autotune_gemm_f32;
    else if (dtype != NULL && (strcmp(dtype, "f16") == 0 || strcmp(dtype, "hgemm") == 0))
        table = &autotune_gemm_f16;
    else if (dtype != NULL && (strcmp(dtype, "bf16") == 0 || strcmp(dtype, "bgemm") == 0))
        table = &autotune_gemm_bf16;
    if (table == NULL) {
        autotune_gemm_fail(AUTOTUNE_ERROR_INVALID_VALUE,
                           "dtype = %s%s%s: expected \"f32\", \"f16\", \"bf16\", \"sgemm\", \"hgemm\" or \"bgemm\"",
                           dtype ? "\"" : "",
                           dtype ? dtype : "NULL", dtype ? "\"" : "");
        return NULL;
    }
    if (!has_kernels(table)) {
        autotune_gemm_fail(AUTOTUNE_ERROR_UNSUPPORTED, "this library has no %s kernels (it has %s)", table->dtype,
                           available_dtypes());
        return NULL;
    }
    return table;
}

/* The dtype's table for autotune_kernel_for and autotune_in_tuned_range; NULL (error set) for a bad
   dtype, one the library lacks, or bad sizes. */
static const autotune_dtype_table* queried_table(const char* dtype, int m, int n, int k) {
    autotune_gemm_clear_error();
    const autotune_dtype_table* table = dtype_table(dtype);
    if (table == NULL)
        return NULL;
    autotune_call call = autotune_gemm_natural_call(table, m, n, k, 1.0f, NULL, NULL, 0.0f, NULL, NULL);
    if (autotune_gemm_check_sizes(&call) != AUTOTUNE_SUCCESS)
        return NULL;
    if (table->rule_count == 0) {
        autotune_gemm_fail(AUTOTUNE_ERROR_UNSUPPORTED,
                           "this library has %s kernels for B stored N x K only (transb = T: autotune_kernel_for_ex)",
                           table->dtype);
        return NULL;
    }
    return table;
}

/* What a call of the layout the kernels take runs at m x n x k of `table`; NULL (error set) where only cuBLAS
   could and it is not loaded. */
static const char* kernel_for(const autotune_dtype_table* table, int m, int n, int k) {
    int cublas = 0;
    int kernel = route(table, m, n, k, 0.0f, &cublas);
    if (cublas && autotune_gemm_cublas() != NULL)
        return AUTOTUNE_GEMM_CUBLAS_NAME;
    if (kernel < 0) {
        autotune_call call = autotune_gemm_natural_call(table, m, n, k, 1.0f, NULL, NULL, 0.0f, NULL, NULL);
        unserved("autotune_kernel_for", &call);
        return NULL;
    }
    return autotune_gemm_kernels[kernel].name;
}

const char* autotune_kernel_for(const char* dtype, int m, int n, int k) {
    const autotune_dtype_table* table = queried_table(dtype, m, n, k);
    return table == NULL ? NULL : kernel_for(table, m, n, k);
}

const char* autotune_kernel_for_ex(const char* dtype, autotune_op transa, autotune_op transb, int m, int n, int k,
                                   int lda, int ldb, int ldc) {
    autotune_gemm_clear_error();
    const autotune_dtype_table* table = dtype_table(dtype);
    if (table == NULL)
        return NULL;
    autotune_call call = call_ex(table, transa, transb, m, n, k, 1.0f, NULL, lda, NULL, ldb, 0.0f, NULL, ldc, NULL);
    if (autotune_gemm_check_layout(&call) != AUTOTUNE_SUCCESS)
        return NULL;
    const autotune_dtype_table* layout = autotune_gemm_layout_table(&call);
    if (layout != NULL && layout->rule_count > 0)
        return kernel_for(layout, m, n, k);
    if (autotune_gemm_cublas() == NULL) {
        autotune_gemm_cublas_missing(NULL, &call);
        return NULL;
    }
    return AUTOTUNE_GEMM_CUBLAS_NAME;
}

int autotune_in_tuned_range(const char* dtype, int m, int n, int k) {
    const autotune_dtype_table* table = queried_table(dtype, m, n, k);
    if (table == NULL)
        return -1;
    long long low = 0, high = 0;
    int axis = autotune_gemm_outside(table, m, n, k, &low, &high);
    if (axis == 0)
        return 1;
    const int sizes[3] = {m, n, k};
    autotune_gemm_fail(AUTOTUNE_ERROR_UNSUPPORTED, "%c = %d is outside the tuned range of %c (%lld..%lld)",
                       "mnk"[axis - 1], sizes[axis - 1], "mnk"[axis - 1], low, high);
    return 0;
}

const char* autotune_arch(void) { return AUTOTUNE_GEMM_ARCH; }
