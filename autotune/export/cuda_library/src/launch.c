#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "call.h"
#include "error.h"

#define MAX_TENSOR_MAPS 8
#define GEMM_ARGUMENTS 8
#define MAX_GRID_X 2147483647LL
#define MAX_GRID_YZ 65535LL
#define TMA_ALIGNMENT 16

/* The map of `spec`'s operand, as autotune/kernel_abi.py encodes it; zeros where TMA cannot address the
   operand (its rows are not a multiple of 16 bytes): the kernel then copies it element by element. */
static autotune_status encode(const autotune_driver* driver, const autotune_kernel* kernel,
                              const autotune_tensor_map_spec* spec, const autotune_call* call, CUtensorMap* map) {
    const void* pointer = spec->operand == 'A' ? call->a : spec->operand == 'B' ? call->b : call->c;
    int rows = spec->operand == 'B' ? (kernel->b_transposed ? call->n : call->k) : call->m;
    int columns = spec->operand == 'A' || (spec->operand == 'B' && kernel->b_transposed) ? call->k : call->n;
    int element_bytes = call->table->element_bytes;
    memset(map, 0, sizeof *map);
    if ((uintptr_t)pointer % TMA_ALIGNMENT != 0 || ((uint64_t)columns * element_bytes) % TMA_ALIGNMENT != 0)
        return AUTOTUNE_SUCCESS;
    uint64_t dims[2] = {(uint64_t)columns, (uint64_t)rows};
    uint64_t strides[1] = {(uint64_t)columns * element_bytes}; /* bytes between rows */
    uint32_t element_strides[2] = {1, 1};
    int data_type = element_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    CUresult result = driver->cuTensorMapEncodeTiled(
        map, data_type, 2, (void*)(uintptr_t)pointer, dims, strides, spec->box, element_strides,
        CU_TENSOR_MAP_INTERLEAVE_NONE, spec->swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (result != CUDA_SUCCESS) {
        char text[160];
        return autotune_gemm_fail(AUTOTUNE_ERROR_CUDA,
                                  "cuTensorMapEncodeTiled refused %s (%c: %d x %d, box [%u, %u], swizzle %d, "
                                  "address %p): %s",
                                  spec->name, spec->operand, rows, columns, spec->box[0], spec->box[1],
                                  spec->swizzle, pointer, autotune_gemm_describe(driver, result, text, sizeof text));
    }
    return AUTOTUNE_SUCCESS;
}

static autotune_status grid_of(const autotune_kernel* kernel, const autotune_call* call, int64_t grid[3]) {
    kernel->grid(call->m, call->n, call->k, grid);
    if (grid[0] < 1 || grid[0] > MAX_GRID_X || grid[1] < 1 || grid[1] > MAX_GRID_YZ || grid[2] < 1 ||
        grid[2] > MAX_GRID_YZ)
        return autotune_gemm_fail(AUTOTUNE_ERROR_UNSUPPORTED,
                                  "grid %lld x %lld x %lld of %s for %d x %d x %d: expected 1 <= x <= %lld and "
                                  "1 <= y, z <= %lld",
                                  (long long)grid[0], (long long)grid[1], (long long)grid[2], kernel->entry,
                                  call->m, call->n, call->k, MAX_GRID_X, MAX_GRID_YZ);
    return AUTOTUNE_SUCCESS;
}

autotune_status autotune_gemm_launch(const autotune_driver* driver, autotune_context* context, CUfunction function,
                                     const autotune_kernel* kernel, const autotune_call* call) {
    int64_t grid[3];
    autotune_status status = grid_of(kernel, call, grid);
    if (status != AUTOTUNE_SUCCESS)
        return status;
    if (kernel->tensor_map_count > MAX_TENSOR_MAPS)
        return autotune_gemm_fail(AUTOTUNE_ERROR_UNSUPPORTED, "%s takes %d tensor maps: expected at most %d",
                                  kernel->entry, kernel->tensor_map_count, MAX_TENSOR_MAPS);
    CUtensorMap maps[MAX_TENSOR_MAPS];
    for (int i = 0; i < kernel->tensor_map_count; ++i)
        if ((status = encode(driver, kernel, &kernel->tensor_maps[i], call, &maps[i])) != AUTOTUNE_SUCCESS)
            return status;
    CUdeviceptr a = (CUdeviceptr)(uintptr_t)call->a;
    CUdeviceptr b = (CUdeviceptr)(uintptr_t)call->b;
    CUdeviceptr c = (CUdeviceptr)(uintptr_t)call->c;
    int m = call->m, n = call->n, k = call->k;
    float alpha = call->alpha, beta = call->beta;
    void* parameters[GEMM_ARGUMENTS + 1 + MAX_TENSOR_MAPS] = {&a, &b, &c, &m, &n, &k, &alpha, &beta};
    int count = GEMM_ARGUMENTS;
    CUdeviceptr workspace = 0;
    if (kernel->workspace_bytes > 0) {
        workspace = autotune_gemm_workspace(driver, context, call->stream, kernel->workspace_bytes, &status);
        if (workspace == 0)
            return status;
        parameters[count++] = &workspace;
    }
    for (int i = 0; i < kernel->tensor_map_count; ++i)
        parameters[count++] = &maps[i];
    CUresult result = driver->cuLaunchKernel(function, (unsigned)grid[0], (unsigned)grid[1], (unsigned)grid[2],
                                             kernel->block[0], kernel->block[1], kernel->block[2],
                                             kernel->dynamic_smem, call->stream, parameters, NULL);
    if (result != CUDA_SUCCESS) {
        char text[160];
        return autotune_gemm_fail(AUTOTUNE_ERROR_CUDA,
                                  "cuLaunchKernel of %s (grid %lld x %lld x %lld, block %u, %u bytes of shared "
                                  "memory) failed: %s",
                                  kernel->entry, (long long)grid[0], (long long)grid[1], (long long)grid[2],
                                  kernel->block[0], kernel->dynamic_smem,
                                  autotune_gemm_describe(driver, result, text, sizeof text));
    }
    return AUTOTUNE_SUCCESS;
}
