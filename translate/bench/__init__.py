"""Benchmarks, each a command: ``python -m translate.bench.attention``, ``.train``, ``.decode``
(with :mod:`translate.bench.ct2`, its CTranslate2 comparison), ``.ladder`` (a recipe at several
time budgets) and ``.gpu`` (the GPU check); :mod:`translate.bench.common` holds what they share."""
