"""Running a trained model on text: batching, decoding, timing. Shared by training's
validation and test, ``translate.evaluate`` and ``translate.translate``."""

from __future__ import annotations

import logging
import statistics
import sys
import time

import torch
from tqdm.auto import tqdm

from translate.config import DecodeSettings
from translate.data import collate
from translate.model import Seq2SeqTransformer
from translate.runtime import autocast
from translate.search import generate
from translate.tokenizer import Tokenizer

log = logging.getLogger(__name__)


class Translator:
    """Translate token ids or text with a model, in token-bounded batches of similar length.

    Args:
        max_tokens: source tokens per batch (padded size).
        max_src_len: longest source in tokens, EOS included, as in training; longer inputs are
            truncated to ``max_src_len - 1`` subwords (``translate`` warns); None = no limit.
    """

    def __init__(
        self,
        model: Seq2SeqTransformer,
        tokenizer: Tokenizer,
        decode: DecodeSettings,
        device: torch.device,
        precision: str,
        max_tokens: int,
        max_src_len: int | None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.decode = decode
        self.device = device
        self.precision = precision
        self.max_tokens = max_tokens
        self.max_src_len = max_src_len
        self._max_src = None if max_src_len is None else max_src_len - 1  # room for the EOS

    def _batches(self, src_ids: list[list[int]]) -> list[list[int]]:
        """Indices grouped into batches by length, each within ``max_tokens`` padded tokens."""
        order = sorted(range(len(src_ids)), key=lambda i: len(src_ids[i]))
        batches, current, width = [], [], 0
        for i in order:
            new_width = max(width, len(src_ids[i]) + 1)
            if current and new_width * (len(current) + 1) > self.max_tokens:
                batches.append(current)
                current, new_width = [], len(src_ids[i]) + 1
            current.append(i)
            width = new_width
        if current:
            batches.append(current)
        return batches

    @torch.no_grad()
    def translate_ids(
        self, src_ids: list[list[int]], beam_size: int | None = None, progress: bool = False
    ) -> list[list[int]]:
        """Hypothesis ids for each source (no BOS/EOS), in input order."""
        was_training = self.model.training
        self.model.eval()
        out: list[list[int]] = [[] for _ in src_ids]
        batches = self._batches(src_ids)
        beam = self.decode.beam_size if beam_size is None else beam_size
        bar = tqdm(
            total=len(src_ids),
            desc="decoding",
            unit="sent",
            disable=not progress,
            file=sys.stderr,
            leave=False,
        )
        for batch in batches:
            # The source gets an EOS appended, as in training, within max_src_len tokens.
            rows = collate([(i, src_ids[i][: self._max_src], []) for i in batch]).to(self.device)
            src, mask = rows.src, rows.src_padding_mask
            with autocast(self.device, self.precision):
                hyps = generate(
                    self.model,
                    src,
                    mask,
                    beam_size=beam,
                    length_penalty=self.decode.length_penalty,
                    max_len_a=self.decode.max_len_a,
                    max_len_b=self.decode.max_len_b,
                    bos_id=self.tokenizer.BOS,
                    eos_id=self.tokenizer.EOS,
                    pad_id=self.tokenizer.PAD,
                )
            for i, hyp in zip(batch, hyps):
                out[i] = hyp
            bar.update(len(batch))
        bar.close()
        self.model.train(was_training)
        return out

    def translate(self, sentences: list[str], progress: bool = False) -> list[str]:
        """Detokenized translations, one per input; blank inputs give blank outputs."""
        src_ids = self.tokenizer.encode([s.strip() for s in sentences])
        for n, ids in enumerate(src_ids, 1):
            if self._max_src is not None and len(ids) > self._max_src:
                print(
                    f"warning: line {n} has {len(ids)} subword tokens; truncated to the first "
                    f"{self._max_src} (the model's maximum source length)",
                    file=sys.stderr,
                )
        todo = [i for i, ids in enumerate(src_ids) if ids]
        hyps = self.translate_ids([src_ids[i] for i in todo], progress=progress)
        out = [""] * len(sentences)
        for i, text in zip(todo, self.tokenizer.decode(hyps)):
            out[i] = text
        return out

    @torch.no_grad()
    def latency_ms(self, src_ids: list[list[int]]) -> float:
        """Median milliseconds to translate one sentence alone (batch size 1)."""
        self.translate_ids(src_ids[:2])  # warm-up: allocator, kernels, lazy init
        times = []
        for ids in src_ids:
            self._sync()
            start = time.perf_counter()
            self.translate_ids([ids])
            self._sync()
            times.append((time.perf_counter() - start) * 1000)
        return statistics.median(times)

    def timed_translate_ids(self, src_ids: list[list[int]], progress: bool = False):
        """``(hypotheses, sentences_per_s)`` at the evaluation batch size."""
        self._sync()
        start = time.perf_counter()
        hyps = self.translate_ids(src_ids, progress=progress)
        self._sync()
        return hyps, len(src_ids) / max(time.perf_counter() - start, 1e-9)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
