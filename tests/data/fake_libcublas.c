/* A stand-in libcublas for testing the exported C library's cuBLAS path without a GPU: it exports the
   four functions the library resolves and appends one line per call to $FAKE_CUDA_LOG (the stand-in
   driver's log, so the two interleave in call order).

   $FAKE_CUBLAS_CREATE_STATUS is what cublasCreate_v2 returns (default 0, success), $FAKE_CUBLAS_GEMM_STATUS
   what the GEMMs return (default 0). Handles are 0x100, 0x200, ... in the order they are made. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef int cublasStatus_t;

static void record(const char* format, ...) {
    const char* path = getenv("FAKE_CUDA_LOG");
    if (path == NULL)
        return;
    FILE* log = fopen(path, "a");
    if (log == NULL)
        return;
    va_list arguments;
    va_start(arguments, format);
    vfprintf(log, format, arguments);
    va_end(arguments);
    fputc('\n', log);
    fclose(log);
}

static cublasStatus_t status_of(const char* variable) {
    const char* text = getenv(variable);
    return text ? atoi(text) : 0;
}

static uintptr_t handles;

cublasStatus_t cublasCreate_v2(void** handle) {
    cublasStatus_t status = status_of("FAKE_CUBLAS_CREATE_STATUS");
    if (status == 0)
        *handle = (void*)(0x100 * ++handles);
    record("cublasCreate_v2 status %d", status);
    return status;
}

cublasStatus_t cublasSetStream_v2(void* handle, void* stream) {
    record("cublasSetStream_v2 handle %llu stream %llu", (unsigned long long)(uintptr_t)handle,
           (unsigned long long)(uintptr_t)stream);
    return 0;
}

cublasStatus_t cublasSetMathMode(void* handle, int mode) {
    record("cublasSetMathMode handle %llu mode %d", (unsigned long long)(uintptr_t)handle, mode);
    return 0;
}

cublasStatus_t cublasSgemm_v2(void* handle, int transa, int transb, int m, int n, int k, const float* alpha,
                              const float* A, int lda, const float* B, int ldb, const float* beta, float* C,
                              int ldc) {
    record("cublasSgemm_v2 handle %llu op %d %d m %d n %d k %d alpha %.9g A %llu lda %d B %llu ldb %d beta %.9g "
           "C %llu ldc %d",
           (unsigned long long)(uintptr_t)handle, transa, transb, m, n, k, *alpha,
           (unsigned long long)(uintptr_t)A, lda, (unsigned long long)(uintptr_t)B, ldb, *beta,
           (unsigned long long)(uintptr_t)C, ldc);
    return status_of("FAKE_CUBLAS_GEMM_STATUS");
}

cublasStatus_t cublasGemmEx(void* handle, int transa, int transb, int m, int n, int k, const void* alpha,
                            const void* A, int a_type, int lda, const void* B, int b_type, int ldb,
                            const void* beta, void* C, int c_type, int ldc, int compute_type, int algo) {
    record("cublasGemmEx handle %llu op %d %d m %d n %d k %d alpha %.9g A %llu type %d lda %d B %llu type %d "
           "ldb %d beta %.9g C %llu type %d ldc %d compute %d algo %d",
           (unsigned long long)(uintptr_t)handle, transa, transb, m, n, k, *(const float*)alpha,
           (unsigned long long)(uintptr_t)A, a_type, lda, (unsigned long long)(uintptr_t)B, b_type, ldb,
           *(const float*)beta, (unsigned long long)(uintptr_t)C, c_type, ldc, compute_type, algo);
    return status_of("FAKE_CUBLAS_GEMM_STATUS");
}
