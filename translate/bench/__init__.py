"""Benchmarks and the scale rehearsal, each a command: ``python -m translate.bench.decode``,
``.train``, ``.attention``, ``.scale`` (with ``.scale_corpus``, the stand-in corpus it runs
on) and ``.gpu`` (the GPU acceptance run). :mod:`translate.bench.common` holds what they share;
``scale_*`` modules are the rehearsal's stages, :mod:`translate.bench.ct2` the CTranslate2
comparison of ``decode --ct2``."""
