#include "error.h"

#include <stdarg.h>
#include <stdio.h>

#define MESSAGE_BYTES 512

static _Thread_local char last_error[MESSAGE_BYTES];

void autotune_gemm_clear_error(void) { last_error[0] = '\0'; }

autotune_status autotune_gemm_fail(autotune_status status, const char* format, ...) {
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(last_error, sizeof last_error, format, arguments);
    va_end(arguments);
    return status;
}

const char* autotune_last_error(void) { return last_error; }

const char* autotune_status_string(autotune_status status) {
    switch (status) {
    case AUTOTUNE_SUCCESS: return "success";
    case AUTOTUNE_ERROR_INVALID_VALUE: return "invalid value";
    case AUTOTUNE_ERROR_UNSUPPORTED: return "unsupported";
    case AUTOTUNE_ERROR_NO_DRIVER: return "no CUDA driver";
    case AUTOTUNE_ERROR_NO_CONTEXT: return "no current CUDA context";
    case AUTOTUNE_ERROR_WRONG_ARCH: return "wrong architecture";
    case AUTOTUNE_ERROR_CUDA: return "CUDA error";
    }
    return "unknown status";
}
