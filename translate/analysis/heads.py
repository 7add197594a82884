"""Per-head attention statistics (entropy, degenerate-head flags) and head masks, for
``python -m translate.analyze`` and the end of every training run (:func:`head_summary`), on
teacher-forced passes over a fixed prefix of a split: two models are compared on the same
sentences. Padded queries are ignored; padded keys have zero weight anyway."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import torch
from torch import Tensor

from translate.data.batching import Batch, sorted_batches
from translate.nn.model import HEAD_MASK_KEYS, Seq2SeqTransformer
from translate.runtime.device import autocast, eval_mode
from translate.schema import AnalysisSettings
from translate.schema import DegenerateThresholds as Thresholds

KINDS = HEAD_MASK_KEYS  # ("encoder", "decoder_self", "decoder_cross")
HeadId = tuple[str, int, int]  # (kind, layer, head)


@dataclass
class HeadStats:
    kind: str  # "encoder" | "decoder_self" | "decoder_cross"
    layer: int
    head: int
    entropy: float  # nats, mean over non-pad queries
    normalized_entropy: float  # H / log(keys the query sees), mean over queries with >= 2 keys
    max_weight: float  # mean over queries of the largest weight
    pattern: str  # the fixed place its argmax hits most often, e.g. "offset-1", "last"
    pattern_fraction: float  # share of queries whose argmax is that place
    degenerate: str | None = None  # None, "near-uniform", or the place, e.g. "previous token"
    extra: dict = field(default_factory=dict)  # importance etc., added by translate.analyze

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(d.pop("extra"))
        return d


def pattern_name(pattern: str, kind: str) -> str:
    """Readable name of a fixed place: ``offset-1`` -> ``previous token``, ``last`` -> EOS."""
    names = {"offset-1": "previous token", "offset0": "same token", "offset+1": "next token"}
    if pattern in names:
        return names[pattern]
    if pattern.startswith("offset"):
        k = int(pattern[len("offset") :])
        return f"{abs(k)} tokens {'back' if k < 0 else 'ahead'}"
    if pattern == "first":
        return "BOS" if kind == "decoder_self" else "first source token"
    return "EOS (sentence end)" if pattern == "last" else pattern


class HeadAccumulator:
    """Sums of per-query statistics for the ``H`` heads of one attention module."""

    def __init__(self, kind: str, layer: int, num_heads: int, max_offset: int) -> None:
        self.kind, self.layer, self.num_heads = kind, layer, num_heads
        self.self_attention = kind != "decoder_cross"
        # Causal self-attention never sees later keys, so only offsets <= 0 can occur there.
        last_offset = 0 if kind == "decoder_self" else max_offset
        offsets = range(-max_offset, last_offset + 1) if self.self_attention else ()
        self.patterns = [f"offset{k:+d}" if k else "offset0" for k in offsets] + ["first"]
        if kind != "decoder_self":  # in causal self-attention the last key is offset 0
            self.patterns.append("last")
        # Sums over query rows, float64 so that millions of rows add up exactly enough.
        self.rows, self.entropy = self._zeros(), self._zeros()
        self.multi_rows, self.norm_entropy, self.max_weight = (self._zeros() for _ in range(3))
        self.hits = {p: self._zeros() for p in self.patterns}

    def _zeros(self) -> Tensor:
        return torch.zeros(self.num_heads, dtype=torch.float64)

    def add(self, weights: Tensor, query_ignore: Tensor, n_keys: Tensor) -> None:
        """``weights (B, H, T, S)``, padded keys at 0; ``query_ignore (B, T)``, True for padded
        queries; ``n_keys (B, T)``: the keys each query may see (``t + 1`` if causal)."""
        p = weights.float()
        keep = ~query_ignore.bool()  # (B, T)
        multi = keep & (n_keys >= 2)  # one visible key: entropy 0 by force, says nothing
        row_entropy = torch.special.entr(p).sum(dim=-1)  # (B, H, T)
        log_n = torch.log(n_keys.clamp(min=2).float()).unsqueeze(1)  # (B, 1, T)
        top, argmax = p.max(dim=-1)  # (B, H, T) each

        def head_sum(x: Tensor, rows: Tensor) -> Tensor:  # (B, H, T) -> (H,) over kept rows
            return (x * rows.unsqueeze(1)).sum(dim=(0, 2)).double().cpu()

        self.rows += keep.sum().item()
        self.entropy += head_sum(row_entropy, keep)
        self.multi_rows += multi.sum().item()
        self.norm_entropy += head_sum(row_entropy / log_n, multi)
        self.max_weight += head_sum(top, multi)
        T = p.size(2)
        query_pos = torch.arange(T, device=p.device).view(1, 1, T)  # (1, 1, T)
        last = (n_keys - 1).unsqueeze(1)  # (B, 1, T)
        for name in self.patterns:
            if name == "first":
                target = torch.zeros_like(query_pos)
            elif name == "last":
                target = last
            else:  # a relative offset from the query's own position
                target = query_pos + int(name[len("offset") :])
            hit = (argmax == target) & (target >= 0) & (target < n_keys.unsqueeze(1))
            self.hits[name] += head_sum(hit.float(), multi)

    def stats(self, thresholds: Thresholds) -> list[HeadStats]:
        rows, multi = self.rows.clamp(min=1), self.multi_rows.clamp(min=1)
        hits = torch.stack([self.hits[p] for p in self.patterns]) / multi  # (P, H)
        best_share, best = hits.max(dim=0)  # (H,) each
        out = []
        for h in range(self.num_heads):
            s = HeadStats(
                kind=self.kind,
                layer=self.layer,
                head=h,
                entropy=float(self.entropy[h] / rows[h]),
                normalized_entropy=float(self.norm_entropy[h] / multi[h]),
                max_weight=float(self.max_weight[h] / multi[h]),
                pattern=self.patterns[int(best[h])],
                pattern_fraction=float(best_share[h]),
            )
            if self.multi_rows[h] > 0:
                s.degenerate = classify(s, thresholds)
            out.append(s)
        return out


def classify(s: HeadStats, th: Thresholds) -> str | None:
    """``"near-uniform"``, the fixed place it attends to (``"previous token"``, ...), or None."""
    if s.normalized_entropy > th.uniform_entropy:
        return "near-uniform"
    if s.pattern_fraction >= th.position_fraction and s.max_weight >= th.max_weight:
        return pattern_name(s.pattern, s.kind)
    return None


def query_layout(batch: Batch, kind: str, pad_id: int) -> tuple[Tensor, Tensor]:
    """``(query_ignore (B, T), n_keys (B, T))`` for one attention type of a batch."""
    src_len = (~batch.src_padding_mask).sum(dim=1, keepdim=True)  # (B, 1)
    if kind == "encoder":
        return batch.src_padding_mask, src_len.expand_as(batch.src_padding_mask)
    tgt_pad = batch.tgt_in == pad_id  # (B, T)
    if kind == "decoder_cross":
        return tgt_pad, src_len.expand_as(tgt_pad)
    T = tgt_pad.size(1)
    causal = torch.arange(1, T + 1, device=tgt_pad.device).expand_as(tgt_pad)  # t sees 0..t
    return tgt_pad, causal


def make_batches(
    src_ids: Sequence, tgt_ids: Sequence, max_tokens: int, max_src_len=None, max_tgt_len=None
) -> list[Batch]:
    """Teacher-forcing batches of similar length within ``max_tokens`` padded tokens, each
    sequence cut to ``max_*_len - 1`` subwords (room for EOS/BOS), as in training."""
    cut_src = None if max_src_len is None else max_src_len - 1
    cut_tgt = None if max_tgt_len is None else max_tgt_len - 1
    pairs = [
        (i, list(s)[:cut_src], list(t)[:cut_tgt]) for i, (s, t) in enumerate(zip(src_ids, tgt_ids))
    ]
    return list(sorted_batches(pairs, max_tokens))


@torch.no_grad()
def head_statistics(
    model: Seq2SeqTransformer,
    batches: Sequence[Batch],
    device: torch.device,
    precision: str,
    thresholds: Thresholds,
) -> list[HeadStats]:
    """Every head's :class:`HeadStats` over ``batches``, ordered by kind, layer, head."""
    accs = {
        (kind, layer): HeadAccumulator(kind, layer, model.num_heads, thresholds.max_offset)
        for kind in KINDS
        for layer in range(model.num_layers[kind])
    }
    with eval_mode(model):
        for batch in batches:
            batch = batch.to(device)
            with autocast(device, precision):
                maps = model.attention_maps(batch.src, batch.tgt_in, batch.src_padding_mask)
            for kind, layers in zip(KINDS, (maps.encoder, maps.decoder_self, maps.decoder_cross)):
                ignore, n_keys = query_layout(batch, kind, model.pad_id)
                for layer, weights in enumerate(layers):
                    accs[kind, layer].add(weights, ignore, n_keys)
    return [s for acc in accs.values() for s in acc.stats(thresholds)]


