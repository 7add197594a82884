"""The ``decode`` group: how the test split, ``evaluate`` and ``translate`` decode."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass

from translate.errors import UserError
from translate.nn.config import doc, non_negative, positive


@dataclass(frozen=True)
class DecodeSettings:
    beam_size: int = doc(
        "hypotheses kept per sentence", "hypotheses", "; 1 = greedy search", check=positive
    )
    length_penalty: float = doc(
        "fairseq's --lenpen: a finished hypothesis scores sum(log p) / length ** length_penalty, "
        "the length counting the EOS",
        "exponent",
        "any number; 0 = no normalisation, 1 = the mean log-probability",
    )
    max_len_a: float = doc(
        "longest output = max_len_a * source length (tokens, with EOS) + max_len_b",
        "tokens per source token",
        check=non_negative,
    )
    max_len_b: int = doc(
        "longest output = max_len_a * source length + max_len_b",
        "tokens",
        "; not both max_len_a and max_len_b 0",
        check=non_negative,
    )

    strategy: str = doc(
        "the search (translate.decoding.generate.STRATEGIES): beam keeps beam_size hypotheses "
        "per sentence (a beam of 1 runs greedy search), greedy the most probable token at each "
        "step (beam_size 1)",
        "name",
        "beam | greedy",
        default="beam",  # a run saved before the key decoded by beam_size alone: beam's rule
    )

    @property
    def search(self) -> str:
        """The search in words, for logs: ``beam 5, length penalty 1.2`` or ``greedy``."""
        if self.strategy == "beam":
            return f"beam {self.beam_size}, length penalty {self.length_penalty}"
        return self.strategy

    def validate(self) -> None:
        if self.strategy == "greedy" and self.beam_size != 1:
            raise UserError(
                f"decode.strategy=greedy keeps one hypothesis, but decode.beam_size="
                f"{self.beam_size}; add decode.beam_size=1 for greedy search, or set "
                f"decode.strategy=beam for a beam of {self.beam_size}"
            )
        if self.max_len_a == 0 and self.max_len_b == 0:
            raise UserError(
                "decode.max_len_a and decode.max_len_b are both 0: nothing can be generated"
            )


# evaluate's and translate's decode keys (conf: decode/from_run, translate.settings): each null,
# "as the checkpoint's run decoded", unless the command line sets it.
DecodeOverrides = dataclasses.make_dataclass(
    "DecodeOverrides",
    [
        (f.name, t | None, dataclasses.field(default=None, metadata=f.metadata))
        for f, t in zip(
            dataclasses.fields(DecodeSettings), typing.get_type_hints(DecodeSettings).values()
        )
    ],
    frozen=True,
)
