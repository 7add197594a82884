"""What ``python -m translate.<command> --help`` lists: every key the command reads, with its
value in the composed config, what it means, its unit and its range, all read from the settings
dataclasses' :func:`~translate.nn.config.doc` fields (so the list cannot drift from the
code). The keys a command reads itself, outside any settings group (``translate``'s
``input=``, ``evaluate``'s ``src=``/``ref=``, ``average``'s keys), are documented here the same
way. The composed config reaches :func:`settings_help` as a lookup (``translate.settings`` reads
OmegaConf; this module never does).
"""

from __future__ import annotations

import dataclasses
import json
import textwrap
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from translate.nn.config import doc
from translate.schema.analysis import AnalysisSettings
from translate.schema.data import DataSettings
from translate.schema.decoding import DecodeSettings

# A dotted key -> (its value, the interpolation it is written as, or ""); None: not in the config.
Lookup = Callable[[str], "tuple[Any, str] | None"]


def settings_help(cls, value_of: Lookup, prefix: str = "") -> list[str]:
    """Every config key of ``cls`` (a settings dataclass; its own keys, then its groups):
    ``key=value`` as ``value_of`` gives it (the field's default where the config lacks it), what
    it means, its unit and its range."""
    hints, keys, groups = typing.get_type_hints(cls), [], []
    for field in dataclasses.fields(cls):
        meta, key = field.metadata, f"{prefix}{field.name}"
        if not meta["key"]:
            continue
        group = _group(hints[field.name])
        if group is not None:
            groups += ["", f"{key}: {meta['help']}", *settings_help(group, value_of, f"{key}.")]
            continue
        default = None if field.default is dataclasses.MISSING else field.default
        value, origin = value_of(key) or (default, "")
        keys += [
            f"{key}={_shown(value)}" + (f"  (from {origin})" if origin else ""),
            *textwrap.wrap(meta["help"], 96, initial_indent="    ", subsequent_indent="    "),
            f"    unit: {meta['unit']}; range: {meta['range']}",
        ]
    return keys + groups


def _group(hint: Any):
    """The settings dataclass a field of type ``hint`` holds (also when optional), or None."""
    args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    return args[0] if len(args) == 1 and dataclasses.is_dataclass(args[0]) else None


def _shown(value: Any) -> str:
    """A value as a command-line override writes it."""
    if isinstance(value, (list, dict)) or value is None or isinstance(value, bool):
        return json.dumps(value)
    return str(value)


# ------------------------------------------------------------ keys a command reads itself


def output_dir_doc(command: str):
    return doc(
        f"where {command} writes its outputs (locked while it runs); set it with hydra.run.dir=",
        "folder",
        f"a folder without an earlier {command}'s outputs; by default outputs/{command}/<time>",
    )


def decode_doc():
    return doc("how to decode (conf/decode/); a null key decodes as the checkpoint's run did")


def data_doc():
    return doc("optional (conf/data/): data=<source> data.dir=... reads other data than the run's")


@dataclass(frozen=True)
class TranslateKeys:
    """``translate``'s own keys, beside the engine's (``EngineCommand``)."""

    input: str | None = doc("a file to translate instead of stdin", "file", ".gz too; null = stdin")
    output: str | None = doc(
        "a file for the translations instead of stdout",
        "file",
        "never the input nor a file of a run; null = stdout",
    )
    decode: DecodeSettings = decode_doc()


@dataclass(frozen=True)
class EvaluateKeys:
    """``evaluate``'s own keys, beside the engine's (``EngineCommand``)."""

    src: str | None = doc(
        "source sentences to translate and score, with ref=", "file", "null = the test split"
    )
    ref: str | None = doc(
        "their reference translations, line-aligned with src=", "file", "null = the test split"
    )
    output_dir: str = output_dir_doc("evaluate")
    decode: DecodeSettings = decode_doc()
    data: DataSettings | None = data_doc()


@dataclass(frozen=True)
class AnalyzeKeys:
    """``analyze``'s own keys, beside the checkpoint's (``CheckpointCommand``)."""

    split: str = doc(
        "the split analysed: the dev set or the test set", "split role", "valid | test"
    )
    output_dir: str = output_dir_doc("analyze")
    analysis: AnalysisSettings = doc("what is measured per head (conf/analysis/)")
    data: DataSettings | None = data_doc()


@dataclass(frozen=True)
class AverageKeys:
    """``average``'s keys: listed checkpoints, or a run's newest ``n``."""

    checkpoints: list | None = doc(
        "the checkpoint files to average (or run_dir= and n=)", "files", "a list of 2 or more"
    )
    run_dir: str | None = doc(
        "a training run whose newest n checkpoints/step_*.pt are averaged", "folder", "a run dir"
    )
    n: int | None = doc("how many of run_dir's newest step checkpoints", "checkpoints", ">= 2")
    output: str | None = doc(
        "the averaged checkpoint to write",
        "file",
        "required with checkpoints=; null = <run_dir>/checkpoints/averaged_last<n>.pt",
    )


@dataclass(frozen=True)
class InspectDataKeys:
    """``python -m translate.data``'s keys: the corpus group."""

    data: DataSettings = doc("the corpus, its tokenizer and its filters (conf/data/)")
