"""One sentence pair's attention as the page draws it: every layer's heads of each kind, each
head's entropy (:mod:`translate.analysis.heads`) and each cross head's word alignment
(:mod:`translate.analysis.alignment`)."""

from __future__ import annotations

import torch

from translate.analysis.alignment import align_heads, pharaoh
from translate.analysis.heads import KINDS, head_statistics, make_batches
from translate.data.tokenizer import Tokenizer
from translate.nn.model import Seq2SeqTransformer
from translate.runtime.device import autocast, eval_mode
from translate.schema import DegenerateThresholds

DIGITS = 4  # a weight's decimals in the answer: the page shows 3, the JSON stays small
BEST_BY = "lowest mean entropy among the cross-attention heads"


def teacher_forced(
    model: Seq2SeqTransformer, src_ids: list[int], hyp_ids: list[int], device, precision: str
):
    """``(batch, maps)``: the pair as one teacher-forced batch (source + EOS, BOS + output)
    and its attention maps, each ``(1, H, T_query, T_key)`` per layer."""
    batch = make_batches([src_ids], [hyp_ids], max_tokens=2**30)[0].to(device)
    with torch.inference_mode(), eval_mode(model), autocast(device, precision):
        maps = model.attention_maps(batch.src, batch.tgt_in, batch.src_padding_mask)
    return batch, maps


def cross_alignments(cross: torch.Tensor, src_pieces: list[str], tgt_pieces: list[str]):
    """Each head's Pharaoh line of one layer's cross-attention ``(H, 1 + T, S + 1)``: the BOS
    query predicts the first piece and the last query the EOS (dropped), as is the source's
    EOS key."""
    if not tgt_pieces:  # an empty translation aligns nothing
        return [""] * cross.size(0)
    real = cross[:, : len(tgt_pieces), : len(src_pieces)].float().cpu()  # (H, T, S)
    return [pharaoh(links) for links in align_heads(real, src_pieces, tgt_pieces)]


def sentence_attention(
    model: Seq2SeqTransformer,
    tokenizer: Tokenizer,
    src_ids: list[int],
    hyp_ids: list[int],
    device,
    precision: str,
    thresholds: DegenerateThresholds,
) -> dict:
    """The /attention answer but the translation: tokens, weights, entropies, alignments."""
    batch, maps = teacher_forced(model, src_ids, hyp_ids, device, precision)
    stats = head_statistics(model, [batch], device, precision, thresholds)
    src_pieces, tgt_pieces = tokenizer.pieces(src_ids), tokenizer.pieces(hyp_ids)
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
