"""Running a trained model on text: batching, truncation, tokenization and timing around any
:class:`~translate.decoding.engine.Engine`, and :func:`load_translator`, a checkpoint's."""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from tqdm.auto import tqdm

from translate.checkpoint import load_checkpoint, non_finite
from translate.data.batching import length_sorted_batches
from translate.data.tokenizer import Tokenizer
from translate.decoding.engine import Engine, TorchEngine
from translate.errors import UserError
from translate.nn.model import Seq2SeqTransformer
from translate.runtime.device import resolve_device, resolve_precision
from translate.runtime.timing import timed
from translate.schema import DataSettings, DecodeSettings
from translate.settings import data_settings, decode_over, model_settings

WARN_LINES = 3  # truncated lines named one by one; beyond that, only their count


class Translator:
    """Translate token ids or text in batches of ``max_tokens`` padded source tokens; sources cut
    at ``max_src_len`` tokens with the EOS (None: no cap) with a warning naming ``cap_note``."""

    def __init__(
        self,
        engine: Engine,
        tokenizer: Tokenizer,
        decode: DecodeSettings,
        max_tokens: int,
        max_src_len: int | None,
        cap_note: str | None = None,
    ) -> None:
        if decode.strategy not in engine.strategies:
            raise UserError(
                f"decode.strategy={decode.strategy} is unknown to this engine; choose one of "
                f"{', '.join(engine.strategies)}"
            )
        self.engine = engine
        self.tokenizer = tokenizer
        self.decode = decode
        self.max_tokens = max_tokens
        self.max_src_len = max_src_len
        self._max_src = None if max_src_len is None else max_src_len - 1  # room for the EOS
        self.cap_note = cap_note or f"data.eval_max_len={max_src_len}, counting the EOS"

    @property
    def model(self) -> Seq2SeqTransformer:  # our engine's (other engines have none)
        return self.engine.model

    @property
    def device(self) -> torch.device:
        return self.engine.device

    @property
    def precision(self) -> str:
        return self.engine.precision

    def translate_ids(
        self, src_ids: list[list[int]], beam_size: int | None = None, progress: bool = False
    ) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in src_ids]
        lengths = [len(self.capped(ids)) + 1 for ids in src_ids]  # + EOS
        decode = self.decode
        if beam_size is not None:  # a beam of that size (1: greedy) whatever the strategy
            decode = replace(decode, strategy="beam", beam_size=beam_size)
        # Closed (and cleared) however decoding ends: a Ctrl-C's one line starts a line of its own.
        with tqdm(
            total=len(src_ids),
            desc="decoding",
            unit="sent",
            disable=not progress,
            file=sys.stderr,
            leave=False,
        ) as bar:
            for batch in length_sorted_batches(lengths, None, self.max_tokens):
                # Within max_src_len tokens once the engine appends the EOS.
                sources = [self.capped(src_ids[i]) for i in batch]
                for i, hyp in zip(batch, self.engine.generate(sources, decode)):
                    out[i] = hyp
                bar.update(len(batch))
        return out

    def translate(self, sentences: list[str], progress: bool = False) -> list[str]:
        """Detokenized translations; blank inputs give blank outputs."""
        src_ids = self.tokenizer.encode([s.strip() for s in sentences])
        self._warn_cut(src_ids)
        todo = [i for i, ids in enumerate(src_ids) if ids]
        hyps = self.translate_ids([src_ids[i] for i in todo], progress=progress)
        out = [""] * len(sentences)
        for i, text in zip(todo, self.tokenizer.decode(hyps)):
            out[i] = text
        return out

    def capped(self, ids: list[int]) -> list[int]:
        """``ids`` cut at the cap, room left for the EOS."""
        return ids[: self._max_src]

    def over_cap(self, src_ids: list[list[int]]) -> list[tuple[int, int]]:
        """``(n, length)`` of each source the cap cuts, ``n`` counted from 1."""
        if self._max_src is None:
            return []
        return [(n, len(ids)) for n, ids in enumerate(src_ids, 1) if len(ids) > self._max_src]

    def _warn_cut(self, src_ids: list[list[int]]) -> None:
        cut = self.over_cap(src_ids)
        for n, length in cut[:WARN_LINES]:
            print(
                f"warning: line {n} has {length} subword tokens; truncated to the first "
                f"{self._max_src} ({self.cap_note})",
                file=sys.stderr,
            )
        if len(cut) > WARN_LINES:
            print(
                f"warning: {len(cut)} of {len(src_ids)} lines in all were truncated",
                file=sys.stderr,
            )

    def latency_ms(self, src_ids: list[list[int]]) -> float:
        """Median milliseconds to translate one sentence alone (batch size 1)."""
        self.translate_ids(src_ids[:2])  # warm-up: allocator, kernels, lazy init
        seconds = [timed(lambda i=ids: self.translate_ids([i]), self.device)[1] for ids in src_ids]
        return statistics.median(seconds) * 1000

    def timed_translate_ids(
        self, src_ids: list[list[int]], beam_size: int | None = None, progress: bool = False
    ):
        """``(hypotheses, sentences_per_s)`` at the evaluation batch size."""
        hyps, seconds = timed(lambda: self.translate_ids(src_ids, beam_size, progress), self.device)
        return hyps, len(src_ids) / max(seconds, 1e-9)


