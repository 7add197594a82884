"""The one place the Hydra config is read: typed, validated settings with plain values.

Every check runs before any work starts and fails with one readable line that names the key
and the fix, e.g. ``model.d_model=512 is not divisible by heads=3``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from translate.attention import IMPLS
from translate.errors import UserError
from translate.layers import ACTIVATIONS
from translate.model import Seq2SeqTransformer
from translate.runtime import PRECISIONS


def _plain(node: Any, name: str) -> dict:
    try:
        return OmegaConf.to_container(node, resolve=True, throw_on_missing=True)
    except OmegaConfBaseException as err:
        raise UserError(f"config {name}: {err.msg if hasattr(err, 'msg') else err}") from err


def _build(cls, node: Any, name: str):
    values = _plain(node, name)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise UserError(f"unknown key {name}.{unknown[0]}; known keys: {', '.join(sorted(known))}")
    missing = sorted(known - set(values))
    if missing:
        raise UserError(f"config {name} lacks the key {name}.{missing[0]}")
    return cls(**values)


def _positive(name: str, value, allow_none: bool = False, allow_zero: bool = False) -> None:
    if value is None and allow_none:
        return
    if value is None or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise UserError(f"{name}={value} must be {bound}")


@dataclass(frozen=True)
class ModelSettings:
    d_model: int
    num_heads: int
    num_encoder_layers: int
    num_decoder_layers: int
    d_ff: int
    dropout: float
    attention_dropout: float
    activation_dropout: float
    activation: str
    norm_first: bool
    attention_impl: str

    def validate(self) -> None:
        if self.num_heads < 1:
            raise UserError(f"heads={self.num_heads} must be >= 1")
        for key in ("d_model", "d_ff", "num_encoder_layers", "num_decoder_layers"):
            _positive(f"model.{key}", getattr(self, key))
        if self.d_model % self.num_heads:
            raise UserError(
                f"model.d_model={self.d_model} is not divisible by heads={self.num_heads}; "
                f"pick heads from the divisors of {self.d_model}"
            )
        if self.attention_impl not in IMPLS:
            raise UserError(
                f"model.attention_impl={self.attention_impl} is unknown; "
                f"choose {' or '.join(IMPLS)}"
            )
        if self.activation not in ACTIVATIONS:
            raise UserError(f"model.activation={self.activation} is unknown; choose relu or gelu")
        for key in ("dropout", "attention_dropout", "activation_dropout"):
            if not 0.0 <= getattr(self, key) < 1.0:
                raise UserError(f"model.{key}={getattr(self, key)} must be in [0, 1)")

    def build(self, vocab_size: int, pad_id: int) -> Seq2SeqTransformer:
        return Seq2SeqTransformer(vocab_size=vocab_size, pad_id=pad_id, **dataclasses.asdict(self))


@dataclass(frozen=True)
class OptimSettings:
    lr: float
    betas: list
    eps: float
    weight_decay: float
    warmup_steps: int
    label_smoothing: float
    clip_norm: float

    def validate(self) -> None:
        _positive("optim.lr", self.lr)
        _positive("optim.warmup_steps", self.warmup_steps, allow_zero=True)
        _positive("optim.clip_norm", self.clip_norm, allow_zero=True)
        if not 0.0 <= self.label_smoothing < 1.0:
            raise UserError(f"optim.label_smoothing={self.label_smoothing} must be in [0, 1)")


@dataclass(frozen=True)
class TrainerSettings:
    device: str
    precision: str
    compile: bool
    num_threads: int | None
    max_steps: int
    max_epochs: int
    max_minutes: float | None
    accumulate_grad_batches: int
    log_every_n_steps: int
    val_every_n_steps: int
    val_bleu_sentences: int | None
    val_beam_size: int
    early_stopping_patience: int | None
    checkpoint_every_n_steps: int
    keep_last_checkpoints: int
    max_bad_steps: int
    resume: bool
    latency_sentences: int
    progress_bar: bool

    def validate(self) -> None:
        if str(self.precision) not in PRECISIONS:
            raise UserError(
                f"trainer.precision={self.precision} is unknown; "
                f"choose one of {', '.join(PRECISIONS)}"
            )
        for key in (
            "max_steps",
            "max_epochs",
            "accumulate_grad_batches",
            "log_every_n_steps",
            "val_every_n_steps",
            "val_beam_size",
            "checkpoint_every_n_steps",
            "keep_last_checkpoints",
            "max_bad_steps",
            "latency_sentences",
        ):
            _positive(f"trainer.{key}", getattr(self, key))
        for key in ("max_minutes", "val_bleu_sentences", "early_stopping_patience", "num_threads"):
            _positive(f"trainer.{key}", getattr(self, key), allow_none=True)


@dataclass(frozen=True)
class DecodeSettings:
    beam_size: int
    length_penalty: float
    max_len_a: float
    max_len_b: int

    def validate(self) -> None:
        _positive("decode.beam_size", self.beam_size)
        _positive("decode.max_len_a", self.max_len_a, allow_zero=True)
        _positive("decode.max_len_b", self.max_len_b, allow_zero=True)
        if self.max_len_a == 0 and self.max_len_b == 0:
            raise UserError(
                "decode.max_len_a and decode.max_len_b are both 0: nothing can be generated"
            )


def model_settings(node: DictConfig) -> ModelSettings:
    settings = _build(ModelSettings, node, "model")
    settings.validate()
    return settings


def decode_settings(node: DictConfig) -> DecodeSettings:
    settings = _build(DecodeSettings, node, "decode")
    settings.validate()
    return settings


@dataclass(frozen=True)
class TrainSettings:
    """Everything ``train`` needs besides the data config (read by ``translate.data``)."""

    model: ModelSettings
    optim: OptimSettings
    trainer: TrainerSettings
    decode: DecodeSettings
    seed: int
    run_dir: str


def train_settings(cfg: DictConfig) -> TrainSettings:
    """Validate the composed training config; raises UserError on the first problem."""
    optim = _build(OptimSettings, cfg.optim, "optim")
    optim.validate()
    trainer = _build(TrainerSettings, cfg.trainer, "trainer")
    trainer.validate()
    try:
        run_dir = str(cfg.run_dir)
    except OmegaConfBaseException as err:
        raise UserError("run_dir is not set; run through the CLI or pass run_dir=<folder>") from err
    return TrainSettings(
        model=model_settings(cfg.model),
        optim=optim,
        trainer=trainer,
        decode=decode_settings(cfg.decode),
        seed=int(cfg.seed),
        run_dir=run_dir,
    )
