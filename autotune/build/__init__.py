"""Stage 2, the build: a config rendered to CUDA source, compiled by NVRTC, its resources checked, its
launch contract stated. Runs with no GPU."""
