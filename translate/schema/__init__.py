"""The typed settings of every config group, one module each: frozen dataclasses whose fields
say what they mean, their unit and range (:func:`~translate.nn.config.doc`); defaults live in
``conf/``, the model's in :class:`~translate.nn.config.TransformerConfig`."""

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
