// The exported C library (autotune export --format cuda) checked against cuBLAS on the GPU.
//
//   export_check OUT.csv [f32|f16|all] [SHAPES_FILE]
//
// For 20 shapes per dtype (square, odd, tall, wide, long K, LLM-like), and 5 of a linear layer's x @ W^T
// (B stored n x k, autotune_sgemm_ex's transb = T; one with C's rows padded, ldc > n): random normal A, B
// and C drawn fresh per shape; the library's GEMM with beta 0 on a NaN-poisoned C and with beta 0.5 on a
// random C, every element compared with cublasGemmEx in fp32 (CUBLAS_COMPUTE_32F, no TF32) of A and B
// widened to fp32 (B transposed into k x n first, so the reference is the plain product), and C's padding
// checked untouched, within autotune/gpu/measure.py's error_bound (tol 2: 2 K 2^-23 (|alpha| |A||B| + |beta C|),
// plus 2 2^-11 (|ref| + |beta C|) + 2 2^-24 for fp16 output). Then both are timed like
// measure.time_launches: the L2 flushed by a memset before each start event (it keeps the GPU busy
// while the host submits the launch), CUDA events around each launch, the median of 30 each, in 5 rounds
// of 6 where the library and cuBLAS take turns, the order alternating. The library's output is checked again, and cuBLAS against the same bound. One line per shape, a CSV row per
// shape, each saying what the library ran: its tuned kernel, or cuBLAS where its table predicts the
// kernel slower or the shape is outside its tuned range, and cuBLAS loads (autotune_kernel_for says
// "cublas"; AUTOTUNE_GEMM_CUBLAS=off makes it run the tuned kernels everywhere, and skip the x @ W^T
// shapes, which only cuBLAS takes); the exit code is 1 if any check failed. SHAPES_FILE (one MxNxK per line, `#`
// comments) replaces the shapes: each is checked as A @ B and as x @ W^T.
//
// Build (bench/h200.sh cudalib): nvcc -x cu -arch=sm_90 ... -lautotune_gemm -lcublas -ldl -lpthread
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "autotune_gemm.h"

