"""Stage 6, the selection: the kernel table that maps any shape to one kernel (:mod:`autotune.select.kernel_table`,
the one model and rule every later stage reads), built from recorded results with how good its picks are
(:mod:`autotune.select.selection`)."""
