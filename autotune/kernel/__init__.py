"""Stage 2, the kernel: a config rendered to CUDA source, compiled by NVRTC, its resources checked, its
launch contract stated. Runs with no GPU."""
