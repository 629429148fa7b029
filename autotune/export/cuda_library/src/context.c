#include "context.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "error.h"
#include "table.h"

/* A stream's workspace in a context. */
typedef struct autotune_workspace {
    CUstream stream;
    CUdeviceptr pointer;
    size_t bytes;
    struct autotune_workspace* next;
} autotune_workspace;

struct autotune_context {
    unsigned long long id; /* cuCtxGetId: unique for the life of the process */
    int device;
    autotune_status status; /* AUTOTUNE_ERROR_WRONG_ARCH for a device of another architecture */
    int major, minor;       /* the device's compute capability */
    CUfunction* functions;  /* per kernel; NULL until loaded */
    autotune_cublas_slot cublas;
    autotune_workspace* workspaces; /* per stream; a stream's largest first */
    autotune_context* next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static autotune_context* contexts;

static autotune_status driver_failure(const autotune_driver* driver, const char* call, CUresult result) {
    char text[160];
    return autotune_gemm_fail(AUTOTUNE_ERROR_CUDA, "%s failed: %s", call,
                              autotune_gemm_describe(driver, result, text, sizeof text));
}

/* A new state for the context `id` on `device`, its compute capability read; NULL if the driver fails. */
static autotune_context* make_context(const autotune_driver* driver, unsigned long long id, CUdevice device,
                                      autotune_status* status) {
    int major = 0, minor = 0;
    CUresult result = driver->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
    if (result == CUDA_SUCCESS)
        result = driver->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
    if (result != CUDA_SUCCESS) {
        *status = driver_failure(driver, "cuDeviceGetAttribute(COMPUTE_CAPABILITY)", result);
        return NULL;
    }
    autotune_context* context = calloc(1, sizeof *context);
    CUfunction* functions = calloc((size_t)autotune_gemm_kernel_count + 1, sizeof *functions);
    if (context == NULL || functions == NULL || pthread_mutex_init(&context->cublas.lock, NULL) != 0) {
        free(context);
        free(functions);
        *status = autotune_gemm_fail(AUTOTUNE_ERROR_CUDA, "out of host memory for the state of a CUDA context");
        return NULL;
    }
    context->id = id;
    context->device = device;
    context->major = major;
    context->minor = minor;
    context->functions = functions;
    context->status = major == AUTOTUNE_GEMM_ARCH_MAJOR && minor == AUTOTUNE_GEMM_ARCH_MINOR
                          ? AUTOTUNE_SUCCESS
                          : AUTOTUNE_ERROR_WRONG_ARCH;
    context->next = contexts;
    contexts = context;
    return context;
}

autotune_context* autotune_gemm_context(const autotune_driver* driver, autotune_status* status) {
    CUcontext current = NULL;
    CUresult result = driver->cuCtxGetCurrent(&current);
    if (result != CUDA_SUCCESS) {
        *status = driver_failure(driver, "cuCtxGetCurrent", result);
        return NULL;
    }
    if (current == NULL) {
        *status = autotune_gemm_fail(AUTOTUNE_ERROR_NO_CONTEXT,
                                     "no current CUDA context on this thread: expected one made current by the "
                                     "CUDA runtime (any runtime call on a device) or by cuCtxSetCurrent");
        return NULL;
    }
    unsigned long long id = 0;
    CUdevice device = 0;
    result = driver->cuCtxGetId(current, &id);
    if (result != CUDA_SUCCESS) {
        *status = driver_failure(driver, "cuCtxGetId", result);
        return NULL;
    }
    result = driver->cuCtxGetDevice(&device);
    if (result != CUDA_SUCCESS) {
        *status = driver_failure(driver, "cuCtxGetDevice", result);
        return NULL;
    }
    pthread_mutex_lock(&lock);
    autotune_context* context = contexts;
    while (context != NULL && context->id != id)
        context = context->next;
    if (context == NULL)
        context = make_context(driver, id, device, status);
    pthread_mutex_unlock(&lock);
    if (context == NULL)
        return NULL;
    if (context->status != AUTOTUNE_SUCCESS) {
        *status = autotune_gemm_fail(context->status, "library built for %s, device %d is sm_%d%d",
                                     AUTOTUNE_GEMM_ARCH, context->device, context->major, context->minor);
        return NULL;
    }
    *status = AUTOTUNE_SUCCESS;
    return context;
}

int autotune_gemm_context_device(const autotune_context* context) { return context->device; }

autotune_cublas_slot* autotune_gemm_context_cublas(autotune_context* context) { return &context->cublas; }

/* Load kernel `index` into the current context; called with the lock held. */
static CUfunction load_function(const autotune_driver* driver, int index, autotune_status* status) {
    const autotune_kernel* kernel = &autotune_gemm_kernels[index];
    CUmodule module = NULL;
    CUfunction function = NULL;
    char call[320];
    CUresult result = driver->cuModuleLoadData(&module, kernel->cubin);
    if (result != CUDA_SUCCESS) {
        snprintf(call, sizeof call, "cuModuleLoadData of %s", kernel->entry);
        *status = driver_failure(driver, call, result);
        return NULL;
    }
    result = driver->cuModuleGetFunction(&function, module, kernel->entry);
    if (result != CUDA_SUCCESS) {
        snprintf(call, sizeof call, "cuModuleGetFunction(%s)", kernel->entry);
        *status = driver_failure(driver, call, result);
        return NULL;
    }
    if (kernel->opt_in) {
        result = driver->cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                            (int)kernel->dynamic_smem);
        if (result != CUDA_SUCCESS) {
            snprintf(call, sizeof call, "cuFuncSetAttribute(%s, MAX_DYNAMIC_SHARED_SIZE_BYTES, %u)", kernel->entry,
                     kernel->dynamic_smem);
            *status = driver_failure(driver, call, result);
            return NULL;
        }
    }
    *status = AUTOTUNE_SUCCESS;
    return function;
}

