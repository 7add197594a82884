"""The typed settings of every config group: frozen dataclasses of plain values, each with
the range checks that make a bad value one readable line before any work starts.

:mod:`translate.settings` builds them from the composed Hydra config (and checks every type);
the library packages receive them and never read configuration themselves. Defaults live in
``conf/`` only, never here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from translate.errors import UserError
from translate.nn.attention import IMPLS, HeadLayoutError, check_heads
from translate.nn.layers import ACTIVATIONS
from translate.nn.model import Seq2SeqTransformer
from translate.runtime import check_precision

ROLES = ("train", "valid", "test")


def _positive(name: str, value, allow_none: bool = False, allow_zero: bool = False) -> None:
    if value is None and allow_none:
        return
    if value is None or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise UserError(f"{name}={value} must be {bound}")


def _fraction(name: str, value: float) -> None:
    if not 0.0 <= value < 1.0:
        raise UserError(f"{name}={value} must be in [0, 1)")


def _choice(name: str, value: str, choices) -> None:
    if value not in choices:
        raise UserError(f"{name}={value} is unknown; choose one of {', '.join(choices)}")


# ------------------------------------------------------------------------ groups


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
    # Key/value heads (conf: kv_heads, which defaults to heads). Optional only for settings
    # built in code, where None means num_heads (multi-head); every config sets it.
    num_kv_heads: int | None = None

    def __post_init__(self) -> None:
        if self.num_kv_heads is None:  # so readers always see the number
            object.__setattr__(self, "num_kv_heads", self.num_heads)

    def validate(self) -> None:
        for key in ("d_model", "d_ff", "num_encoder_layers", "num_decoder_layers"):
            _positive(f"model.{key}", getattr(self, key))
        self._check_heads()
        _choice("model.attention_impl", self.attention_impl, IMPLS)
        _choice("model.activation", self.activation, tuple(ACTIVATIONS))
        for key in ("dropout", "attention_dropout", "activation_dropout"):
            _fraction(f"model.{key}", getattr(self, key))

    def _check_heads(self) -> None:
        """The model's own head layout rule (:func:`~translate.nn.attention.check_heads`),
        worded with the config's keys and the fix."""
        h, kv, d = self.num_heads, self.num_kv_heads, self.d_model
        try:
            check_heads(d, h, kv)
        except HeadLayoutError as err:
            raise UserError(
                {
                    "num_heads": f"heads={h} must be >= 1",
                    "num_kv_heads": f"kv_heads={kv} must be >= 1 and divide heads={h}; pick "
                    f"kv_heads from the divisors of {h} (1: multi-query attention)",
                    "embed_dim": f"model.d_model={d} is not divisible by heads={h}; pick heads "
                    f"from the divisors of {d}",
                }[err.argument]
            ) from None

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
        _positive("optim.weight_decay", self.weight_decay, allow_zero=True)
        _fraction("optim.label_smoothing", self.label_smoothing)
        if len(self.betas) != 2 or not all(0.0 <= float(b) < 1.0 for b in self.betas):
            raise UserError(f"optim.betas={self.betas} must be two numbers in [0, 1)")


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
    average_last_n: int
    max_bad_steps: int
    resume: bool
    overwrite: bool
    latency_sentences: int
    progress_bar: bool

    def validate(self) -> None:
        check_precision(self.precision)
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
        _positive("trainer.average_last_n", self.average_last_n, allow_zero=True)
        if self.average_last_n > self.keep_last_checkpoints:
            raise UserError(
                f"trainer.average_last_n={self.average_last_n} must be <= "
                f"trainer.keep_last_checkpoints={self.keep_last_checkpoints}: only that many "
                "step checkpoints are kept; raise trainer.keep_last_checkpoints or lower "
                "trainer.average_last_n"
            )


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


@dataclass(frozen=True)
class TokenizerSettings:
    vocab_size: int
    model_type: str
    character_coverage: float
    input_sentence_size: int
    seed: int

    def validate(self) -> None:
        _positive("data.tokenizer.vocab_size", self.vocab_size)
        _choice("data.tokenizer.model_type", self.model_type, ("unigram", "bpe"))


@dataclass(frozen=True)
class FilterSettings:
    max_src_len: int | None
    max_tgt_len: int | None
    max_len_ratio: float | None
    roles: list

    def validate(self) -> None:
        for key in ("max_src_len", "max_tgt_len", "max_len_ratio"):
            _positive(f"data.filter.{key}", getattr(self, key), allow_none=True)


