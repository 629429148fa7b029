#include <stdint.h>
#include <stdio.h>

#include "call.h"
#include "error.h"

#define INT32_ELEMENTS 2147483647LL
#define OPERAND_ALIGNMENT 16

/* An operand as stored: rows x columns, rows ld elements apart. */
typedef struct operand {
    const char* name;
    const void* pointer;
    int rows, columns;
    const char* rows_name;
    const char* columns_name;
    int ld;
    const char* ld_name;
} operand;

static void operands_of(const autotune_call* call, operand out[3]) {
    if (call->transa == AUTOTUNE_OP_T)
        out[0] = (operand){"A", call->a, call->k, call->m, "k", "m", call->lda, "lda"};
    else
        out[0] = (operand){"A", call->a, call->m, call->k, "m", "k", call->lda, "lda"};
    if (call->transb == AUTOTUNE_OP_T)
        out[1] = (operand){"B", call->b, call->n, call->k, "n", "k", call->ldb, "ldb"};
    else
        out[1] = (operand){"B", call->b, call->k, call->n, "k", "n", call->ldb, "ldb"};
    out[2] = (operand){"C", call->c, call->m, call->n, "m", "n", call->ldc, "ldc"};
}

autotune_call autotune_gemm_natural_call(const autotune_dtype_table* table, int m, int n, int k, float alpha,
                                         const void* a, const void* b, float beta, void* c, CUstream stream) {
    autotune_call call = {.table = table, .m = m, .n = n, .k = k, .alpha = alpha, .beta = beta, .a = a, .b = b,
                          .c = c, .stream = stream, .transa = AUTOTUNE_OP_N, .transb = AUTOTUNE_OP_N, .lda = k,
                          .ldb = n, .ldc = n};
    return call;
}

const autotune_dtype_table* autotune_gemm_layout_table(const autotune_call* call) {
    if (call->transa != AUTOTUNE_OP_N || call->lda != call->k || call->ldc != call->n)
        return NULL;
    if (call->transb == AUTOTUNE_OP_N && call->ldb == call->n)
        return call->table;
    const autotune_dtype_table* nt = call->table->nt;
    if (call->transb == AUTOTUNE_OP_T && call->ldb == call->k && nt != NULL && nt->rule_count > 0)
        return nt;
    return NULL;
}

int autotune_gemm_kernel_layout(const autotune_call* call) { return autotune_gemm_layout_table(call) != NULL; }

const char* autotune_gemm_describe_layout(const autotune_call* call, char* text, size_t size) {
    snprintf(text, size, "transa = %c, transb = %c, lda = %d, ldb = %d, ldc = %d",
             call->transa == AUTOTUNE_OP_T ? 'T' : 'N', call->transb == AUTOTUNE_OP_T ? 'T' : 'N', call->lda,
             call->ldb, call->ldc);
    return text;
}

static autotune_status check_size(const char* name, int value) {
    if (value < 1)
        return autotune_gemm_fail(AUTOTUNE_ERROR_INVALID_VALUE, "%s = %d: expected %s >= 1", name, value, name);
    return AUTOTUNE_SUCCESS;
}

static autotune_status check_sizes_of_axes(const autotune_call* call) {
    autotune_status status;
    if ((status = check_size("m", call->m)) || (status = check_size("n", call->n)) ||
        (status = check_size("k", call->k)))
        return status;
    return AUTOTUNE_SUCCESS;
}

/* At most 2^31 - 1 elements in each operand: the kernels index with int32. */
static autotune_status check_elements(const autotune_call* call) {
    operand operands[3];
    operands_of(call, operands);
    for (int i = 0; i < 3; ++i) {
        const operand* o = &operands[i];
        long long elements = (long long)o->rows * o->columns;
        if (elements > INT32_ELEMENTS)
            return autotune_gemm_fail(AUTOTUNE_ERROR_UNSUPPORTED,
                                      "%s is %s x %s = %d x %d = %lld elements: expected at most %lld "
                                      "(the kernels index with int32)",
                                      o->name, o->rows_name, o->columns_name, o->rows, o->columns, elements,
                                      INT32_ELEMENTS);
    }
    return AUTOTUNE_SUCCESS;
}

autotune_status autotune_gemm_check_sizes(const autotune_call* call) {
    autotune_status status = check_sizes_of_axes(call);
    return status != AUTOTUNE_SUCCESS ? status : check_elements(call);
}

static autotune_status check_op(const char* name, int op) {
    if (op != AUTOTUNE_OP_N && op != AUTOTUNE_OP_T)
        return autotune_gemm_fail(AUTOTUNE_ERROR_INVALID_VALUE,
                                  "%s = %d: expected AUTOTUNE_OP_N (0) or AUTOTUNE_OP_T (1)", name, op);
    return AUTOTUNE_SUCCESS;
}

