/* The thread-local one-line message of the latest call, and the status strings. */
#ifndef AUTOTUNE_GEMM_ERROR_H
#define AUTOTUNE_GEMM_ERROR_H

#include "autotune_gemm.h"

/* Forget the message of an earlier call (each public function starts with this). */
void autotune_gemm_clear_error(void);

/* Set this thread's message (printf-style) and return `status`. */
autotune_status autotune_gemm_fail(autotune_status status, const char* format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#endif
