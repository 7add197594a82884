"""Training: the optimisation step, the loop with validation and checkpoints, resuming,
data-parallel training under torchrun, and the end-of-run report (``results.json``)."""
