"""The heads study over a sweep's models: ``python -m translate.ablation report|speed|align``
(:mod:`translate.ablation.__main__`), and the sweep's report the Hydra callback writes
(:mod:`translate.sweeps`)."""
