#include "cublas.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static autotune_cublas loaded;
static int usable;
static char loaded_name[256];
static char absence[320]; /* why none loaded */
static const char* lacking; /* the function the latest library tried lacks; NULL where it does not load */

/* Store the address of `symbol` in the function pointer at `slot`; 0 where the library lacks it. */
static int find(void* library, const char* symbol, void* slot) {
    void* address = dlsym(library, symbol);
    if (address == NULL)
        return 0;
    memcpy(slot, &address, sizeof address);
    return 1;
}

/* cuBLAS's functions from the library `name`; 0 (the library closed again) where it does not load or
   lacks one of them. */
static int load_from(const char* name) {
    lacking = NULL;
    void* library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (library == NULL)
        return 0;
    autotune_cublas c = {loaded_name, NULL, NULL, NULL, NULL, NULL};
    if (!find(library, lacking = "cublasCreate_v2", &c.cublasCreate) ||
        !find(library, lacking = "cublasSetStream_v2", &c.cublasSetStream) ||
        !find(library, lacking = "cublasSetMathMode", &c.cublasSetMathMode) ||
        !find(library, lacking = "cublasSgemm_v2", &c.cublasSgemm) ||
        !find(library, lacking = "cublasGemmEx", &c.cublasGemmEx)) {
        dlclose(library);
        return 0;
    }
    lacking = NULL;
    snprintf(loaded_name, sizeof loaded_name, "%s", name);
    loaded = c;
    return 1;
}

static void load(void) {
    const char* chosen = getenv(AUTOTUNE_GEMM_CUBLAS_VARIABLE);
    if (chosen != NULL && *chosen != '\0') {
        if (strcmp(chosen, "off") == 0 || strcmp(chosen, "0") == 0)
            snprintf(absence, sizeof absence, "cuBLAS is turned off (%s=%s)", AUTOTUNE_GEMM_CUBLAS_VARIABLE, chosen);
        else if (!(usable = load_from(chosen)))
            snprintf(absence, sizeof absence, "%s=%s %s%s", AUTOTUNE_GEMM_CUBLAS_VARIABLE, chosen,
                     lacking ? "lacks " : "does not load", lacking ? lacking : "");
        return;
    }
    static const char* const libraries[] = AUTOTUNE_GEMM_CUBLAS_LIBRARIES;
    for (size_t i = 0; i < sizeof libraries / sizeof libraries[0] && !usable; ++i)
        usable = load_from(libraries[i]);
    if (!usable)
        snprintf(absence, sizeof absence, "none of %s, %s and %s loads (%s can name the file)", libraries[0],
                 libraries[1], libraries[2], AUTOTUNE_GEMM_CUBLAS_VARIABLE);
}

const autotune_cublas* autotune_gemm_cublas(void) {
    pthread_once(&load_once, load);
    return usable ? &loaded : NULL;
}

const char* autotune_gemm_cublas_absence(void) {
    pthread_once(&load_once, load);
    return absence;
}

/* "CUBLAS_STATUS_EXECUTION_FAILED" for `status` (cublas_api.h's names). */
static const char* status_name(cublasStatus_t status) {
    switch (status) {
    case 0: return "CUBLAS_STATUS_SUCCESS";
    case 1: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case 3: return "CUBLAS_STATUS_ALLOC_FAILED";
    case 7: return "CUBLAS_STATUS_INVALID_VALUE";
    case 8: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case 11: return "CUBLAS_STATUS_MAPPING_ERROR";
    case 13: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case 14: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case 15: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case 16: return "CUBLAS_STATUS_LICENSE_ERROR";
    }
    return "an unknown cublasStatus_t";
}

/* Row-major C (m x n) = alpha * op(A) (m x k) @ op(B) (k x n) + beta * C is column-major C^T (n x m) =
   alpha * op(B)^T (n x k) @ op(A)^T (k x m) + beta * C^T. A row-major matrix X with rows ld apart is the
   column-major X^T with leading dimension ld: B's memory is column-major op(B)^T where transb is N (so
   cuBLAS's op N) and op(B) where it is T (so cuBLAS's op T), and the same for A. */
