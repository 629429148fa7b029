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
    void* library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (library == NULL)
        return 0;
    autotune_cublas c = {loaded_name, NULL, NULL, NULL, NULL};
    if (!(find(library, "cublasCreate_v2", &c.cublasCreate) &&
          find(library, "cublasSetStream_v2", &c.cublasSetStream) &&
          find(library, "cublasSgemm_v2", &c.cublasSgemm) && find(library, "cublasGemmEx", &c.cublasGemmEx))) {
        dlclose(library);
        return 0;
    }
    snprintf(loaded_name, sizeof loaded_name, "%s", name);
    loaded = c;
    return 1;
}

static void load(void) {
    const char* chosen = getenv(AUTOTUNE_GEMM_CUBLAS_VARIABLE);
    if (chosen != NULL && *chosen != '\0') {
        if (strcmp(chosen, "off") != 0 && strcmp(chosen, "0") != 0)
            usable = load_from(chosen);
        return;
    }
    static const char* const libraries[] = AUTOTUNE_GEMM_CUBLAS_LIBRARIES;
    for (size_t i = 0; i < sizeof libraries / sizeof libraries[0] && !usable; ++i)
        usable = load_from(libraries[i]);
}

const autotune_cublas* autotune_gemm_cublas(void) {
    pthread_once(&load_once, load);
    return usable ? &loaded : NULL;
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

/* Row-major C (m x n) = alpha * A (m x k) @ B (k x n) + beta * C is column-major C^T (n x m) =
   alpha * B^T (n x k) @ A^T (k x m) + beta * C^T, each matrix's leading dimension its row length. */
static cublasStatus_t enqueue(const autotune_cublas* cublas, cublasHandle_t handle, const autotune_call* call) {
    int m = call->m, n = call->n, k = call->k;
    if (call->table->element_bytes == 4)
        return cublas->cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &call->alpha, (const float*)call->b, n,
                                   (const float*)call->a, k, &call->beta, (float*)call->c, n);
    return cublas->cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &call->alpha, call->b, CUDA_R_16F, n,
                                call->a, CUDA_R_16F, k, &call->beta, call->c, CUDA_R_16F, n, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT);
}

autotune_status autotune_gemm_cublas_gemm(const autotune_cublas* cublas, autotune_context* context,
                                          const autotune_call* call, int* ran) {
    autotune_cublas_slot* slot = autotune_gemm_context_cublas(context);
    pthread_mutex_lock(&slot->lock);
    if (!slot->tried) {
        slot->tried = 1;
        cublasHandle_t handle = NULL;
        if (cublas->cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS)
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
    if (status != CUBLAS_STATUS_SUCCESS)
        return autotune_gemm_fail(AUTOTUNE_ERROR_CUDA, "%s of %s for %d x %d x %d failed: %s %d", failed,
                                  cublas->library, call->m, call->n, call->k, status_name(status), status);
    return AUTOTUNE_SUCCESS;
}
