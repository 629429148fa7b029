// Runs each GEMM the library has (sgemm, hgemm, bgemm) on one shape and checks a few elements of C against a dot product
// on the CPU. Usage: autotune_gemm_example [M N K] (default 1000 1000 1000).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "autotune_gemm.h"

namespace {

int fail(const char* what, autotune_status status) {
    std::fprintf(stderr, "%s: %s: %s\n", what, autotune_status_string(status), autotune_last_error());
    return 1;
}

int cuda_fail(const char* what, cudaError_t error) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(error));
    return 1;
}

// Storage of one element type on the host: float, or __half or __nv_bfloat16 converted from float; and one
// rounding of a result to it (its unit roundoff, and the spacing of its subnormals; none for float).
template <typename T> T from_float(float x) { return static_cast<T>(x); }
template <> __half from_float<__half>(float x) { return __float2half(x); }
template <> __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
float to_float(float x) { return x; }
float to_float(__half x) { return __half2float(x); }
float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
double unit_roundoff(float) { return 0.0; }
double unit_roundoff(__half) { return std::ldexp(1.0, -11); }
double unit_roundoff(__nv_bfloat16) { return std::ldexp(1.0, -8); }
double subnormal_step(float) { return 0.0; }
double subnormal_step(__half) { return std::ldexp(1.0, -24); }
double subnormal_step(__nv_bfloat16) { return std::ldexp(1.0, -133); }

// C = alpha * A B + beta * C for one dtype; checks 16 elements against the CPU.
template <typename T, typename Gemm>
int run(const char* name, const char* dtype, Gemm gemm, int m, int n, int k) {
    const char* kernel = autotune_kernel_for(dtype, m, n, k);
    if (kernel == nullptr) {
        std::fprintf(stderr, "%s: %s\n", name, autotune_last_error());
        return 1;
    }
    std::mt19937 generator(42);
    std::normal_distribution<float> normal;
    std::vector<T> a(size_t(m) * k), b(size_t(k) * n), c(size_t(m) * n);
    for (T& x : a) x = from_float<T>(normal(generator));
    for (T& x : b) x = from_float<T>(normal(generator));
    for (T& x : c) x = from_float<T>(normal(generator));
    T *da = nullptr, *db = nullptr, *dc = nullptr;
    cudaError_t error;
    if ((error = cudaMalloc(&da, a.size() * sizeof(T))) || (error = cudaMalloc(&db, b.size() * sizeof(T))) ||
        (error = cudaMalloc(&dc, c.size() * sizeof(T))))
        return cuda_fail("cudaMalloc", error);
    cudaMemcpy(da, a.data(), a.size() * sizeof(T), cudaMemcpyHostToDevice);
    cudaMemcpy(db, b.data(), b.size() * sizeof(T), cudaMemcpyHostToDevice);
    cudaMemcpy(dc, c.data(), c.size() * sizeof(T), cudaMemcpyHostToDevice);
    const float alpha = 1.0f, beta = 0.5f;
    autotune_status status = gemm(m, n, k, alpha, da, db, beta, dc, nullptr);
    if (status != AUTOTUNE_SUCCESS) return fail(name, status);
    std::vector<T> out(c.size());
    if ((error = cudaMemcpy(out.data(), dc, out.size() * sizeof(T), cudaMemcpyDeviceToHost)))
        return cuda_fail("the GEMM", error);
    cudaFree(da);
    cudaFree(db);
    cudaFree(dc);
    double worst = 0.0;  // |got - want| over the bound, at most 1 passes
    for (int sample = 0; sample < 16; ++sample) {
        int row = int(generator() % unsigned(m)), col = int(generator() % unsigned(n));
        double want = 0.0, magnitude = 0.0;
        for (int i = 0; i < k; ++i) {
            double term = double(to_float(a[size_t(row) * k + i])) * to_float(b[size_t(i) * n + col]);
            want += term;
            magnitude += std::fabs(term);
        }
        double initial = to_float(c[size_t(row) * n + col]);
        want = alpha * want + beta * initial;
        double bound = 2.0 * k * std::ldexp(1.0, -23) * (std::fabs(alpha) * magnitude + std::fabs(beta * initial)) +
                       2.0 * unit_roundoff(T()) * (std::fabs(want) + std::fabs(beta * initial)) +
                       2.0 * subnormal_step(T()) + 1e-30;
        double got = to_float(out[size_t(row) * n + col]);
        double ratio = std::isfinite(got) ? std::fabs(got - want) / bound : INFINITY;
        worst = std::max(worst, ratio);
    }
    std::printf("%s %dx%dx%d: kernel %s, max error %.3g of the bound over 16 elements: %s\n", name, m, n, k, kernel,
                worst, worst <= 1.0 ? "ok" : "WRONG");
    return worst <= 1.0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    int m = 1000, n = 1000, k = 1000;
    if (argc == 4) {
        m = std::atoi(argv[1]);
        n = std::atoi(argv[2]);
        k = std::atoi(argv[3]);
    } else if (argc != 1) {
        std::fprintf(stderr, "usage: %s [M N K]\n", argv[0]);
        return 2;
    }
    cudaError_t error = cudaSetDevice(0);
    if (error == cudaSuccess) error = cudaFree(nullptr);  // makes the device's context current
    if (error != cudaSuccess) return cuda_fail("CUDA device 0", error);
    std::printf("autotune_gemm for %s\n", autotune_arch());
    int failed = 0;
#if AUTOTUNE_GEMM_HAS_SGEMM
    failed |= run<float>("autotune_sgemm", "f32", autotune_sgemm, m, n, k);
#endif
#if AUTOTUNE_GEMM_HAS_HGEMM
    failed |= run<__half>("autotune_hgemm", "f16", autotune_hgemm, m, n, k);
#endif
#if AUTOTUNE_GEMM_HAS_BGEMM
    failed |= run<__nv_bfloat16>("autotune_bgemm", "bf16", autotune_bgemm, m, n, k);
#endif
    return failed;
}
