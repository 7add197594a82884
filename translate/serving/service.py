"""The loaded model(s) behind the server, and the lock that queues every request's decoding:
our decoder caches and modules are not thread-safe, so each request decodes alone, in order.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from translate.decoding.engine import TorchEngine
from translate.decoding.translator import Loaded, Translator
from translate.schema import DegenerateThresholds
from translate.serving.attention import sentence_attention

NO_HEADS = (
    "CTranslate2 gives no per-head attention weights; start the server with checkpoint=<the "
    "exported .pt> as well to read them from our model"
)
NO_NBEST = "n-best lists come from our engine; start the server with engine=torch checkpoint="
SCORE_DIGITS = 4


class Refused(Exception):
    """A request this server will not answer: one line for the client, and its HTTP status."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Service:
    """``loaded`` translates; ``heads`` (``loaded``, the checkpoint= beside an export, or None)
    gives attention and alignments."""

    loaded: Loaded
    heads: Loaded | None
    thresholds: DegenerateThresholds | None  # None without heads

    def __post_init__(self) -> None:
        self.lock = threading.Lock()

    @property
    def translator(self) -> Translator:
        return self.loaded.translator

    def translate(
        self, texts: list[str], alignments: bool = False, nbest: int | None = None
    ) -> dict:
        """``/translate``'s answer: translations (``nbest``, ``alignments``) and cut warnings."""
        self._check(alignments, nbest)
        ids = self.translator.tokenizer.encode([text.strip() for text in texts])
        src = [self.translator.capped(i) for i in ids]
        with self.lock:
            if nbest is None:
                hyps = [[(None, h)] for h in self.translator.translate_ids(src)]
            else:
                hyps = self.translator.engine.nbest(src, self.translator.decode, nbest)
            answers = [self._answer(s, h, alignments, nbest) for s, h in zip(src, hyps)]
        return {"translations": answers, "warnings": self._cut(ids)}

    def attention(self, text: str) -> dict:
        """One sentence's translation and every head's attention over it."""
        self._check(alignments=True, nbest=None)
        ids = self.translator.tokenizer.encode([text.strip()])
        src_ids = self.translator.capped(ids[0])
        with self.lock:
            hyp_ids = self.translator.translate_ids([src_ids])[0]
            translation = self.translator.tokenizer.decode([hyp_ids])[0]
            seen = self._heads(translation, src_ids, hyp_ids)
        return {"translation": translation, **seen, "warnings": self._cut(ids)}

    def _cut(self, ids: list[list[int]]) -> list[str]:
        """A warning for each text over the model's source cap, as ``translate`` prints them."""
        tr = self.translator
        return [
            f"sentence {n} has {length} subword tokens; truncated to the first "
            f"{tr.max_src_len - 1} ({tr.cap_note})"
            for n, length in tr.over_cap(ids)
        ]

    def _check(self, alignments: bool, nbest: int | None) -> None:
        if alignments and self.heads is None:
            raise Refused(NO_HEADS, 501)
        if nbest is None:
            return
        if not isinstance(self.translator.engine, TorchEngine):
            raise Refused(NO_NBEST, 501)
        beam = self.translator.decode.beam_size
        if nbest > beam:
            raise Refused(
                f"nbest={nbest} is more than the server's beam keeps (decode.beam_size={beam}); "
                f"ask for at most {beam}, or start the server with decode.beam_size={nbest}"
            )

    def _answer(self, src_ids: list[int], hyps: list, alignments: bool, nbest: int | None) -> dict:
        """One sentence's answer from its hypotheses ``[(score, ids), ...]``, best first."""
        texts = self.translator.tokenizer.decode([ids for _, ids in hyps])
        answer: dict = {"translation": texts[0]}
        if nbest is not None:
            answer["nbest"] = [
                {"translation": text, "score": round(score, SCORE_DIGITS)}
                for (score, _), text in zip(hyps, texts)
            ]
        if alignments:
            seen = self._heads(texts[0], src_ids, hyps[0][1])
            best = seen["best_head"]
            answer["alignment"] = seen["alignments"][best["layer"]][best["head"]]
            answer["alignment_head"] = best
        return answer

    def _heads(self, translation: str, src_ids: list[int], hyp_ids: list[int]) -> dict:
        """Our model's heads on the pair (beside an export of another tokenizer: re-encoded)."""
        heads = self.heads.translator
        if heads.tokenizer.model_proto != self.translator.tokenizer.model_proto:
            source = self.translator.tokenizer.decode([src_ids])[0]
            src_ids, hyp_ids = heads.tokenizer.encode([source, translation])
            src_ids = heads.capped(src_ids)
        return sentence_attention(heads, src_ids, hyp_ids, self.thresholds)
