"""The ``decode`` group: how the test split, ``evaluate`` and ``translate`` decode."""

from __future__ import annotations

from dataclasses import dataclass

from translate.errors import UserError
from translate.schema.checks import doc, positive


@dataclass(frozen=True)
class DecodeSettings:
    beam_size: int = doc("hypotheses kept per sentence", "hypotheses", "> 0; 1 = greedy search")
    length_penalty: float = doc(
        "fairseq's --lenpen: a finished hypothesis scores sum(log p) / length ** length_penalty, "
        "the length counting the EOS",
        "exponent",
        "any number; 0 = no normalisation, 1 = the mean log-probability",
    )
    max_len_a: float = doc(
        "longest output = max_len_a * source length (tokens, with EOS) + max_len_b",
        "tokens per source token",
        ">= 0",
    )
    max_len_b: int = doc(
        "longest output = max_len_a * source length + max_len_b",
        "tokens",
        ">= 0; not both max_len_a and max_len_b 0",
    )

    def validate(self) -> None:
        positive("decode.beam_size", self.beam_size)
        positive("decode.max_len_a", self.max_len_a, allow_zero=True)
        positive("decode.max_len_b", self.max_len_b, allow_zero=True)
        if self.max_len_a == 0 and self.max_len_b == 0:
            raise UserError(
                "decode.max_len_a and decode.max_len_b are both 0: nothing can be generated"
            )
