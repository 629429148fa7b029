/* A stand-in libcuda.so.1 for testing the exported C library without a GPU: it answers the driver
   calls the library makes and appends one line per call to $FAKE_CUDA_LOG.

   Device memory: addresses from DEVICE0 (one allocation of $FAKE_CUDA_ALLOCATION_BYTES, default 2^40)
   belong to device 0, from DEVICE1 to device 1; any other address is not device memory.
   $FAKE_CUDA_CC is the compute capability (default 90), $FAKE_CUDA_NO_CONTEXT makes no context current.
   A tensor map is filled with its address, sizes, box and swizzle, so a launch can log what it got.
   cuMemAlloc hands out workspaces from WORKSPACES on, 2^32 bytes apart; a launch logs a parameter after
   beta that holds such an address as the kernel's workspace.
   Kernel parameters are read up to the first NULL entry (the library passes a NULL-padded array). */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEVICE0 0x7f0000000000ULL
#define DEVICE1 0x7e0000000000ULL
#define SPAN (1ULL << 40)
#define WORKSPACES 0x7d0000000000ULL
#define WORKSPACE_SPAN (1ULL << 32)
#define MAX_PARAMETERS 16

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

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

static unsigned long long allocation_bytes(void) {
    const char* text = getenv("FAKE_CUDA_ALLOCATION_BYTES");
    return text ? strtoull(text, NULL, 10) : SPAN;
}

CUresult cuInit(unsigned int flags) {
    record("cuInit %u", flags);
    return 0;
}

CUresult cuGetErrorName(CUresult status, const char** name) {
    *name = status == 1 ? "CUDA_ERROR_INVALID_VALUE" : "CUDA_ERROR_FAKE";
    return 0;
}

CUresult cuGetErrorString(CUresult status, const char** text) {
    *text = status == 1 ? "invalid argument" : "an error of the fake driver";
    return 0;
}

CUresult cuCtxGetCurrent(void** context) {
    *context = getenv("FAKE_CUDA_NO_CONTEXT") ? NULL : (void*)0xc0;
    return 0;
}

CUresult cuCtxGetDevice(int* device) {
    *device = 0;
    return 0;
}

CUresult cuCtxGetId(void* context, unsigned long long* id) {
    *id = (unsigned long long)(uintptr_t)context;
    return 0;
}

CUresult cuDeviceGetAttribute(int* value, int attribute, int device) {
    const char* text = getenv("FAKE_CUDA_CC");
    int capability = text ? atoi(text) : 90;
    if (attribute == 75)
        *value = capability / 10;
    else if (attribute == 76)
        *value = capability % 10;
    else
        return 1;
    record("cuDeviceGetAttribute %d device %d", attribute, device);
    return 0;
}

CUresult cuPointerGetAttribute(void* data, int attribute, CUdeviceptr pointer) {
    if (attribute != 9)
        return 1;
    if (pointer >= DEVICE0 && pointer < DEVICE0 + SPAN)
        *(int*)data = 0;
    else if (pointer >= DEVICE1 && pointer < DEVICE1 + SPAN)
        *(int*)data = 1;
    else
        return 1;
    return 0;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr pointer) {
    if (pointer < DEVICE0 || pointer >= DEVICE0 + SPAN)
        return 1;
    *base = DEVICE0;
    *size = allocation_bytes();
    return 0;
}

CUresult cuModuleLoadData(void** module, const void* image) {
    if (memcmp(image, "\x7f" "ELF", 4) != 0)
        return 200; /* CUDA_ERROR_INVALID_IMAGE */
    *module = (void*)image;
    record("cuModuleLoadData");
    return 0;
}

CUresult cuModuleGetFunction(void** function, void* module, const char* name) {
    (void)module;
    *function = strdup(name);
    record("cuModuleGetFunction %s", name);
    return 0;
}

CUresult cuFuncSetAttribute(void* function, int attribute, int value) {
    record("cuFuncSetAttribute %s %d %d", (const char*)function, attribute, value);
    return 0;
}

