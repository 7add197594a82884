"""What decodes a batch: the :class:`Engine` interface and our own engine behind it.

A :class:`~translate.decoding.translator.Translator` batches, truncates, tokenizes and times;
an engine turns one batch of source ids into hypothesis ids. Ours is :class:`TorchEngine`
(the model and :mod:`translate.decoding.search`); an exported CTranslate2 model is
:class:`translate.decoding.ct2.CT2Engine`. Both follow search's conventions: the source gets
an EOS appended, at most ``int(max_len_a * (len(src) + 1) + max_len_b)`` tokens come out, PAD
and BOS are never generated, and hypotheses carry no BOS/EOS.
"""

from __future__ import annotations

from typing import Protocol

import torch

from translate.data.batching import collate
from translate.decoding.generate import STRATEGIES, generate
from translate.nn.model import Seq2SeqTransformer
from translate.runtime.device import autocast, eval_mode
from translate.schema import DecodeSettings


class Engine(Protocol):
    """Decodes one batch; ``device`` is where it runs (timings wait for its queued work);
    ``strategies``: the ``decode.strategy`` values it runs."""

    device: torch.device
    precision: str
    strategies: tuple[str, ...]

    def generate(self, src_ids: list[list[int]], decode: DecodeSettings) -> list[list[int]]:
        """Hypothesis ids (no BOS/EOS) for each source (ids without EOS), in input order."""
        ...


class TorchEngine:
    """Our model and search, in eval mode under ``precision``'s autocast on ``device``."""

    strategies = tuple(STRATEGIES)

    def __init__(self, model: Seq2SeqTransformer, device: torch.device, precision: str) -> None:
        self.model, self.device, self.precision = model, device, precision

    @torch.inference_mode()  # no autograd bookkeeping at all, not only no gradients
    def generate(self, src_ids: list[list[int]], decode: DecodeSettings) -> list[list[int]]:
        # The source gets an EOS appended, as in training.
        rows = collate([(i, ids, []) for i, ids in enumerate(src_ids)]).to(self.device)
        with eval_mode(self.model), autocast(self.device, self.precision):
            return generate(self.model, rows, decode)
