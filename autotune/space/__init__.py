"""Stage 1, the space: kernel families' search-space files, their knobs and rules, Config values."""