def summarize(stats: Sequence[HeadStats]) -> dict:
    """Means per attention type and the degenerate heads, as written into results.json."""
    out: dict = {"entropy": {}, "normalized_entropy": {}, "entropy_per_layer": {}}
    for kind in KINDS:
        mine = [s for s in stats if s.kind == kind]
        if not mine:
            continue
        out["entropy"][kind] = sum(s.entropy for s in mine) / len(mine)
        out["normalized_entropy"][kind] = sum(s.normalized_entropy for s in mine) / len(mine)
        layers = sorted({s.layer for s in mine})
        per_layer = [[s.entropy for s in mine if s.layer == n] for n in layers]
        out["entropy_per_layer"][kind] = [sum(e) / len(e) for e in per_layer]
    degenerate = [s for s in stats if s.degenerate]
    out["degenerate_heads"] = len(degenerate)
    out["total_heads"] = len(stats)
    out["degenerate"] = [
        {"kind": s.kind, "layer": s.layer, "head": s.head, "reason": s.degenerate}
        for s in degenerate
    ]
    return out


@torch.no_grad()
def head_summary(
    model: Seq2SeqTransformer,
    split,
    device: torch.device,
    precision: str,
    analysis: AnalysisSettings,
    max_src_len: int | None = None,
    max_tgt_len: int | None = None,
) -> dict:
    """:func:`summarize` (plus ``sentences``) of one teacher-forced pass over the first
    ``analysis.summary_sentences`` pairs of ``split``: cheap enough for every training run."""
    n = min(analysis.summary_sentences, len(split.src_ids))
    batches = make_batches(
        split.src_ids[:n], split.tgt_ids[:n], analysis.max_tokens, max_src_len, max_tgt_len
    )
    stats = head_statistics(model, batches, device, precision, analysis.degenerate)
    return {"sentences": n, **summarize(stats)}


def head_ids(model: Seq2SeqTransformer) -> list[HeadId]:
    """Every head as ``(kind, layer, head)``, in the order :func:`head_statistics` uses."""
    return [
        (kind, layer, head)
        for kind in KINDS
        for layer in range(model.num_layers[kind])
        for head in range(model.num_heads)
    ]


def head_mask_without(
    model: Seq2SeqTransformer, removed: Sequence[HeadId], device: torch.device | str = "cpu"
) -> dict[str, Tensor]:
    """The model's ``head_mask`` (``kind -> (num_layers, H)`` of 1.0) with ``removed`` at 0."""
    mask = {k: torch.ones(n, model.num_heads, device=device) for k, n in model.num_layers.items()}
    for kind, layer, head in removed:
        mask[kind][layer, head] = 0.0
    return mask
