"""Stage 7, the export: a kernel table written for programs to use, each ``--format`` a writer of
:mod:`autotune.export.writers` (JSON, the table with cubins for ``autotune.load``, a C library); the
table's kernels compiled for it (:mod:`autotune.export.compile`)."""