CUdeviceptr autotune_gemm_workspace(const autotune_driver* driver, autotune_context* context, CUstream stream,
                                    size_t bytes, autotune_status* status) {
    pthread_mutex_lock(&lock);
    autotune_workspace* workspace = context->workspaces;
    while (workspace != NULL && workspace->stream != stream)
        workspace = workspace->next;
    CUdeviceptr pointer = workspace != NULL && workspace->bytes >= bytes ? workspace->pointer : 0;
    if (pointer == 0) {
        /* A new buffer for the stream, put first: a smaller one it replaces stays allocated (launches still
           queued on the stream may use it). */
        autotune_workspace* made = calloc(1, sizeof *made);
        CUresult result = made == NULL ? CUDA_SUCCESS : driver->cuMemAlloc(&pointer, bytes);
        if (result == CUDA_SUCCESS && made != NULL)
            result = driver->cuMemsetD8Async(pointer, 0, bytes, stream);
        if (made == NULL) {
            *status = autotune_gemm_fail(AUTOTUNE_ERROR_CUDA, "out of host memory for a workspace's record");
        } else if (result != CUDA_SUCCESS) {
            char call[96];
            snprintf(call, sizeof call, "allocating and zeroing a workspace of %zu bytes", bytes);
            *status = driver_failure(driver, call, result);
            free(made);
            pointer = 0;
        } else {
            made->stream = stream;
            made->pointer = pointer;
            made->bytes = bytes;
            made->next = context->workspaces;
            context->workspaces = made;
            *status = AUTOTUNE_SUCCESS;
        }
    } else {
        *status = AUTOTUNE_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return pointer;
}

CUfunction autotune_gemm_function(const autotune_driver* driver, autotune_context* context, int index,
                                  autotune_status* status) {
    pthread_mutex_lock(&lock);
    CUfunction function = context->functions[index];
    if (function == NULL) {
        function = load_function(driver, index, status);
        context->functions[index] = function;
    } else {
        *status = AUTOTUNE_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return function;
}
