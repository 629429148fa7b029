"""autotune: find the fastest CUDA GEMM kernel per shape and GPU, and keep it."""

__version__ = "0.1.0"
