#include "dispatch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define NEAR_HALF 1e-3 /* how close to a rounding boundary the fast rounding is not trusted */

/* round(x, 9) * 1e9 as Python computes it: x's exact binary value rounded to 9 decimals (an exact
   decimal tie cannot occur). x * 1e9 is rounded once, so its nearest integer is the right one unless
   it lies within that rounding of a half; there the decimal expansion decides. */
static double nanos(double x) {
    double scaled = x * 1e9;
    double nearest = nearbyint(scaled);
    if (fabs(fabs(scaled - nearest) - 0.5) > NEAR_HALF)
        return nearest;
    char text[64];
    snprintf(text, sizeof text, "%.9f", x);
    double whole = 0.0;
    for (const char* c = text; *c; ++c)
        if (*c >= '0' && *c <= '9')
            whole = whole * 10.0 + (*c - '0');
    return whole;
}

#define CARRIED_FACTOR 2LL /* autotune.shapes.CARRIED_FACTOR */

/* The rule's distance to m x n x k, summed left to right as Python's sum() does. */
static double distance(const autotune_rule* rule, int m, int n, int k) {
    double total = fabs(log((double)rule->m) - log((double)m));
    total += fabs(log((double)rule->n) - log((double)n));
    total += fabs(log((double)rule->k) - log((double)k));
    return total;
}

static const autotune_rule* nearest_rule(const autotune_dtype_table* table, int m, int n, int k) {
    const autotune_rule* best = NULL;
    double best_nanos = 0.0;
    for (int i = 0; i < table->rule_count; ++i) {
        const autotune_rule* rule = &table->rules[i];
        double key = nanos(distance(rule, m, n, k));
        if (best == NULL || key < best_nanos || (key == best_nanos && rule->volume_rank > best->volume_rank)) {
            best = rule;
            best_nanos = key;
        }
    }
    return best;
}

/* The k-tiles the busiest SM runs: autotune.select.scaling.busiest_sm_work. */
static int64_t work(const autotune_kernel* kernel, int sms, int64_t m, int64_t n, int64_t k) {
    int64_t grid[3];
    kernel->grid(m, n, k, grid);
    int64_t blocks = grid[0] * grid[1] * grid[2];
    return (blocks + sms - 1) / sms * kernel->k_tiles(m, n, k);
}

/* Whether size along axis (1 n, 2 k; the other sizes 1) ends a whole tile of the kernel: one more would take
   one SM more work (autotune.select.kernel_table._whole). */
static int whole(const autotune_kernel* kernel, int axis, int64_t size) {
    int64_t probe[3] = {1, 1, 1}, more[3] = {1, 1, 1};
    probe[axis] = size;
    more[axis] = size + 1;
    return work(kernel, 1, more[0], more[1], more[2]) > work(kernel, 1, probe[0], probe[1], probe[2]);
}

/* m * n * k as a double, multiplied left to right: autotune.select.scaling.volume. */
static double volume(int m, int n, int k) { return (double)m * (double)n * (double)k; }

/* max(2 * m * n * k, ridge * (m * k + k * n + m * n)) as doubles, left to right:
   autotune.select.scaling.roofline_cost. */
static double roofline_cost(double ridge, int m, int n, int k) {
    double flops = 2.0 * volume(m, n, k);
    double traffic = ridge * ((double)m * (double)k + (double)k * (double)n + (double)m * (double)n);
    return flops > traffic ? flops : traffic;
}

int autotune_gemm_pick(const autotune_dtype_table* table, int m, int n, int k, int* cublas) {
    *cublas = 0;
    const autotune_rule* rule = nearest_rule(table, m, n, k);
    if (rule == NULL)
        return -1;
    int best = -1;
    double best_ms = 0.0;
    for (int i = 0; i < rule->time_count; ++i) {
        const autotune_kernel* kernel = &autotune_gemm_kernels[rule->times[i].kernel];
        if (!kernel->serves(m, n, k) && kernel->any_shape < 0)
            continue; /* built for other shapes only (fewer rows, say) */
        /* autotune.select.scaling.scaled_ms: ms * work here / work there, left to right */
        double predicted = rule->times[i].ms * (double)work(kernel, table->sms, m, n, k) /
                           (double)work(kernel, table->sms, rule->m, rule->n, rule->k);
        if (best < 0 || predicted < best_ms) {
            best = rule->times[i].kernel;
            best_ms = predicted;
        }
    }
    if (best < 0) { /* no kernel of the rule runs m x n x k: cuBLAS must */
        *cublas = 1;
        return -1;
    }
    /* autotune.shapes.farther_than_carried: more than twice, or less than half, the rule's size on
       some axis: cuBLAS, as a kernel's time is not carried that far */
    const long long here[3] = {m, n, k}, there[3] = {rule->m, rule->n, rule->k};
    for (int axis = 0; axis < 3; ++axis)
        if (here[axis] > CARRIED_FACTOR * there[axis] || there[axis] > CARRIED_FACTOR * here[axis])
            *cublas = 1;
    /* autotune.select.kernel_table.cuts_whole_tiles: the kernel's tiles whole along N or K at the rule and cut
       here: cuBLAS, as a time measured on whole tiles is not carried to cut ones */
    for (int axis = 1; axis < 3; ++axis)
        if (whole(&autotune_gemm_kernels[best], axis, there[axis]) && !whole(&autotune_gemm_kernels[best], axis, here[axis]))
            *cublas = 1;
    /* autotune.select.scaling.cublas_ms_at: cuBLAS's ms * cost here / cost there, left to right */
    if (!*cublas && rule->cublas_ms > 0.0)
        *cublas = best_ms > rule->cublas_ms * roofline_cost(table->ridge, m, n, k) /
                                roofline_cost(table->ridge, rule->m, rule->n, rule->k);
    if (!autotune_gemm_kernels[best].serves(m, n, k)) /* built for whole tiles, say: its build for any shape */
        best = autotune_gemm_kernels[best].any_shape;
    return best;
}

/* The table's tuned range: per axis from ceil(smallest tuned size / 2) to twice the largest, as
   autotune.select.kernel_table.DtypeTable.outside defines it. 0 inside; else the axis (0 m, 1 n, 2 k) + 1,
   with the bounds in low and high. */
int autotune_gemm_outside(const autotune_dtype_table* table, int m, int n, int k, long long* low, long long* high) {
    const int sizes[3] = {m, n, k};
    for (int axis = 0; axis < 3; ++axis) {
        long long smallest = 0, largest = 0;
        for (int i = 0; i < table->rule_count; ++i) {
            const autotune_rule* rule = &table->rules[i];
            long long size = axis == 0 ? rule->m : axis == 1 ? rule->n : rule->k;
            if (i == 0 || size < smallest)
                smallest = size;
            if (i == 0 || size > largest)
                largest = size;
        }
        *low = (smallest + AUTOTUNE_TUNED_RANGE_FACTOR - 1) / AUTOTUNE_TUNED_RANGE_FACTOR;
        *high = largest * AUTOTUNE_TUNED_RANGE_FACTOR;
        if (sizes[axis] < *low || sizes[axis] > *high)
            return axis + 1;
    }
    return 0;
}