static cublasStatus_t enqueue(const autotune_cublas* cublas, cublasHandle_t handle, const autotune_call* call) {
    int m = call->m, n = call->n, k = call->k;
    int op_b = call->transb == AUTOTUNE_OP_T ? CUBLAS_OP_T : CUBLAS_OP_N;
    int op_a = call->transa == AUTOTUNE_OP_T ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (call->table->element_bytes == 4)
        return cublas->cublasSgemm(handle, op_b, op_a, n, m, k, &call->alpha, (const float*)call->b, call->ldb,
                                   (const float*)call->a, call->lda, &call->beta, (float*)call->c, call->ldc);
    int type = call->table->cuda_data_type; /* CUDA_R_16F or CUDA_R_16BF */
    return cublas->cublasGemmEx(handle, op_b, op_a, n, m, k, &call->alpha, call->b, type, call->ldb, call->a, type,
                                call->lda, &call->beta, call->c, type, call->ldc, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT);
}

autotune_status autotune_gemm_cublas_gemm(const autotune_cublas* cublas, autotune_context* context,
                                          const autotune_call* call, int* ran) {
    autotune_cublas_slot* slot = autotune_gemm_context_cublas(context);
    pthread_mutex_lock(&slot->lock);
    if (!slot->tried) {
        slot->tried = 1;
        cublasHandle_t handle = NULL;
        slot->create_status = cublas->cublasCreate(&handle);
        if (slot->create_status == CUBLAS_STATUS_SUCCESS) /* fp16 and bf16 partial sums reduced in fp32 */
            slot->create_status = cublas->cublasSetMathMode(
                handle, CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
        if (slot->create_status == CUBLAS_STATUS_SUCCESS)
            slot->handle = handle;
    }
    *ran = slot->handle != NULL;
    if (!*ran) {
        pthread_mutex_unlock(&slot->lock);
        return AUTOTUNE_SUCCESS;
    }
    const char* failed = "cublasSetStream_v2";
    cublasStatus_t status = cublas->cublasSetStream(slot->handle, call->stream);
    if (status == CUBLAS_STATUS_SUCCESS) {
        failed = call->table->element_bytes == 4 ? "cublasSgemm_v2" : "cublasGemmEx";
        status = enqueue(cublas, slot->handle, call);
    }
    pthread_mutex_unlock(&slot->lock);
    if (status == CUBLAS_STATUS_SUCCESS)
        return AUTOTUNE_SUCCESS;
    char layout[96] = "";
    if (!autotune_gemm_kernel_layout(call)) {
        char text[80];
        snprintf(layout, sizeof layout, " (%s)", autotune_gemm_describe_layout(call, text, sizeof text));
    }
    return autotune_gemm_fail(AUTOTUNE_ERROR_CUDA, "%s of %s for %d x %d x %d%s failed: %s %d", failed,
                              cublas->library, call->m, call->n, call->k, layout, status_name(status), status);
}

/* "autotune_sgemm_ex: " for `function`, "" for NULL. */
static const char* prefix(const char* function, char* text, size_t size) {
    snprintf(text, size, "%s%s", function ? function : "", function ? ": " : "");
    return text;
}

/* The layouts the tuned kernels of the call's dtype take, for messages. */
static const char* kernel_layouts(const autotune_call* call) {
    if (call->table->nt != NULL && call->table->nt->rule_count > 0)
        return "the tuned kernels take transa = N with lda = k and ldc = n, and transb = N with ldb = n or "
               "transb = T with ldb = k";
    return "the tuned kernels take transa = transb = N with lda = k, ldb = n and ldc = n";
}

autotune_status autotune_gemm_cublas_missing(const char* function, const autotune_call* call) {
    char head[64], layout[80];
    return autotune_gemm_fail(AUTOTUNE_ERROR_UNSUPPORTED, "%s%s needs cuBLAS (%s), and %s",
                              prefix(function, head, sizeof head),
                              autotune_gemm_describe_layout(call, layout, sizeof layout), kernel_layouts(call),
                              autotune_gemm_cublas_absence());
}

autotune_status autotune_gemm_cublas_only(const char* function, autotune_context* context,
                                          const autotune_call* call) {
    const autotune_cublas* cublas = autotune_gemm_cublas();
    if (cublas == NULL)
        return autotune_gemm_cublas_missing(function, call);
    int ran = 0;
    autotune_status status = autotune_gemm_cublas_gemm(cublas, context, call, &ran);
    if (ran || status != AUTOTUNE_SUCCESS)
        return status;
    char head[64], layout[80];
    int created = autotune_gemm_context_cublas(context)->create_status;
    return autotune_gemm_fail(AUTOTUNE_ERROR_CUDA,
                              "%s%s needs cuBLAS (%s), and cublasCreate_v2 of %s failed in this context: %s %d",
                              prefix(function, head, sizeof head),
                              autotune_gemm_describe_layout(call, layout, sizeof layout), kernel_layouts(call),
                              cublas->library,
                              status_name(created), created);
}
