"""The loaded model(s) behind the server, and the lock that queues every request's decoding.

Our decoder caches and the model's modules are not safe to use from two threads at once, so
each request decodes alone, in arrival order; a request's sentences are batched together.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from translate.decoding.translator import Loaded, Translator
from translate.schema import DegenerateThresholds
from translate.serving.attention import sentence_attention

NO_HEADS = (
    "CTranslate2 gives no per-head attention weights; start the server with checkpoint=<the "
    "exported .pt> as well to read them from our model"
)


class NoHeads(Exception):
    """Attention was asked of a server that has only a CTranslate2 model."""


@dataclass
class Service:
    """``loaded`` translates; ``heads`` (our model: the same one with engine=torch, the
    checkpoint= beside an export, or None) gives attention and alignments."""

    loaded: Loaded
    heads: Loaded | None
    thresholds: DegenerateThresholds | None  # None without heads

    def __post_init__(self) -> None:
        self.lock = threading.Lock()

    @property
    def translator(self) -> Translator:
        return self.loaded.translator

    def truncated(self, texts: list[str]) -> list[str]:
        """A warning for each text over the model's source cap, as ``translate`` prints them."""
        cap = self.translator.max_src_len
        if cap is None:
            return []
        ids = self.translator.tokenizer.encode([t.strip() for t in texts])
        return [
            f"sentence {n} has {len(i)} subword tokens; truncated to the first {cap - 1} "
            f"({self.translator.cap_note})"
            for n, i in enumerate(ids, 1)
            if len(i) > cap - 1
        ]

    def translate(self, texts: list[str], alignments: bool = False) -> list[dict]:
        """Each text's translation, with its best head's word alignment when asked."""
        if alignments and self.heads is None:
            raise NoHeads(NO_HEADS)
        with self.lock:
            if not alignments:
                return [{"translation": t} for t in self.translator.translate(texts)]
            return [self._aligned(text) for text in texts]

    def attention(self, text: str) -> dict:
        """One sentence's translation and every head's attention over it."""
        if self.heads is None:
            raise NoHeads(NO_HEADS)
        with self.lock:
            translation, src_ids, hyp_ids = self._decode(text)
            return {"translation": translation, **self._heads(translation, src_ids, hyp_ids)}

    def _aligned(self, text: str) -> dict:
        translation, src_ids, hyp_ids = self._decode(text)
        seen = self._heads(translation, src_ids, hyp_ids)
        best = seen["best_head"]
        alignment = seen["alignments"][best["layer"]][best["head"]]
        return {"translation": translation, "alignment": alignment, "alignment_head": best}

    def _decode(self, text: str) -> tuple[str, list[int], list[int]]:
        """``(translation, source ids as decoded, output ids)`` of one text."""
        translator = self.translator
        src_ids = translator.tokenizer.encode([text.strip()])[0]
        src_ids = _capped(src_ids, translator.max_src_len)  # as translate_ids cuts it
        hyp_ids = translator.translate_ids([src_ids])[0]
        return translator.tokenizer.decode([hyp_ids])[0], src_ids, hyp_ids

    def _heads(self, translation: str, src_ids: list[int], hyp_ids: list[int]) -> dict:
        """Our model's heads on the pair, teacher-forced; beside an export of another
        tokenizer, on the pair as our model's tokenizer cuts the text."""
        heads = self.heads.translator
        if heads.tokenizer.model_proto != self.translator.tokenizer.model_proto:
            src_ids, hyp_ids = heads.tokenizer.encode(
                [self.translator.tokenizer.decode([src_ids])[0], translation]
            )
            src_ids = _capped(src_ids, heads.max_src_len)
        return sentence_attention(
            heads.model,
            heads.tokenizer,
            src_ids,
            hyp_ids,
            heads.device,
            heads.precision,
            self.thresholds,
        )


def _capped(ids: list[int], cap: int | None) -> list[int]:
    return ids if cap is None else ids[: cap - 1]  # room for the EOS