@dataclass(frozen=True)
class HubSettings:
    repo: str
    revision: str  # of the Parquet export: hf://datasets/{repo}@{revision}/{config}/{split}/{file}
    config: str
    file: str
    # The release archive in the same repository, read when the Parquet export is missing or
    # incomplete. conf/data/iwslt2017.yaml sets both; None (no fallback) only for the data
    # config of a checkpoint written before these keys existed.
    archive: str | None = None
    archive_revision: str | None = None


@dataclass(frozen=True)
class DataSettings:
    source: str
    src_lang: str
    tgt_lang: str
    splits: dict  # role -> split name; a null name leaves the role out
    cache_dir: str
    tokenizer: TokenizerSettings
    filter: FilterSettings
    max_tokens: int
    eval_max_tokens: int
    dir: str | None = None  # multi30k, jsonl, sample: the folder of split files
    path: str | None = None  # iwslt2017: the release archive or folder; None = the hub
    pair: str = "de-en"  # iwslt2017: the pair in the release's file names
    hub: HubSettings | None = None  # iwslt2017: where the Parquet export lives
    # The longest sentence, in tokens with EOS/BOS, that validation, test, evaluate and
    # translate feed the model: longer sources are cut, longer pairs left out of the dev loss.
    # None only in the data config of a checkpoint written before the key existed.
    eval_max_len: int | None = None

    @property
    def eval_cap(self) -> int | None:
        """``eval_max_len``, or for an older checkpoint's config the training filter's
        ``max_src_len`` it was evaluated with then."""
        return self.filter.max_src_len if self.eval_max_len is None else self.eval_max_len

    def validate(self) -> None:
        if self.src_lang == self.tgt_lang:
            raise UserError(f"data.src_lang and data.tgt_lang are both {self.src_lang!r}")
        unknown = sorted(set(self.splits) - set(ROLES))
        if unknown:
            raise UserError(f"data.splits has unknown roles {unknown}; use {', '.join(ROLES)}")
        if self.splits.get("train") is None:
            raise UserError("data.splits.train must name the training split")
        for key in ("max_tokens", "eval_max_tokens"):
            _positive(f"data.{key}", getattr(self, key))
        _positive("data.eval_max_len", self.eval_max_len, allow_none=True)
        if self.eval_max_len is not None and self.eval_max_tokens < self.eval_max_len:
            raise UserError(
                f"data.eval_max_tokens={self.eval_max_tokens} is smaller than the longest "
                f"sentence evaluation feeds the model (data.eval_max_len={self.eval_max_len}); "
                "raise data.eval_max_tokens or lower data.eval_max_len"
            )
        for side in ("max_src_len", "max_tgt_len"):
            limit = getattr(self.filter, side)
            if limit is not None and self.max_tokens < limit:
                raise UserError(
                    f"data.max_tokens={self.max_tokens} is smaller than the longest allowed "
                    f"sentence (data.filter.{side}={limit}); raise data.max_tokens or lower "
                    f"data.filter.{side}"
                )

    @property
    def split_names(self) -> dict[str, str]:
        """``{role: split name}`` of the roles in use."""
        return {str(r): str(n) for r, n in self.splits.items() if n is not None}


@dataclass(frozen=True)
class DegenerateThresholds:
    """When a head counts as degenerate (``conf/analysis/default.yaml`` explains each value)."""

    uniform_entropy: float
    position_fraction: float
    max_weight: float
    max_offset: int


@dataclass(frozen=True)
class ImportanceSettings:
    metric: str
    bleu_sentences: int

    def validate(self) -> None:
        _positive("analysis.importance.bleu_sentences", self.bleu_sentences, allow_zero=True)
        if self.metric not in ("loss", "bleu") or (
            self.metric == "bleu" and not self.bleu_sentences
        ):
            raise UserError(
                f"analysis.importance.metric={self.metric}: use loss, or bleu with "
                "analysis.importance.bleu_sentences > 0"
            )


@dataclass(frozen=True)
class PruningSettings:
    bleu_sentences: int
    fractions: list


@dataclass(frozen=True)
class AnalysisSettings:
    max_sentences: int | None
    summary_sentences: int
    max_tokens: int
    degenerate: DegenerateThresholds
    importance: ImportanceSettings
    pruning: PruningSettings
    beam_size: int
    heatmap_sentences: int

    def validate(self) -> None:
        _positive("analysis.max_tokens", self.max_tokens)
        _positive("analysis.beam_size", self.beam_size)
        _positive("analysis.summary_sentences", self.summary_sentences, allow_zero=True)
