"""Stage 5, the search: starting one, which config next, a compile pipeline ahead of the GPU workers,
evaluating a candidate, the Optuna study, sweeps over many shapes and the ladder."""
