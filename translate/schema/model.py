"""The ``model`` group: the Transformer's shape, checked by the model's own rules."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from translate.errors import UserError
from translate.nn.attention import IMPLS, HeadLayoutError, check_heads
from translate.nn.layers import ACTIVATIONS
from translate.nn.model import Seq2SeqTransformer
from translate.schema.checks import choice, doc, fraction, positive


@dataclass(frozen=True)
class ModelSettings:
    d_model: int = doc(
        "width of the embeddings, of every attention and of the residual stream",
        "features",
        "> 0, a multiple of model.num_heads",
    )
    num_heads: int = doc(
        "attention heads of every self- and cross-attention (set it with heads=N)",
        "heads",
        ">= 1, a divisor of model.d_model",
    )
    num_encoder_layers: int = doc("encoder layers", "layers", "> 0")
    num_decoder_layers: int = doc("decoder layers", "layers", "> 0")
    d_ff: int = doc("inner width of each feed-forward block", "features", "> 0")
    dropout: float = doc(
        "dropout on the embeddings and on each sublayer's output", "probability", "[0, 1)"
    )
    attention_dropout: float = doc("dropout on the attention weights", "probability", "[0, 1)")
    activation_dropout: float = doc(
        "dropout after the feed-forward activation", "probability", "[0, 1)"
    )
    activation: str = doc("the feed-forward activation", "name", " | ".join(ACTIVATIONS))
    norm_first: bool = doc(
        "pre-norm (true: LayerNorm before each sublayer) or the original post-norm (false)",
        "flag",
        "true | false",
    )
    attention_impl: str = doc(
        "manual: the hand-written reference path; sdpa: torch's fused "
        "scaled_dot_product_attention (the same function, tested equal)",
        "name",
        " | ".join(IMPLS),
    )
    # Optional only for settings built in code, where None means num_heads (multi-head).
    num_kv_heads: int | None = doc(
        "key/value heads, each shared by num_heads / num_kv_heads query heads (set it with "
        "kv_heads=N): num_heads is multi-head, 1 multi-query, between grouped-query attention",
        "heads",
        ">= 1, a divisor of model.num_heads",
        default=None,
    )

    def __post_init__(self) -> None:
        if self.num_kv_heads is None:  # so readers always see the number
            object.__setattr__(self, "num_kv_heads", self.num_heads)

    def validate(self) -> None:
        for key in ("d_model", "d_ff", "num_encoder_layers", "num_decoder_layers"):
            positive(f"model.{key}", getattr(self, key))
        self._check_heads()
        choice("model.attention_impl", self.attention_impl, IMPLS)
        choice("model.activation", self.activation, tuple(ACTIVATIONS))
        for key in ("dropout", "attention_dropout", "activation_dropout"):
            fraction(f"model.{key}", getattr(self, key))

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
