"""Training: the optimisation step, the loop with validation and checkpoints, resuming, and
the end-of-run report (``results.json``)."""
