"""Head importance by masking (Michel et al. 2019): how much worse the model gets with one head's
output zeroed at inference; masking heads by increasing importance gives the pruning curve."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from torch import Tensor, nn

from translate.analysis.heads import head_ids, head_mask_without
from translate.decoding.engine import TorchEngine
from translate.decoding.translator import Translator
from translate.metrics import score
from translate.nn.model import Seq2SeqTransformer


class HeadMasked(nn.Module):
    """``model`` with a fixed ``head_mask`` in every ``encode`` and ``decode`` search makes."""

    def __init__(self, model: Seq2SeqTransformer, head_mask: dict[str, Tensor]) -> None:
        super().__init__()
        self.model = model
        self.head_mask = head_mask

    def encode(self, src: Tensor, src_padding_mask: Tensor | None = None) -> Tensor:
        return self.model.encode(src, src_padding_mask, self.head_mask)

    def decode(self, tgt, memory, memory_padding_mask=None, cache=None) -> Tensor:
        return self.model.decode(tgt, memory, memory_padding_mask, cache, self.head_mask)

    def new_cache(self):
        return self.model.new_cache()


class MaskedBleu:
    """BLEU of ``translator``'s model on fixed sources under a head mask (None = unmasked),
    decoded by the translator's settings but a beam of ``beam_size`` when given."""

    def __init__(self, translator: Translator, src_ids: Sequence, refs: list[str], beam_size=None):
        self.translator, self.src_ids, self.refs = translator, list(src_ids), refs
        self.beam_size = beam_size

    def __call__(self, head_mask: dict[str, Tensor] | None) -> float:
        if not self.src_ids:
            return float("nan")
        base = self.translator
        model = base.model if head_mask is None else HeadMasked(base.model, head_mask)
        engine = TorchEngine(model, base.device, base.precision)
        masked = Translator(engine, base.tokenizer, base.decode, base.max_tokens, base.max_src_len)
        hyps = base.tokenizer.decode(masked.translate_ids(self.src_ids, self.beam_size))
        return score(hyps, self.refs)["bleu"]


# How a long loop reports its steps: ``progress(items)`` yields them (a progress bar); iter: silent.
Progress = Callable[[Sequence], Iterable]


def importance(
    model: Seq2SeqTransformer, loss_fn, bleu_fn=None, device="cpu", progress: Progress = iter
) -> tuple[dict, dict]:
    """``(base, {head_id: {"loss_increase", "bleu_drop"}})``: each head's when it alone is
    masked, against the unmasked model's ``base = {"loss", "bleu"}``."""
    base = {"loss": loss_fn(None), "bleu": bleu_fn(None) if bleu_fn else None}
    scores = {}
    for hid in progress(head_ids(model)):
        mask = head_mask_without(model, [hid], device)
        scores[hid] = {
            "loss_increase": loss_fn(mask) - base["loss"],
            "bleu_drop": base["bleu"] - bleu_fn(mask) if bleu_fn else None,
        }
    return base, scores


def pruning_curve(
    model, order: list, fractions, loss_fn, bleu_fn, device="cpu", progress: Progress = iter
) -> list[dict]:
    """Mask the first heads of ``order`` (least important first) to keep each fraction; one
    point per distinct head count (with 6 heads, 90% and 80% both keep 5: decoded once)."""
    total = len(order)
    curve = []
    counts = sorted({round(float(f) * total) for f in fractions}, reverse=True)
    for kept in progress(counts):
        removed = order[: total - kept]
        mask = head_mask_without(model, removed, device)
        point = {"fraction_kept": kept / total, "heads_kept": kept, "bleu": bleu_fn(mask)}
        curve.append(point | {"loss": loss_fn(mask), "removed": [list(h) for h in removed]})
    return curve