@dataclass
class Loaded:
    translator: Translator
    data: DataSettings  # the training data config, with the command's overrides merged
    config: dict  # the checkpoint's whole resolved training config
    step: int
    # The text of each split the run read, by role (text_fingerprint); none in older exports.
    fingerprints: dict[str, str] = field(default_factory=dict)

    @property
    def model(self) -> Seq2SeqTransformer:
        return self.translator.model

    @property
    def tokenizer(self) -> Tokenizer:
        return self.translator.tokenizer


def model_from_checkpoint(ckpt: dict, path: Path) -> tuple[Seq2SeqTransformer, Tokenizer]:
    """A checkpoint's model (eval mode, CPU) and tokenizer, or a refusal that names ``path``."""
    try:
        tokenizer = Tokenizer(ckpt["tokenizer"])
    except UserError as err:
        raise UserError(f"checkpoint {path} holds a broken tokenizer: {err}; {_OTHER}") from None
    broken = non_finite(ckpt["model"])
    if broken:
        raise UserError(
            f"checkpoint {path} has non-finite weights ({broken}), which translate to garbage; "
            "use a checkpoint from before the run diverged, e.g. an earlier checkpoints/step_*.pt"
        )
    model = model_settings(ckpt["config"]["model"]).build(tokenizer.vocab_size, tokenizer.PAD)
    _load_weights(model, ckpt["model"], path)
    return model.eval(), tokenizer


_OTHER = "use another checkpoint, e.g. an earlier checkpoints/step_*.pt of the run"
_NAMED = 3  # weight names a refusal lists; beyond that, their count


def _load_weights(model: Seq2SeqTransformer, weights: dict, path: Path) -> None:
    """``weights`` into ``model``, or one line naming the first misfits (not torch's many)."""
    try:
        fit = model.load_state_dict(weights, strict=False)
    except RuntimeError as err:  # a shape differs: torch names it on the line after its header
        lines = str(err).splitlines()
        misfits = [lines[1].strip() if len(lines) > 1 else lines[0]]
    else:
        keys = {"missing": fit.missing_keys, "unexpected": fit.unexpected_keys}
        misfits = [f"{which} {_listed(names)}" for which, names in keys.items() if names]
    if misfits:
        raise UserError(
            f"checkpoint {path}: its weights do not fit its own model config "
            f"({'; '.join(misfits)}); {_OTHER}"
        )


def _listed(names: list[str]) -> str:
    more = f" and {len(names) - _NAMED} more" if len(names) > _NAMED else ""
    return ", ".join(names[:_NAMED]) + more


def load_translator(
    checkpoint: str | Path,
    device: str = "auto",
    precision: str = "auto",
    decode: DecodeSettings | dict | None = None,
    data_overrides=None,
) -> Loaded:
    """Checkpoint -> :class:`Loaded`; ``decode`` and ``data_overrides`` as ``load_engine``'s."""
    torch_device = resolve_device(device)
    precision = resolve_precision(precision, torch_device)
    ckpt = load_checkpoint(checkpoint)
    config = ckpt["config"]
    model, tokenizer = model_from_checkpoint(ckpt, Path(checkpoint))
    model.to(torch_device)
    data = data_settings(config["data"], data_overrides)
    decode = decode_over(config["decode"], decode)
    cap, run_cap = data.eval_cap, data_settings(config["data"]).eval_cap
    note = None  # where the cap comes from, when the command's data= set another than the run's
    if cap != run_cap:
        note = f"data.eval_max_len={cap} of this command's data config, counting the EOS; the "
        note += f"checkpoint's run evaluated with {run_cap}"
    engine = TorchEngine(model, torch_device, precision)
    translator = Translator(engine, tokenizer, decode, data.eval_max_tokens, cap, note)
    fingerprints = dict(ckpt.get("data_fingerprints", {}))
    return Loaded(translator, data, config, int(ckpt["step"]), fingerprints)
