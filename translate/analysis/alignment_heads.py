"""Which cross-attention heads align words: every head's AER against gold or silver alignments,
for ``translate.analyze`` and ``translate.ablation align`` (docs/alignment.md). Teacher-forced,
as Garg et al. (2019) measure it: the heads link words of the very pair the reference aligns,
and no decoding error moves them."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from translate.analysis.alignment import Link, aer, align_heads, read_pharaoh
from translate.analysis.silver import MISSING, eflomal_available, silver_alignments
from translate.data.batching import Batch
from translate.data.corpus import load_raw_split
from translate.data.tokenizer import Tokenizer
from translate.errors import UserError
from translate.nn.model import Seq2SeqTransformer
from translate.runtime.device import autocast, eval_mode

log = logging.getLogger(__name__)


@dataclass
class Reference:
    """Reference alignments of the first ``len(sure)`` analysed pairs."""

    sure: list[set[Link]]
    possible: list[set[Link]]
    kind: str  # "gold" | "silver"
    origin: str  # the gold file, or how the silver ones were made


def reference_alignments(
    gold: str | None, silver_train_pairs: int, data, sources: Sequence[str], targets: Sequence[str]
) -> Reference | None:
    """Gold alignments from the Pharaoh file ``gold``, else silver ones from eflomal on the pairs
    and ``silver_train_pairs`` training pairs of ``data``; else None (one line said why)."""
    if gold:
        sure, possible = read_pharaoh(gold)
        if len(sure) < len(sources):
            raise UserError(
                f"the alignments file {gold} has {len(sure)} lines for {len(sources)} analysed "
                "pairs; give one line per pair, or analyse fewer sentences"
            )
        n = len(sources)
        return Reference(sure[:n], possible[:n], "gold", gold)
    if not silver_train_pairs:
        log.info("no AER: no gold alignments, and no training pairs for silver ones")
        return None
    if not eflomal_available():
        log.warning(MISSING)
        return None
    _, train_src, train_tgt = load_raw_split(data, "train")
    n_train = min(silver_train_pairs, len(train_src))
    log.info("silver alignments: eflomal on %d analysed + %d training pairs", len(sources), n_train)
    links = silver_alignments(sources, targets, train_src[:n_train], train_tgt[:n_train])
    origin = f"eflomal, {n_train} training pairs + the analysed, grow-diag-final-and"
    return Reference(links, links, "silver", origin)


@torch.no_grad()
def cross_links(
    model: Seq2SeqTransformer,
    batches: Sequence[Batch],
    tok: Tokenizer,
    device: torch.device,
    precision: str,
) -> dict[tuple[int, int], list[list[Link]]]:
    """``(layer, head) -> links of each pair``, in the split's order, from teacher-forced
    cross-attention: row ``t`` of ``BOS + target`` predicts target piece ``t``."""
    n = sum(len(b.indices) for b in batches)
    layers, heads = model.num_layers["decoder_cross"], model.num_heads
    out: dict[tuple[int, int], list] = {
        (layer, head): [[]] * n for layer in range(layers) for head in range(heads)
    }
    with eval_mode(model):
        for batch in batches:
            on_device = batch.to(device)
            with autocast(device, precision):
                maps = model.attention_maps(
                    on_device.src, on_device.tgt_in, on_device.src_padding_mask
                )
            for row, index in enumerate(batch.indices):
                src = _real_ids(batch.src[row], tok)
                tgt = _real_ids(batch.tgt_out[row], tok)
                src_pieces, tgt_pieces = tok.pieces(src), tok.pieces(tgt)
                for layer, weights in enumerate(maps.decoder_cross):
                    cross = weights[row, :, : len(tgt), : len(src)].cpu()  # (H, T, S)
                    for head, links in enumerate(align_heads(cross, src_pieces, tgt_pieces)):
                        out[layer, head][index] = links
    return out


def _real_ids(ids: torch.Tensor, tok: Tokenizer) -> list[int]:
    """The pieces of ``subwords + EOS + PAD...``: what comes before EOS."""
    ids = ids.tolist()
    return ids[: ids.index(tok.EOS)] if tok.EOS in ids else ids


def head_aer(links: dict[tuple[int, int], list[list[Link]]], ref: Reference) -> dict:
    """Every head's AER against ``ref`` and the best head of each layer, for analysis.json."""
    n = len(ref.sure)
    heads = [
        {"layer": layer, "head": head, "aer": aer(per_pair[:n], ref.sure, ref.possible)}
        for (layer, head), per_pair in sorted(links.items())
    ]
    layers = sorted({h["layer"] for h in heads})
    best = [min((h for h in heads if h["layer"] == n), key=lambda h: h["aer"]) for n in layers]
    return {
        "reference": ref.kind,
        "origin": ref.origin,
        "sentences": n,
        "heads": heads,
        "best_per_layer": best,
        "best": min(best, key=lambda h: h["aer"]),
    }
