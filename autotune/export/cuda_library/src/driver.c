#include "driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "error.h"

#define DRIVER_LIBRARY "libcuda.so.1"

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static autotune_driver loaded;
static int usable;
static char load_error[400];

/* Store the address of `symbol` in the function pointer at `slot`; 0 where the driver lacks it. */
static int find(void* library, const char* symbol, void* slot) {
    void* address = dlsym(library, symbol);
    if (address == NULL) {
        snprintf(load_error, sizeof load_error,
                 "%s has no %s: the NVIDIA driver is older than CUDA 12.0, which this library needs",
                 DRIVER_LIBRARY, symbol);
        return 0;
    }
    memcpy(slot, &address, sizeof address);
    return 1;
}

static void load(void) {
    void* library = dlopen(DRIVER_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        const char* reason = dlerror();
        snprintf(load_error, sizeof load_error, "%s cannot be loaded (%s): no NVIDIA driver on this machine",
                 DRIVER_LIBRARY, reason ? reason : "unknown reason");
        return;
    }
    autotune_driver d;
    if (!(find(library, "cuInit", &d.cuInit) && find(library, "cuGetErrorName", &d.cuGetErrorName) &&
          find(library, "cuGetErrorString", &d.cuGetErrorString) &&
          find(library, "cuCtxGetCurrent", &d.cuCtxGetCurrent) &&
          find(library, "cuCtxGetDevice", &d.cuCtxGetDevice) && find(library, "cuCtxGetId", &d.cuCtxGetId) &&
          find(library, "cuDeviceGetAttribute", &d.cuDeviceGetAttribute) &&
          find(library, "cuPointerGetAttribute", &d.cuPointerGetAttribute) &&
          find(library, "cuMemGetAddressRange_v2", &d.cuMemGetAddressRange) &&
          find(library, "cuModuleLoadData", &d.cuModuleLoadData) &&
          find(library, "cuModuleGetFunction", &d.cuModuleGetFunction) &&
          find(library, "cuFuncSetAttribute", &d.cuFuncSetAttribute) &&
          find(library, "cuTensorMapEncodeTiled", &d.cuTensorMapEncodeTiled) &&
          find(library, "cuMemAlloc_v2", &d.cuMemAlloc) && find(library, "cuMemsetD8Async", &d.cuMemsetD8Async) &&
          find(library, "cuLaunchKernel", &d.cuLaunchKernel)))
        return;
    CUresult result = d.cuInit(0);
    if (result != CUDA_SUCCESS) {
        char text[160];
        snprintf(load_error, sizeof load_error, "cuInit(0) failed: %s",
                 autotune_gemm_describe(&d, result, text, sizeof text));
        return;
    }
    loaded = d;
    usable = 1;
}

const autotune_driver* autotune_gemm_driver(autotune_status* status) {
    pthread_once(&load_once, load);
    if (!usable) {
        *status = autotune_gemm_fail(AUTOTUNE_ERROR_NO_DRIVER, "%s", load_error);
        return NULL;
    }
    *status = AUTOTUNE_SUCCESS;
    return &loaded;
}

const char* autotune_gemm_describe(const autotune_driver* driver, CUresult result, char* text, size_t size) {
    const char* name = NULL;
    const char* explanation = NULL;
    if (driver->cuGetErrorName(result, &name) != CUDA_SUCCESS || name == NULL)
        name = "unknown CUresult";
    if (driver->cuGetErrorString(result, &explanation) != CUDA_SUCCESS || explanation == NULL)
        explanation = "no description";
    snprintf(text, size, "%s %d (%s)", name, result, explanation);
    return text;
}
