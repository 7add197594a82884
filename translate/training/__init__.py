"""Training: the step, the loop, checkpoints, resuming and the end-of-run report."""
