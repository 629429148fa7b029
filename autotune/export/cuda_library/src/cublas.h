/* cuBLAS, loaded at run time where it is installed: what a call runs where the table predicts the tuned
   kernel slower than cuBLAS, outside the tuned range, and for layouts the tuned kernels do not take. The
   few cuBLAS types and functions the library calls are declared here (values from cublas_api.h and
   library_types.h), so it builds without cuBLAS headers and links no cuBLAS. */
#ifndef AUTOTUNE_GEMM_CUBLAS_H
#define AUTOTUNE_GEMM_CUBLAS_H

#include "call.h"
#include "context.h"

typedef int cublasStatus_t;
typedef struct cublasContext* cublasHandle_t;

enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_OP_N = 0,           /* cublasOperation_t */
    CUBLAS_OP_T = 1,
    CUDA_R_32F = 0,            /* cudaDataType */
    CUDA_R_16F = 2,
    CUDA_R_16BF = 14,
    CUBLAS_COMPUTE_32F = 68,   /* cublasComputeType_t: fp32 accumulation, no TF32 */
    CUBLAS_DEFAULT_MATH = 0,   /* cublasMath_t */
    CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16,
    CUBLAS_GEMM_DEFAULT = -1   /* cublasGemmAlgo_t */
};

/* The cuBLAS functions the library calls (the _v2 symbols that cublas_v2.h names). */
typedef struct autotune_cublas {
    const char* library; /* the file loaded, e.g. "libcublas.so.12" */
    cublasStatus_t (*cublasCreate)(cublasHandle_t* handle);
    cublasStatus_t (*cublasSetStream)(cublasHandle_t handle, CUstream stream);
    cublasStatus_t (*cublasSetMathMode)(cublasHandle_t handle, int mode);
    cublasStatus_t (*cublasSgemm)(cublasHandle_t handle, int transa, int transb, int m, int n, int k,
                                  const float* alpha, const float* A, int lda, const float* B, int ldb,
                                  const float* beta, float* C, int ldc);
    cublasStatus_t (*cublasGemmEx)(cublasHandle_t handle, int transa, int transb, int m, int n, int k,
                                   const void* alpha, const void* A, int a_type, int lda, const void* B, int b_type,
                                   int ldb, const void* beta, void* C, int c_type, int ldc, int compute_type,
                                   int algo);
} autotune_cublas;

/* The environment variable that chooses the cuBLAS library: unset or empty, the first of
   AUTOTUNE_GEMM_CUBLAS_LIBRARIES that loads with these functions; "off" (or "0"), none; anything else,
   that file (a name dlopen searches for, or a path) and no other. */
#define AUTOTUNE_GEMM_CUBLAS_VARIABLE "AUTOTUNE_GEMM_CUBLAS"
#define AUTOTUNE_GEMM_CUBLAS_LIBRARIES {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}

/* cuBLAS, loaded once (thread-safe); NULL where it cannot be (not installed, turned off, or a library
   without these functions). Sets no message: where it is NULL, calls run the tuned kernel. */
const autotune_cublas* autotune_gemm_cublas(void);

/* Why autotune_gemm_cublas() is NULL, e.g. "cuBLAS is turned off (AUTOTUNE_GEMM_CUBLAS=off)"; "" where
   it is not. */
const char* autotune_gemm_cublas_absence(void);

/* The call's C = alpha * op(A) op(B) + beta * C by cuBLAS on the call's stream, through the context's
   handle (made on the context's first cuBLAS call, its reductions kept in fp32 as the tuned kernels keep
   theirs: CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION). Row-major C is column-major C^T = op(B)^T op(A)^T and
   a row-major matrix is its transpose column-major with the same leading dimension, so cuBLAS gets B
   before A, each with its own transpose and leading dimension, and m and n swapped. *ran is 0 where the
   context has no handle (cublasCreate failed in it): then nothing was enqueued and the caller runs the
   tuned kernel; a failing GEMM is AUTOTUNE_ERROR_CUDA. */
autotune_status autotune_gemm_cublas_gemm(const autotune_cublas* cublas, autotune_context* context,
                                          const autotune_call* call, int* ran);

/* The call, of a layout the tuned kernels do not take, by cuBLAS: AUTOTUNE_ERROR_UNSUPPORTED where cuBLAS
   does not load, AUTOTUNE_ERROR_CUDA where the context has no handle, each message beginning with
   `function` (NULL: none) and naming the layout. */
autotune_status autotune_gemm_cublas_only(const char* function, autotune_context* context,
                                          const autotune_call* call);

/* The message for a layout only cuBLAS takes where cuBLAS does not load (AUTOTUNE_ERROR_UNSUPPORTED). */
autotune_status autotune_gemm_cublas_missing(const char* function, const autotune_call* call);

#endif