namespace {

struct Shape {
    int m, n, k;
    const char* kind;
    bool transb = false;  // B stored n x k: autotune_sgemm_ex(AUTOTUNE_OP_N, AUTOTUNE_OP_T, ...)
    int ldc_padding = 0;  // ldc = n + ldc_padding
};

const Shape SHAPES[] = {
    {256, 256, 256, "square"},       {1024, 1024, 1024, "square"},   {2048, 2048, 2048, "square"},
    {4096, 4096, 4096, "square"},    {8192, 8192, 8192, "square"},   {1000, 1000, 1000, "odd"},
    {777, 1333, 555, "odd"},         {1023, 1025, 1027, "odd"},      {33, 65, 129, "odd"},
    {8192, 256, 1024, "tall"},       {16384, 512, 512, "tall"},      {256, 8192, 1024, "wide"},
    {512, 16384, 512, "wide"},       {256, 256, 16384, "long-K"},    {1024, 1024, 8192, "long-K"},
    {16, 4096, 4096, "llm"},         {128, 14336, 4096, "llm"},      {4096, 4096, 11008, "llm"},
    {8192, 8192, 1024, "llm"},       {1, 4096, 4096, "llm"},
    {16, 4096, 4096, "x@W^T", true},  {128, 14336, 4096, "x@W^T", true}, {1024, 4096, 4096, "x@W^T", true},
    {777, 1333, 555, "x@W^T", true},  {1000, 1000, 1000, "x@W^T+ldc", true, 24},
    {1, 14336, 4096, "x@W^T", true},  {32, 14336, 4096, "x@W^T", true}, {4096, 4096, 14336, "x@W^T", true},
    {16384, 4096, 4096, "x@W^T", true},
};

// The shapes of a file, one MxNxK per line (`#` starts a comment), each as A @ B and as x @ W^T; an empty list
// where a line is not a shape (the message names it).
std::vector<Shape> read_shapes(const char* path) {
    std::vector<Shape> shapes;
    FILE* file = std::fopen(path, "r");
    if (file == nullptr) {
        std::fprintf(stderr, "cannot read %s: %s\n", path, std::strerror(errno));
        return shapes;
    }
    char line[256];
    while (std::fgets(line, sizeof line, file) != nullptr) {
        line[std::strcspn(line, "#")] = '\0';
        int m = 0, n = 0, k = 0;
        char rest = '\0';
        const int fields = std::sscanf(line, " %dx%dx%d %c", &m, &n, &k, &rest);
        if (fields <= 0) continue;  // blank or a comment
        if (fields != 3 || m < 1 || n < 1 || k < 1) {
            std::fprintf(stderr, "%s: not a shape MxNxK: %s\n", path, line);
            shapes.clear();
            break;
        }
        shapes.push_back({m, n, k, "file"});
        shapes.push_back({m, n, k, "file x@W^T", true});
    }
    std::fclose(file);
    return shapes;
}

constexpr int WARMUP = 2;
constexpr int ROUNDS = 5;      // rounds of timing, the library and cuBLAS taking turns, the order alternating
constexpr int PER_ROUND = 6;   // timed launches of each per round
constexpr float TOL = 2.0f;                 // measure.DEFAULT_TOL_FACTOR
constexpr size_t MIN_FLUSH_BYTES = 256u << 20;  // measure.MIN_FLUSH_BYTES
constexpr int THREADS = 256;
constexpr int BLOCKS = 2048;

void check_cuda(cudaError_t error, const char* what) {
    if (error != cudaSuccess) {
        std::fprintf(stderr, "%s: %s (%s)\n", what, cudaGetErrorString(error), cudaGetErrorName(error));
        std::exit(1);
    }
}

void check_cublas(cublasStatus_t status, const char* what) {
    if (status != CUBLAS_STATUS_SUCCESS) {
        std::fprintf(stderr, "%s: cuBLAS status %d\n", what, int(status));
        std::exit(1);
    }
}

// -- device helpers --------------------------------------------------------------------------------

__device__ unsigned long long mix(unsigned long long x) {  // splitmix64
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

__device__ float to_float(float x) { return x; }
__device__ float to_float(__half x) { return __half2float(x); }
template <typename T> __device__ T from_float(float x);
template <> __device__ float from_float<float>(float x) { return x; }
template <> __device__ __half from_float<__half>(float x) { return __float2half(x); }

// Standard normal values (Box-Muller on a counter-based hash of seed and index), stored as T.
template <typename T> __global__ void fill_normal(T* out, size_t count, unsigned long long seed) {
    const unsigned long long key = mix(seed);
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
        unsigned long long bits = mix(key ^ i);
        float u1 = float((bits >> 40) + 1) * (1.0f / 16777216.0f);  // (0, 1]
        float u2 = float(bits & 0xFFFFFF) * (1.0f / 16777216.0f);
        out[i] = from_float<T>(sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2));
    }
}

// out (rows x columns, row-major, packed) = in as fp32, or its absolute value times `scale`; in is rows x
// columns with its rows ld apart, or (transposed) columns x rows with its rows ld apart.
template <typename T>
__global__ void widen(const T* in, float* out, size_t rows, size_t columns, size_t ld, bool transposed, bool absolute,
                      float scale) {
    const size_t count = rows * columns;
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
        size_t row = i / columns, column = i % columns;
        float x = to_float(in[transposed ? column * ld + row : row * ld + column]);
        out[i] = absolute ? fabsf(x) * scale : x;
    }
}

