"""autotune: find the fastest CUDA GEMM kernel per shape and GPU, and keep it."""

__version__ = "0.1.0"

_RUNTIME = ("gemm", "matmul", "explain", "load", "tune_on_miss")


def __getattr__(name: str):
    """``autotune.gemm``, ``matmul``, ``explain``, ``load`` and ``tune_on_miss`` come from :mod:`autotune.runtime`,
    imported on first use so that the command line never imports CUDA libraries."""
    if name in _RUNTIME:
        from autotune import runtime

        value = getattr(runtime, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")
