"""Stage 3, the GPU: the worker process that loads, verifies, times and meters kernels (the only code
that touches CUDA), and what it measures with."""