// The largest |out - ref| / bound (inf for NaN or inf), as the bits of a non-negative float. out is rows x
// columns with its rows ld apart; ref, scale and c are packed. Past the columns, out must be as it was: NaN
// (the poison) for beta 0, else the C it started from (c_stored).
template <typename T>
__global__ void worst_ratio(const T* out, const float* ref, const float* scale, const float* c, const T* c_stored,
                            float beta, int k, bool half_output, size_t rows, size_t columns, size_t ld,
                            unsigned int* worst) {
    unsigned int mine = 0;
    const size_t count = rows * ld;
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
        size_t row = i / ld, column = i % ld, j = row * columns + column;
        float ratio;
        if (column >= columns) {
            float x = to_float(out[i]);
            ratio = (beta == 0.0f ? isnan(x) : x == to_float(c_stored[i])) ? 0.0f : INFINITY;
        } else {
            float bound = TOL * float(k) * 0x1p-23f * scale[j];
            if (half_output) bound += TOL * 0x1p-11f * (fabsf(ref[j]) + fabsf(beta * c[j])) + TOL * 0x1p-24f;
            bound += 1e-30f;
            ratio = fabsf(to_float(out[i]) - ref[j]) / bound;
            if (!(ratio <= FLT_MAX)) ratio = INFINITY;
        }
        mine = max(mine, __float_as_uint(ratio));
    }
    mine = __reduce_max_sync(0xFFFFFFFFu, mine);
    if (threadIdx.x % 32 == 0) atomicMax(worst, mine);
}

// -- host --------------------------------------------------------------------------------------------

template <typename T> struct Dtype;
template <> struct Dtype<float> {
    static constexpr const char* name = "f32";
    static constexpr cudaDataType_t cuda = CUDA_R_32F;
    static autotune_status gemm(int m, int n, int k, float alpha, const float* a, const float* b, float beta,
                                float* c, cudaStream_t stream) {
        return autotune_sgemm(m, n, k, alpha, a, b, beta, c, stream);
    }
    static autotune_status gemm_ex(autotune_op transb, int m, int n, int k, float alpha, const float* a, const float* b,
                                   int ldb, float beta, float* c, int ldc, cudaStream_t stream) {
        return autotune_sgemm_ex(AUTOTUNE_OP_N, transb, m, n, k, alpha, a, k, b, ldb, beta, c, ldc, stream);
    }
};
template <> struct Dtype<__half> {
    static constexpr const char* name = "f16";
    static constexpr cudaDataType_t cuda = CUDA_R_16F;
    static autotune_status gemm(int m, int n, int k, float alpha, const __half* a, const __half* b, float beta,
                                __half* c, cudaStream_t stream) {
        return autotune_hgemm(m, n, k, alpha, a, b, beta, c, stream);
    }
    static autotune_status gemm_ex(autotune_op transb, int m, int n, int k, float alpha, const __half* a,
                                   const __half* b, int ldb, float beta, __half* c, int ldc, cudaStream_t stream) {
        return autotune_hgemm_ex(AUTOTUNE_OP_N, transb, m, n, k, alpha, a, k, b, ldb, beta, c, ldc, stream);
    }
};

