/* Which kernel a problem gets: the rule of autotune's selection table. */
#ifndef AUTOTUNE_GEMM_DISPATCH_H
#define AUTOTUNE_GEMM_DISPATCH_H

#include "table.h"

/* The kernel (index into autotune_gemm_kernels) for m x n x k, -1 where the dtype has no rules; *cublas
   is set to 1 where the table picks cuBLAS instead, else 0. It is chosen at the tuned shape nearest to
   m x n x k (the least |log m - log m'| + |log n - log n'| + |log k - log k'| rounded to 9 decimals, a
   tie going to the larger tuned shape, then to the earlier rule): of the kernels measured there, the
   least ms * work(m x n x k) / work(there) of those that run m x n x k (serves, or a build for any shape), a
   tie going to the faster there, where work is the busiest
   SM's k-tiles, cdiv(blocks, sms) * k-tiles per block; and cuBLAS where that least time is more than
   cuBLAS's time there times cost(m x n x k) / cost(there), cost = max(2 * m * n * k, ridge * (m * k + k * n +
   m * n)) (autotune.select.scaling.cublas_ms_at; ridge 0: m * n * k alone), or where m x n x k is more than
   twice, or less than half, that tuned shape on any axis (a kernel's time is not carried that far), or where
   m x n x k cuts that kernel's tiles along N or K and the tuned shape has them whole (a time measured on whole
   tiles is not carried to cut ones). The
   kernel returned is the one to run where cuBLAS cannot be; -1 with *cublas 1 where no kernel of the rule runs
   m x n x k (only cuBLAS can). */
int autotune_gemm_pick(const autotune_dtype_table* table, int m, int n, int k, int* cublas);

/* Sizes the table was tuned for, per axis: from ceil(smallest tuned / AUTOTUNE_TUNED_RANGE_FACTOR) to
   largest tuned * AUTOTUNE_TUNED_RANGE_FACTOR. 0 when m, n and k are all inside; else 1, 2 or 3 for the
   first axis outside (m, n, k), with that axis's bounds in low and high. */
#define AUTOTUNE_TUNED_RANGE_FACTOR 2 /* autotune.select.kernel_table.TUNED_RANGE_FACTOR */
int autotune_gemm_outside(const autotune_dtype_table* table, int m, int n, int k, long long* low, long long* high);

#endif
