"""The heads study's two commands, ``python -m translate.ablation report|speed SWEEP_DIR``:
the report of a sweep (:mod:`translate.ablation.report`) and its models timed side by side
(:mod:`translate.ablation.speed`)."""
