"""The settings of each command but train: the keys it reads, each declared once with what it
means, its unit and range (``--help`` lists them); ``validate`` holds the rules across keys."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from translate.errors import UserError, choice
from translate.nn.config import Check, doc, positive
from translate.schema.analysis import AnalysisSettings
from translate.schema.data import DataSettings
from translate.schema.decoding import DecodeOverrides
from translate.schema.runtime import RuntimeSettings


def _output_dir(command: str):
    return doc(
        f"where {command} writes its outputs (locked while it runs); set it with hydra.run.dir=",
        "folder",
        f"a folder without an earlier {command}'s outputs; by default outputs/{command}/<time>",
    )


def _data_doc():
    return doc("optional (conf/data/): data=<source> data.dir=... reads other data than the run's")


def _decode_doc():
    return doc("how to decode (conf/decode/); a null key decodes as the checkpoint's run did")


@dataclass(frozen=True)
class CheckpointCommand:
    checkpoint: str | None = doc(
        "the checkpoint to load", "file", "<run_dir>/checkpoints/best.pt or another .pt"
    )
    runtime: RuntimeSettings = doc("where and how it computes (conf/runtime/)")

    def validate(self) -> None:
        if self.checkpoint is None:
            raise UserError("pass checkpoint=<run_dir>/checkpoints/best.pt")


@dataclass(frozen=True)
class AnalyzeCommand(CheckpointCommand):
    split: str = doc(
        "the split analysed: the dev set or the test set", "split role", "valid | test"
    )
    output_dir: str = _output_dir("analyze")
    analysis: AnalysisSettings = doc("what is measured per head (conf/analysis/)")
    data: DataSettings | None = _data_doc()


# What each engine of translate and evaluate decodes from (translate.decoding.engine_switch).
ENGINE_SOURCES = {"torch": "checkpoint", "ctranslate2": "model_dir"}
_SOURCE_HINTS = {
    "checkpoint": "<run_dir>/checkpoints/best.pt",
    "model_dir": "<a folder written by python -m translate.export>",
}


@dataclass(frozen=True)
class EngineCommand:
    engine: str = doc(
        "what decodes: our model, or its CTranslate2 export", "name", " | ".join(ENGINE_SOURCES)
    )
    checkpoint: str | None = doc(
        "engine=torch: the checkpoint to load", "file", "a .pt file; null for ctranslate2"
    )
    model_dir: str | None = doc(
        "engine=ctranslate2: a folder written by python -m translate.export",
        "folder",
        "null for torch",
    )
    runtime: RuntimeSettings = doc("where and how it computes (conf/runtime/)")

    @property
    def source(self) -> str:
        return getattr(self, ENGINE_SOURCES[self.engine])

    def validate(self) -> None:
        choice("engine", self.engine, ENGINE_SOURCES)
        key = ENGINE_SOURCES[self.engine]
        for owner, other in ENGINE_SOURCES.items():
            if other != key and getattr(self, other) is not None:
                raise UserError(
                    f"{other}= is for engine={owner}; add engine={owner}, or pass {key}= "
                    f"for engine={self.engine}"
                )
        if getattr(self, key) is None:
            raise UserError(f"pass {key}={_SOURCE_HINTS[key]}")
        if self.engine == "ctranslate2" and self.runtime.precision != "auto":
            raise UserError(
                f"runtime.precision={self.runtime.precision} is for engine=torch; an exported "
                "model computes in the quantization it was exported with (python -m "
                "translate.export quantization=)"
            )


@dataclass(frozen=True)
class TranslateCommand(EngineCommand):
    input: str | None = doc("a file to translate instead of stdin", "file", ".gz too; null = stdin")
    output: str | None = doc(
        "a file for the translations instead of stdout",
        "file",
        "never the input nor a file of a run; null = stdout",
    )
    decode: DecodeOverrides = _decode_doc()


@dataclass(frozen=True)
class ServeCommand(EngineCommand):
    """``translate`` as a web server (translate.serving): the model loaded once."""

    host: str = doc("the address the server listens on", "address", "127.0.0.1 = this machine only")
    port: int = doc(
        "the TCP port it listens on",
        "port",
        "; 0 = any free one (the start's line names it)",
        check=Check("0 to 65535", lambda value: 0 <= value <= 65535, "in [0, 65535]"),
    )
    max_sentences: int = doc(
        "most sentences one /translate request may send", "sentences", check=positive
    )
    max_body_bytes: int = doc("largest request body accepted", "bytes", check=positive)
    decode: DecodeOverrides = _decode_doc()

    def validate(self) -> None:
        # engine=ctranslate2 may name checkpoint= too: /attention reads the heads of our model.
        cleared = self.engine == "ctranslate2"
        EngineCommand.validate(dataclasses.replace(self, checkpoint=None) if cleared else self)


@dataclass(frozen=True)
class EvaluateCommand(EngineCommand):
    src: str | None = doc(
        "source sentences to translate and score, with ref=", "file", "null = the test split"
    )
    ref: str | None = doc(
        "their reference translations, line-aligned with src=", "file", "null = the test split"
    )
    output_dir: str = _output_dir("evaluate")
    decode: DecodeOverrides = _decode_doc()
    data: DataSettings | None = _data_doc()

    def validate(self) -> None:
        super().validate()
        if (self.src is None) != (self.ref is None):
            raise UserError("give both src=<file> and ref=<file>, or neither to use the test split")


QUANTIZATIONS = ("float32", "int8", "int8_float32", "float16")
# Most rows of an exported position table, far beyond any sentence; checked before the table is
# allocated (max_positions=100000000 asked for 102 GB).
MAX_POSITIONS = 2**16


@dataclass(frozen=True)
class ExportCommand:
    checkpoint: str | None = doc("the checkpoint to export", "file", "a .pt file")
    output: str | None = doc("the model folder to write", "folder", "new, or an empty folder")
    quantization: str = doc(
        "how the weights are stored and computed (int8: 8-bit weights and matrix products)",
        "name",
        " | ".join(QUANTIZATIONS),
    )
    max_positions: int | None = doc(
        "rows of the position table: the longest source and output the exported model takes",
        "tokens",
        f"1 to {MAX_POSITIONS}; null = what the checkpoint's run evaluates with",
    )

    def validate(self) -> None:
        if self.checkpoint is None or self.output is None:
            raise UserError(
                "pass checkpoint=<run_dir>/checkpoints/best.pt output=<folder to write>"
            )
        choice("quantization", self.quantization, QUANTIZATIONS)
        if self.max_positions is not None and not 0 < self.max_positions <= MAX_POSITIONS:
            raise UserError(f"max_positions={self.max_positions} must be in [1, {MAX_POSITIONS}]")


@dataclass(frozen=True)
class AverageCommand:
    """Listed checkpoints, or a run's newest ``n``."""

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

    def validate(self) -> None:
        if (self.checkpoints is None) == (self.run_dir is None):
            raise UserError(
                "pass checkpoints='[a.pt,b.pt]' output=<file>, or run_dir=<run> n=<count>"
            )
        if self.checkpoints is not None and len(self.checkpoints) < 2:
            raise UserError(
                f"checkpoints= names {len(self.checkpoints)} file; averaging needs at least 2"
            )
        if self.checkpoints is not None and self.output is None:
            raise UserError("pass output=<file> for the averaged checkpoint")
        if self.run_dir is not None and (self.n is None or self.n < 2):
            raise UserError(
                f"n={self.n} must be an integer >= 2: how many of the run's newest "
                "checkpoints/step_*.pt to average"
            )


@dataclass(frozen=True)
class InspectDataCommand:
    data: DataSettings = doc("the corpus, its tokenizer and its filters (conf/data/)")
