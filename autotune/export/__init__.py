"""Stage 7, the export: a kernel table written for programs to use (JSON, a Python-loadable table, a C library)."""
