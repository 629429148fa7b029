"""Stage 5, the search: which config next, a compile pipeline ahead of the GPU workers, the Optuna
study, sweeps over many shapes and the ladder."""
