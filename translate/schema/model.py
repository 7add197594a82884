"""The ``model`` group: the Transformer's shape, checked by the model's own rules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from translate.errors import UserError, choice
from translate.nn.config import ACTIVATIONS, IMPLS, HeadLayoutError, TransformerConfig, check_heads

if TYPE_CHECKING:
    from translate.nn.model import Seq2SeqTransformer


@dataclass(frozen=True)
class ModelSettings(TransformerConfig):
    """:class:`TransformerConfig` (fields, defaults, help), checked with the command's keys."""

    def validate(self) -> None:
        self._check_heads()
        choice("model.attention_impl", self.attention_impl, IMPLS)
        choice("model.activation", self.activation, ACTIVATIONS)

    def _check_heads(self) -> None:
        """:func:`~translate.nn.config.check_heads`, worded with the config's keys and the fix."""
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
        from translate.nn.model import Seq2SeqTransformer  # torch, only once a model is built

        return Seq2SeqTransformer(vocab_size, self, pad_id)
