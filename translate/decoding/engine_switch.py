"""The engine switch of ``translate`` and ``evaluate``: ``engine=torch checkpoint=<ckpt>`` or
``engine=ctranslate2 model_dir=<dir>``. Each engine's module (and torch) is imported when it
loads: ``--help`` and refused keys answer without them (tests/test_architecture.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from translate.schema import DecodeSettings
from translate.schema.commands import EngineCommand

if TYPE_CHECKING:
    from translate.decoding.translator import Loaded


def _torch(command: EngineCommand, decode: DecodeSettings | dict, data_overrides) -> Loaded:
    from translate.decoding.translator import load_translator

    r = command.runtime
    return load_translator(command.checkpoint, r.device, r.precision, decode, data_overrides)


def _ctranslate2(command: EngineCommand, decode: DecodeSettings | dict, data_overrides) -> Loaded:
    from translate.decoding.ct2 import load_exported

    return load_exported(command.model_dir, command.runtime.device, decode, data_overrides)


# engine= -> its loader; the keys are schema.commands.ENGINE_SOURCES's.
ENGINES = {"torch": _torch, "ctranslate2": _ctranslate2}


def load_engine(
    command: EngineCommand, decode: DecodeSettings | dict, data_overrides=None
) -> Loaded:
    """The command's engine, ``decode`` over the stored settings, ``data_overrides`` for data's."""
    command.runtime.apply_to_process()
    return ENGINES[command.engine](command, decode, data_overrides)


def describe_decode(decode: DecodeSettings, overridden: dict) -> str:
    where = "as the run decoded"
    if overridden:
        given = ", ".join(f"{k}={v}" for k, v in overridden.items())
        where += f", but {given} from the command line"
    return (
        f"decode: {decode.search}, at most "
        f"{decode.max_len_a} x source + {decode.max_len_b} tokens ({where})"
    )
