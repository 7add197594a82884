"""The typed settings of every config group: frozen dataclasses of plain values, each with
the range checks that make a bad value one readable line before any work starts.

:mod:`translate.settings` builds them from the composed Hydra config (and checks every type);
the library packages receive them and never read configuration themselves. Defaults live in
``conf/``, never here; the model's live in :class:`~translate.nn.config.TransformerConfig`
(which :class:`ModelSettings` is), and ``conf/model/`` repeats them, tested equal. Every field
says what it means, its unit and its range (:func:`~translate.nn.config.doc`);
``python -m translate.train --help`` lists them.

One module per config group: :mod:`.model`, :mod:`.training` (``optim``, ``trainer``),
:mod:`.runtime`, :mod:`.decoding`, :mod:`.data`, :mod:`.analysis`; :mod:`.checks` holds
:func:`~.checks.choice`, which their ``validate()`` share.
"""

from translate.schema.analysis import (
    AnalysisSettings,
    DegenerateThresholds,
    ImportanceSettings,
    PruningSettings,
)
from translate.schema.data import DataSettings, FilterSettings, HubSettings, TokenizerSettings
from translate.schema.decoding import DecodeSettings
from translate.schema.model import ModelSettings
from translate.schema.runtime import RuntimeSettings
from translate.schema.training import OptimSettings, TrainerSettings

__all__ = [
    "AnalysisSettings",
    "DataSettings",
    "DecodeSettings",
    "DegenerateThresholds",
    "FilterSettings",
    "HubSettings",
    "ImportanceSettings",
    "ModelSettings",
    "OptimSettings",
    "PruningSettings",
    "RuntimeSettings",
    "TokenizerSettings",
    "TrainerSettings",
]