// Row-major C = alpha A op(B) + beta C as cuBLAS's column-major C^T = op(B)^T A^T: operands swapped. B is
// k x n, or n x k where transb; C's rows are ldc apart (0: n).
void cublas_gemm(cublasHandle_t handle, int m, int n, int k, float alpha, const void* a, const void* b, float beta,
                 void* c, cudaDataType_t type, bool transb = false, int ldc = 0) {
    check_cublas(cublasGemmEx(handle, transb ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, b, type,
                              transb ? k : n, a, type, k, &beta, c, type, ldc ? ldc : n, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
}

template <typename T> T* device_array(size_t count) {
    T* pointer = nullptr;
    check_cuda(cudaMalloc(&pointer, count * sizeof(T)), "cudaMalloc");
    return pointer;
}

struct Result {
    std::string kernel, message;
    bool cublas = false;   // the library ran cuBLAS (its table's pick), not a tuned kernel
    bool skipped = false;  // a layout only cuBLAS takes, and the library has no cuBLAS
    double error_beta0 = 0, error_beta05 = 0, error_timed = 0, error_cublas = 0, ms = 0, cublas_ms = 0;
    bool ok = true;
};

struct Checker {
    cudaStream_t stream;
    cublasHandle_t handle;
    void* flush;
    size_t flush_bytes;
    unsigned int* worst;

    // out and c_stored: rows x columns, their rows ld apart; ref, scale and c packed.
    float worst_of(const void* out, const float* ref, const float* scale, const float* c, const void* c_stored,
                   float beta, int k, bool half_output, size_t rows, size_t columns, size_t ld) {
        check_cuda(cudaMemsetAsync(worst, 0, sizeof(unsigned int), stream), "cudaMemsetAsync");
        if (half_output)
            worst_ratio<<<BLOCKS, THREADS, 0, stream>>>(static_cast<const __half*>(out), ref, scale, c,
                                                        static_cast<const __half*>(c_stored), beta, k, true, rows,
                                                        columns, ld, worst);
        else
            worst_ratio<<<BLOCKS, THREADS, 0, stream>>>(static_cast<const float*>(out), ref, scale, c,
                                                        static_cast<const float*>(c_stored), beta, k, false, rows,
                                                        columns, ld, worst);
        unsigned int bits = 0;
        check_cuda(cudaMemcpyAsync(&bits, worst, sizeof bits, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
        check_cuda(cudaStreamSynchronize(stream), "the error check");
        float ratio;
        std::memcpy(&ratio, &bits, sizeof ratio);
        return ratio;
    }

    // PER_ROUND times (ms) of launches, each after an L2 flush; launch() returns false on failure.
    template <typename Launch> std::vector<float> time(Launch launch, bool* ok) {
        for (int i = 0; i < WARMUP; ++i) *ok &= launch();
        std::vector<cudaEvent_t> events(2 * PER_ROUND);
        for (cudaEvent_t& event : events) check_cuda(cudaEventCreate(&event), "cudaEventCreate");
        for (int r = 0; r < PER_ROUND; ++r) {
            check_cuda(cudaMemsetAsync(flush, 0, flush_bytes, stream), "the L2 flush");
            check_cuda(cudaEventRecord(events[2 * r], stream), "cudaEventRecord");
            *ok &= launch();
            check_cuda(cudaEventRecord(events[2 * r + 1], stream), "cudaEventRecord");
        }
        check_cuda(cudaStreamSynchronize(stream), "the timed launches");
        std::vector<float> ms(PER_ROUND);
        for (int r = 0; r < PER_ROUND; ++r) check_cuda(cudaEventElapsedTime(&ms[r], events[2 * r], events[2 * r + 1]), "elapsed");
        for (cudaEvent_t event : events) cudaEventDestroy(event);
        return ms;
    }

    // The median ms of each of two launches over ROUNDS rounds in which they take turns, the order alternating
    // (clocks, heat and power weigh on both alike).
    template <typename First, typename Second>
    std::pair<double, double> time_both(First first, Second second, bool* ok) {
        std::vector<float> a, b;
        for (int round = 0; round < ROUNDS; ++round) {
            for (int turn = 0; turn < 2; ++turn) {
                const bool first_now = (turn == 0) == (round % 2 == 0);
                std::vector<float> ms = first_now ? time(first, ok) : time(second, ok);
                (first_now ? a : b).insert((first_now ? a : b).end(), ms.begin(), ms.end());
            }
        }
        return {median(a), median(b)};
    }

    static double median(std::vector<float> ms) {
        std::sort(ms.begin(), ms.end());
        return 0.5 * (ms[(ms.size() - 1) / 2] + ms[ms.size() / 2]);
    }

    template <typename T> Result run(const Shape& shape, unsigned long long seed) {
        const int m = shape.m, n = shape.n, k = shape.k, ldb = shape.transb ? k : n, ldc = n + shape.ldc_padding;
        const bool natural = !shape.transb && ldc == n;  // the layout autotune_sgemm takes
        const size_t size_a = size_t(m) * k, size_b = size_t(k) * n, size_c = size_t(m) * n;
        const size_t stored_c = size_t(m) * ldc;
        const bool half_output = sizeof(T) == 2;
        Result result;
        const autotune_op transb = shape.transb ? AUTOTUNE_OP_T : AUTOTUNE_OP_N;
        const char* kernel = autotune_kernel_for_ex(Dtype<T>::name, AUTOTUNE_OP_N, transb, m, n, k, k, ldb, ldc);
        result.kernel = kernel ? kernel : "-";
        result.cublas = kernel != nullptr && std::strcmp(kernel, AUTOTUNE_GEMM_CUBLAS_NAME) == 0;
        if (kernel == nullptr && !natural) {
            result.skipped = true;
            result.message = autotune_last_error();
            return result;
        }
        auto library_gemm = [&](const T* a, const T* b, float beta, T* out) {
            return natural ? Dtype<T>::gemm(m, n, k, 1.0f, a, b, beta, out, stream)
                           : Dtype<T>::gemm_ex(transb, m, n, k, 1.0f, a, b, ldb, beta, out, ldc, stream);
        };
        T *a = device_array<T>(size_a), *b = device_array<T>(size_b), *c = device_array<T>(stored_c);
        T* out = device_array<T>(stored_c);
        float *a32 = device_array<float>(size_a), *b32 = device_array<float>(size_b), *c32 = device_array<float>(size_c);
        float *abs_a = device_array<float>(size_a), *abs_b = device_array<float>(size_b);
        float *ref = device_array<float>(size_c), *scale = device_array<float>(size_c);
        fill_normal<<<BLOCKS, THREADS, 0, stream>>>(a, size_a, seed);
        fill_normal<<<BLOCKS, THREADS, 0, stream>>>(b, size_b, seed + 1);
        fill_normal<<<BLOCKS, THREADS, 0, stream>>>(c, stored_c, seed + 2);
        // packed fp32 copies: A m x k, B k x n (transposed from n x k where transb), C m x n
        widen<<<BLOCKS, THREADS, 0, stream>>>(a, a32, m, k, k, false, false, 1.0f);
        widen<<<BLOCKS, THREADS, 0, stream>>>(b, b32, k, n, ldb, shape.transb, false, 1.0f);
        widen<<<BLOCKS, THREADS, 0, stream>>>(c, c32, m, n, ldc, false, false, 1.0f);
        widen<<<BLOCKS, THREADS, 0, stream>>>(a, abs_a, m, k, k, false, true, 1.0f);
        widen<<<BLOCKS, THREADS, 0, stream>>>(b, abs_b, k, n, ldb, shape.transb, true, 1.0f);
        check_cuda(cudaGetLastError(), "the operand kernels");
        const float alpha = 1.0f;
        // beta 0.5 first, then beta 0: ref and scale stay those of beta 0 for the timed launches.
        for (float beta : {0.5f, 0.0f}) {
            check_cuda(cudaMemcpyAsync(ref, c32, size_c * sizeof(float), cudaMemcpyDeviceToDevice, stream), "copy C");
            cublas_gemm(handle, m, n, k, alpha, a32, b32, beta, ref, CUDA_R_32F);
            widen<<<BLOCKS, THREADS, 0, stream>>>(c, scale, m, n, ldc, false, true, std::fabs(beta));  // |beta C|
            cublas_gemm(handle, m, n, k, std::fabs(alpha), abs_a, abs_b, 1.0f, scale, CUDA_R_32F);
            if (beta == 0.0f)
                check_cuda(cudaMemsetAsync(out, 0xFF, stored_c * sizeof(T), stream), "NaN poison");  // NaN in f32, f16
            else
                check_cuda(cudaMemcpyAsync(out, c, stored_c * sizeof(T), cudaMemcpyDeviceToDevice, stream), "copy C");
            autotune_status status = library_gemm(a, b, beta, out);
            if (status != AUTOTUNE_SUCCESS) {
                result.ok = false;
                result.message = std::string(autotune_status_string(status)) + ": " + autotune_last_error();
                break;
            }
            check_cuda(cudaStreamSynchronize(stream), "the library's GEMM");
            double error = worst_of(out, ref, scale, c32, c, beta, k, half_output, m, n, ldc);
            (beta == 0.0f ? result.error_beta0 : result.error_beta05) = error;
            result.ok &= error <= 1.0;
        }
        if (result.message.empty()) {
            bool launched = true;
            auto library = [&] { return library_gemm(a, b, 0.0f, out) == AUTOTUNE_SUCCESS; };
            auto reference = [&] {
                float beta = 0.0f;
                cublas_gemm(handle, m, n, k, alpha, a, b, beta, out, Dtype<T>::cuda, shape.transb, ldc);
                return true;
            };
            std::tie(result.ms, result.cublas_ms) = time_both(library, reference, &launched);
            launched &= library();
            check_cuda(cudaStreamSynchronize(stream), "the library's GEMM");
            result.error_timed = worst_of(out, ref, scale, c32, c, 0.0f, k, half_output, m, n, ldc);
            reference();
            check_cuda(cudaStreamSynchronize(stream), "cuBLAS's GEMM");
            result.error_cublas = worst_of(out, ref, scale, c32, c, 0.0f, k, half_output, m, n, ldc);
            result.ok &= launched && result.error_timed <= 1.0 && result.error_cublas <= 1.0;
            if (!launched) result.message = std::string("a timed launch failed: ") + autotune_last_error();
            else if (result.error_cublas > 1.0) result.message = "cuBLAS misses the bound: the bound is too tight";
        }
        for (void* pointer : {(void*)a, (void*)b, (void*)c, (void*)out, (void*)a32, (void*)b32, (void*)c32,
                              (void*)abs_a, (void*)abs_b, (void*)ref, (void*)scale})
            check_cuda(cudaFree(pointer), "cudaFree");
        return result;
    }
};

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2 || argc > 4 || (argc >= 3 && std::strcmp(argv[2], "f32") && std::strcmp(argv[2], "f16") &&
                                 std::strcmp(argv[2], "all"))) {
        std::fprintf(stderr, "usage: %s OUT.csv [f32|f16|all] [SHAPES_FILE]\n", argv[0]);
        return 2;
    }
    const std::string which = argc >= 3 ? argv[2] : "all";
    const std::vector<Shape> shapes =
        argc == 4 ? read_shapes(argv[3]) : std::vector<Shape>(std::begin(SHAPES), std::end(SHAPES));
    if (shapes.empty()) return 2;
    FILE* csv = std::fopen(argv[1], "w");
    if (csv == nullptr) {
        std::fprintf(stderr, "cannot write %s: %s\n", argv[1], std::strerror(errno));
        return 2;
    }
    check_cuda(cudaSetDevice(0), "cudaSetDevice");
    check_cuda(cudaFree(nullptr), "the CUDA context");
    cudaDeviceProp properties;
    check_cuda(cudaGetDeviceProperties(&properties, 0), "cudaGetDeviceProperties");
    Checker checker{};
    check_cuda(cudaStreamCreateWithFlags(&checker.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cublas(cublasCreate(&checker.handle), "cublasCreate");
    check_cublas(cublasSetStream(checker.handle, checker.stream), "cublasSetStream");
    checker.flush_bytes = std::max(size_t(2) * size_t(properties.l2CacheSize), MIN_FLUSH_BYTES);
    check_cuda(cudaMalloc(&checker.flush, checker.flush_bytes), "cudaMalloc (flush)");
    check_cuda(cudaMalloc(&checker.worst, sizeof(unsigned int)), "cudaMalloc");
    const char* choice = std::getenv("AUTOTUNE_GEMM_CUBLAS");
    std::printf("%s (sm_%d%d), library built for %s; median of %d launches after an L2 flush (interleaved with cuBLAS's); err: the worst\n"
                "|C - reference| / bound of beta 0, beta 0.5 and the timed launches; ratio: cuBLAS ms / library ms;\n"
                "ran: the library's tuned kernel, or cuBLAS where its table picks it or outside its tuned range\n"
                "(AUTOTUNE_GEMM_CUBLAS=%s)\n",
                properties.name, properties.major, properties.minor, autotune_arch(), ROUNDS * PER_ROUND,
                choice ? choice : "unset: the first libcublas that loads");
    std::fprintf(csv, "dtype,m,n,k,kind,ran,kernel,max_error_over_bound,error_beta0,error_beta05,error_timed,"
                      "cublas_error,ms,cublas_ms,ratio_to_cublas,ok,message\n");
    int failed = 0, checked = 0;
    for (const char* dtype : {"f32", "f16"}) {
        if (which != "all" && which != dtype) continue;
        bool present = std::strcmp(dtype, "f32") == 0 ? AUTOTUNE_GEMM_HAS_SGEMM : AUTOTUNE_GEMM_HAS_HGEMM;
        if (!present) {
            std::printf("%s: the library has no %s kernels\n", dtype, dtype);
            failed += which != "all";
            continue;
        }
        int ran_cublas = 0, timed = 0;
        double log_ratios = 0.0, lowest = 0.0;
        for (size_t i = 0; i < shapes.size(); ++i) {
            const Shape& shape = shapes[i];
            unsigned long long seed = 1000ull * i + (dtype[1] == '1' ? 500 : 0);
            Result r = std::strcmp(dtype, "f32") == 0 ? checker.run<float>(shape, seed)
                                                      : checker.run<__half>(shape, seed);
            if (r.skipped) {
                std::printf("%s %5dx%5dx%5d %-9s skipped: %s\n", dtype, shape.m, shape.n, shape.k, shape.kind,
                            r.message.c_str());
                std::string message = r.message;
                std::replace(message.begin(), message.end(), ',', ';');
                std::fprintf(csv, "%s,%d,%d,%d,%s,skipped,-,,,,,,,,,1,%s\n", dtype, shape.m, shape.n, shape.k,
                             shape.kind, message.c_str());
                continue;
            }
            double worst = std::max({r.error_beta0, r.error_beta05, r.error_timed});
            double ratio = r.ms > 0 ? r.cublas_ms / r.ms : 0.0;
            const char* ran = r.cublas ? "cuBLAS" : "kernel";
            std::printf("%s %5dx%5dx%5d %-9s ran %-6s %-40.120s err %.3g  %.4f ms  cuBLAS %.4f ms  %.3fx  %s%s%s\n",
                        dtype, shape.m, shape.n, shape.k, shape.kind, ran, r.kernel.c_str(), worst, r.ms, r.cublas_ms,
                        ratio, r.ok ? "ok" : "FAILED", r.message.empty() ? "" : ": ", r.message.c_str());
            std::string message = r.message;
            std::replace(message.begin(), message.end(), ',', ';');
            std::fprintf(csv, "%s,%d,%d,%d,%s,%s,%s,%.6g,%.6g,%.6g,%.6g,%.6g,%.6f,%.6f,%.4f,%d,%s\n", dtype, shape.m,
                         shape.n, shape.k, shape.kind, ran, r.kernel.c_str(), worst, r.error_beta0, r.error_beta05,
                         r.error_timed, r.error_cublas, r.ms, r.cublas_ms, ratio, int(r.ok), message.c_str());
            ran_cublas += r.cublas;
            if (ratio > 0) {
                log_ratios += std::log(ratio);
                lowest = timed++ ? std::min(lowest, ratio) : ratio;
            }
            std::fflush(csv);
            std::fflush(stdout);
            failed += !r.ok;
            ++checked;
        }
        if (timed)
            std::printf("%s: %.3fx cuBLAS geometric mean over %d timed shapes, worst %.3fx; the library ran cuBLAS at "
                        "%d shapes, its tuned kernels at the others\n",
                        dtype, std::exp(log_ratios / timed), timed, lowest, ran_cublas);
    }
    std::fclose(csv);
    std::printf("%d of %d checks passed\n", checked - failed, checked);
    return failed ? 1 : 0;
}
