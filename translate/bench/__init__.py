"""Benchmarks, each a command: ``python -m translate.bench.attention``, ``.train``, ``.decode``
(with :mod:`.ct2`), ``.serve``, ``.ladder`` and ``.gpu``; :mod:`.common` holds what they share."""
