"""What decodes a batch of source ids (EOS appended) for a ``Translator``: :class:`TorchEngine`
(our model) or :class:`translate.decoding.ct2.CT2Engine`, both as :mod:`.search` decodes."""

from __future__ import annotations

from typing import Protocol

import torch

from translate.data.batching import collate
from translate.decoding.generate import SPECIAL_IDS, STRATEGIES, generate, taken_by
from translate.decoding.search import beam_search
from translate.nn.model import Seq2SeqTransformer
from translate.runtime.device import autocast, eval_mode
from translate.schema import DecodeSettings


class Engine(Protocol):
    """``device``: timings wait for its queued work; ``strategies``: its ``decode.strategy``s."""

    device: torch.device
    precision: str
    strategies: tuple[str, ...]

    def generate(self, src_ids: list[list[int]], decode: DecodeSettings) -> list[list[int]]:
        """Hypothesis ids (no BOS/EOS) for each source (ids without EOS), in input order."""


class TorchEngine:
    strategies = tuple(STRATEGIES)

    def __init__(self, model: Seq2SeqTransformer, device: torch.device, precision: str) -> None:
        self.model, self.device, self.precision = model, device, precision

    @torch.inference_mode()  # no autograd bookkeeping at all, not only no gradients
    def generate(self, src_ids: list[list[int]], decode: DecodeSettings) -> list[list[int]]:
        rows = collate([(i, ids, []) for i, ids in enumerate(src_ids)]).to(self.device)
        with eval_mode(self.model), autocast(self.device, self.precision):
            return generate(self.model, rows, decode)

    @torch.inference_mode()
    def nbest(self, src_ids: list[list[int]], decode: DecodeSettings, n: int) -> list[list[tuple]]:
        """Each source's ``n <= decode.beam_size`` best ``(score, ids)`` by beam search."""
        rows = collate([(i, ids, []) for i, ids in enumerate(src_ids)]).to(self.device)
        with eval_mode(self.model), autocast(self.device, self.precision):
            taken = taken_by(beam_search, decode)
            return beam_search(
                self.model, rows.src, rows.src_padding_mask, **taken, **SPECIAL_IDS, nbest=n
            )
