"""The heads study's commands, ``python -m translate.ablation report|speed SWEEP_DIR``."""