CUresult cuTensorMapEncodeTiled(uint64_t* map, int data_type, uint32_t rank, void* address, const uint64_t* dims,
                                const uint64_t* strides, const uint32_t* box, const uint32_t* element_strides,
                                int interleave, int swizzle, int l2_promotion, int oob_fill) {
    if ((uintptr_t)map % 64 != 0 || rank != 2)
        return 1;
    record("cuTensorMapEncodeTiled type %d address %llu dims %llu %llu stride %llu box %u %u element_strides %u %u "
           "interleave %d swizzle %d l2 %d oob %d",
           data_type, (unsigned long long)(uintptr_t)address, (unsigned long long)dims[0],
           (unsigned long long)dims[1], (unsigned long long)strides[0], box[0], box[1], element_strides[0],
           element_strides[1], interleave, swizzle, l2_promotion, oob_fill);
    memset(map, 0, 128);
    map[0] = (uint64_t)(uintptr_t)address;
    map[1] = dims[0];
    map[2] = dims[1];
    map[3] = box[0];
    map[4] = box[1];
    map[5] = (uint64_t)swizzle;
    return 0;
}

static unsigned long long workspaces_made;

CUresult cuMemAlloc_v2(CUdeviceptr* pointer, size_t bytes) {
    if (bytes == 0 || bytes > WORKSPACE_SPAN)
        return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
    *pointer = WORKSPACES + WORKSPACE_SPAN * workspaces_made++;
    record("cuMemAlloc %zu -> %llu", bytes, *pointer);
    return 0;
}

CUresult cuMemsetD8Async(CUdeviceptr pointer, unsigned char value, size_t count, void* stream) {
    record("cuMemsetD8Async %llu %u %zu stream %llu", pointer, value, count, (unsigned long long)(uintptr_t)stream);
    return 0;
}

CUresult cuLaunchKernel(void* function, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                        unsigned int block_x, unsigned int block_y, unsigned int block_z, unsigned int shared_bytes,
                        void* stream, void** parameters, void** extra) {
    char maps[1024] = "";
    int first_map = 8;
    if (parameters[8] != NULL) {
        unsigned long long workspace = *(const unsigned long long*)parameters[8];
        if (workspace >= WORKSPACES && workspace < WORKSPACES + WORKSPACE_SPAN * workspaces_made) {
            snprintf(maps, sizeof maps, " workspace:%llu", workspace);
            first_map = 9;
        }
    }
    for (int i = first_map; i < MAX_PARAMETERS && parameters[i] != NULL; ++i) {
        const uint64_t* map = parameters[i];
        char one[160];
        int zero = 1;
        for (int q = 0; q < 16; ++q)
            zero &= map[q] == 0;
        if (zero)
            snprintf(one, sizeof one, " zeros");
        else
            snprintf(one, sizeof one, " map:%llu:%llu:%llu:%llu:%llu:%llu", (unsigned long long)map[0],
                     (unsigned long long)map[1], (unsigned long long)map[2], (unsigned long long)map[3],
                     (unsigned long long)map[4], (unsigned long long)map[5]);
        strncat(maps, one, sizeof maps - strlen(maps) - 1);
    }
    record("cuLaunchKernel %s grid %u %u %u block %u %u %u shared %u stream %llu extra %d args %llu %llu %llu %d %d %d "
           "%.9g %.9g maps%s",
           (const char*)function, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes,
           (unsigned long long)(uintptr_t)stream, extra != NULL, *(unsigned long long*)parameters[0],
           *(unsigned long long*)parameters[1], *(unsigned long long*)parameters[2], *(int*)parameters[3],
           *(int*)parameters[4], *(int*)parameters[5], *(float*)parameters[6], *(float*)parameters[7], maps);
    return getenv("FAKE_CUDA_LAUNCH_ERROR") ? 999 : 0;
}