autotune_status autotune_gemm_check_layout(const autotune_call* call) {
    autotune_status status;
    if ((status = check_op("transa", call->transa)) || (status = check_op("transb", call->transb)) ||
        (status = check_sizes_of_axes(call)))
        return status;
    operand operands[3];
    operands_of(call, operands);
    for (int i = 0; i < 3; ++i) {
        const operand* o = &operands[i];
        if (o->ld < o->columns)
            return autotune_gemm_fail(AUTOTUNE_ERROR_INVALID_VALUE, "%s = %d: expected %s >= %s = %d", o->ld_name,
                                      o->ld, o->ld_name, o->columns_name, o->columns);
    }
    return autotune_gemm_kernel_layout(call) ? check_elements(call) : AUTOTUNE_SUCCESS;
}

autotune_status autotune_gemm_check_arguments(const autotune_call* call) {
    autotune_status status = autotune_gemm_check_layout(call);
    if (status != AUTOTUNE_SUCCESS)
        return status;
    operand operands[3];
    operands_of(call, operands);
    int kernel_layout = autotune_gemm_kernel_layout(call);
    for (int i = 0; i < 3; ++i) {
        const operand* o = &operands[i];
        if (o->pointer == NULL)
            return autotune_gemm_fail(AUTOTUNE_ERROR_INVALID_VALUE, "%s = NULL: expected a device pointer", o->name);
        if (kernel_layout && (uintptr_t)o->pointer % OPERAND_ALIGNMENT != 0)
            return autotune_gemm_fail(AUTOTUNE_ERROR_UNSUPPORTED,
                                      "%s = %p: expected a %d-byte aligned address (the tuned kernels need one)",
                                      o->name, o->pointer, OPERAND_ALIGNMENT);
    }
    return AUTOTUNE_SUCCESS;
}

static autotune_status check_operand_memory(const autotune_driver* driver, int device, const operand* o,
                                            int element_bytes) {
    CUdeviceptr address = (CUdeviceptr)(uintptr_t)o->pointer;
    int ordinal = -1;
    CUresult result = driver->cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, address);
    if (result != CUDA_SUCCESS) {
        char text[160];
        return autotune_gemm_fail(AUTOTUNE_ERROR_INVALID_VALUE,
                                  "%s = %p: expected device memory (cuPointerGetAttribute(DEVICE_ORDINAL): %s)",
                                  o->name, o->pointer, autotune_gemm_describe(driver, result, text, sizeof text));
    }
    if (ordinal != device)
        return autotune_gemm_fail(AUTOTUNE_ERROR_INVALID_VALUE,
                                  "%s = %p: memory of device %d, expected memory of device %d (the current "
                                  "context's)",
                                  o->name, o->pointer, ordinal, device);
    CUdeviceptr base = 0;
    size_t size = 0;
    /* the last row ends `columns` elements after its start, (rows - 1) * ld elements in */
    unsigned long long needed =
        ((unsigned long long)(o->rows - 1) * (unsigned long long)o->ld + (unsigned long long)o->columns) *
        element_bytes;
    /* Not every kind of memory reports its range; where the driver does, the operand must fit in it. */
    if (driver->cuMemGetAddressRange(&base, &size, address) == CUDA_SUCCESS && size > 0 &&
        address - base + needed > size) {
        char stride[48] = "";
        if (o->ld != o->columns)
            snprintf(stride, sizeof stride, " with rows %s = %d apart", o->ld_name, o->ld);
        return autotune_gemm_fail(AUTOTUNE_ERROR_INVALID_VALUE,
                                  "%s = %p: expected room for %s x %s = %d x %d elements%s (%llu bytes), its "
                                  "allocation holds %llu bytes from there",
                                  o->name, o->pointer, o->rows_name, o->columns_name, o->rows, o->columns, stride,
                                  needed, (unsigned long long)(size - (address - base)));
    }
    return AUTOTUNE_SUCCESS;
}

autotune_status autotune_gemm_check_memory(const autotune_driver* driver, const autotune_context* context,
                                           const autotune_call* call) {
    operand operands[3];
    operands_of(call, operands);
    int device = autotune_gemm_context_device(context);
    for (int i = 0; i < 3; ++i) {
        autotune_status status = check_operand_memory(driver, device, &operands[i], call->table->element_bytes);
        if (status != AUTOTUNE_SUCCESS)
            return status;
    }
    return AUTOTUNE_SUCCESS;
}
