"""Benchmarks, each a command: ``python -m translate.bench.decode``, ``.train``, ``.attention``
and ``.gpu`` (the GPU acceptance run). :mod:`translate.bench.common` holds what they share,
:mod:`translate.bench.ct2` the CTranslate2 comparison of ``decode --ct2``."""
