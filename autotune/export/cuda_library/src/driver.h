/* The few CUDA driver types and functions the library uses, declared here and loaded from
   libcuda.so.1 at run time: the library builds without a CUDA toolkit and loads without a GPU. */
#ifndef AUTOTUNE_GEMM_DRIVER_H
#define AUTOTUNE_GEMM_DRIVER_H

#include <stddef.h>
#include <stdint.h>

#include "autotune_gemm.h"

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUstream_st* CUstream;
typedef struct CUtensorMap {
    _Alignas(64) unsigned long long opaque[16];
} CUtensorMap;

/* Values from cuda.h. */
enum {
    CUDA_SUCCESS = 0,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
    CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = 6,
    CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7,
    CU_TENSOR_MAP_INTERLEAVE_NONE = 0,
    CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3,
    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0 /* boxes past the matrix read zeros */
};

typedef struct autotune_driver {
    CUresult (*cuInit)(unsigned int flags);
    CUresult (*cuGetErrorName)(CUresult status, const char** name);
    CUresult (*cuGetErrorString)(CUresult status, const char** text);
    CUresult (*cuCtxGetCurrent)(CUcontext* context);
    CUresult (*cuCtxGetDevice)(CUdevice* device);
    CUresult (*cuCtxGetId)(CUcontext context, unsigned long long* id);
    CUresult (*cuDeviceGetAttribute)(int* value, int attribute, CUdevice device);
    CUresult (*cuPointerGetAttribute)(void* data, int attribute, CUdeviceptr pointer);
    CUresult (*cuMemGetAddressRange)(CUdeviceptr* base, size_t* size, CUdeviceptr pointer); /* _v2 */
    CUresult (*cuModuleLoadData)(CUmodule* module, const void* image);
    CUresult (*cuModuleGetFunction)(CUfunction* function, CUmodule module, const char* name);
    CUresult (*cuFuncSetAttribute)(CUfunction function, int attribute, int value);
    CUresult (*cuTensorMapEncodeTiled)(CUtensorMap* map, int data_type, uint32_t rank, void* address,
                                       const uint64_t* dims, const uint64_t* strides, const uint32_t* box,
                                       const uint32_t* element_strides, int interleave, int swizzle,
                                       int l2_promotion, int oob_fill);
    CUresult (*cuMemAlloc)(CUdeviceptr* pointer, size_t bytes); /* _v2 */
    CUresult (*cuMemsetD8Async)(CUdeviceptr pointer, unsigned char value, size_t count, CUstream stream);
    CUresult (*cuLaunchKernel)(CUfunction function, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                               unsigned int block_x, unsigned int block_y, unsigned int block_z,
                               unsigned int shared_bytes, CUstream stream, void** parameters, void** extra);
} autotune_driver;

/* The driver, loaded and initialised once (thread-safe). NULL where it cannot be: then the thread's
   message says why and *status is AUTOTUNE_ERROR_NO_DRIVER. */
const autotune_driver* autotune_gemm_driver(autotune_status* status);

/* "CUDA_ERROR_INVALID_VALUE (invalid argument)" for `result`, written into `text`. */
const char* autotune_gemm_describe(const autotune_driver* driver, CUresult result, char* text, size_t size);

#endif
