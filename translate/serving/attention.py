"""One sentence pair's attention as the page draws it: every layer's heads of each kind, each
head's entropy (:mod:`translate.analysis.heads`) and each cross head's word alignment
(:mod:`translate.analysis.alignment`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from translate.analysis.alignment import align_heads, pharaoh
from translate.analysis.heads import KINDS, head_statistics, make_batches
from translate.runtime.device import autocast, eval_mode
from translate.schema import DegenerateThresholds

if TYPE_CHECKING:
    from translate.decoding.translator import Translator

DIGITS = 4  # a weight's decimals in the answer: the page shows 3, the JSON stays small
BEST_BY = "lowest mean entropy among the cross-attention heads"


def cross_alignments(cross: torch.Tensor, src_pieces: list[str], tgt_pieces: list[str]):
    """Each head's Pharaoh line of one layer's cross-attention ``(H, 1 + T, S + 1)``; the last
    query (it predicts the EOS) and the source's EOS key are dropped."""
    if not tgt_pieces:  # an empty translation aligns nothing
        return [""] * cross.size(0)
    real = cross[:, : len(tgt_pieces), : len(src_pieces)].float().cpu()  # (H, T, S)
    return [pharaoh(links) for links in align_heads(real, src_pieces, tgt_pieces)]


def sentence_attention(
    heads: Translator, src_ids: list[int], hyp_ids: list[int], thresholds: DegenerateThresholds
) -> dict:
    """The /attention answer but the translation, from ``heads``' model teacher-forced."""
    model, device, precision = heads.model, heads.device, heads.precision
    batch = make_batches([src_ids], [hyp_ids], max_tokens=2**30)[0].to(device)
    with torch.inference_mode(), eval_mode(model), autocast(device, precision):
        # Per layer (1, H, T_query, T_key).
        maps = model.attention_maps(batch.src, batch.tgt_in, batch.src_padding_mask)
    stats = head_statistics(model, [batch], device, precision, thresholds)
    src_pieces, tgt_pieces = heads.tokenizer.pieces(src_ids), heads.tokenizer.pieces(hyp_ids)
    weights = {
        kind: [layer[0].double().cpu().numpy().round(DIGITS).tolist() for layer in layers]
        for kind, layers in zip(KINDS, (maps.encoder, maps.decoder_self, maps.decoder_cross))
    }
    entropy = {kind: [[0.0] * model.num_heads for _ in weights[kind]] for kind in KINDS}
    degenerate = {kind: [[None] * model.num_heads for _ in weights[kind]] for kind in KINDS}
    for s in stats:
        entropy[s.kind][s.layer][s.head] = round(s.entropy, DIGITS)
        degenerate[s.kind][s.layer][s.head] = s.degenerate
    cross = [s for s in stats if s.kind == "decoder_cross"]
    best = min(cross, key=lambda s: s.entropy)
    return {
        "source_tokens": [*src_pieces, "</s>"],  # the encoder's keys and queries
        "target_tokens": ["<s>", *tgt_pieces],  # the decoder's inputs: BOS, then the output
        "output_tokens": [*tgt_pieces, "</s>"],  # what each decoder query predicts
        "attention": weights,
        "entropy": entropy,
        "degenerate": degenerate,
        "alignments": [
            cross_alignments(layer[0], src_pieces, tgt_pieces) for layer in maps.decoder_cross
        ],
        "best_head": {"layer": best.layer, "head": best.head, "by": BEST_BY},
    }
