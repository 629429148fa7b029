"""Stage 6, the selection: from recorded results to a kernel table that maps any shape to one kernel,
and how good its picks are."""
