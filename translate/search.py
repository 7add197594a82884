"""Greedy and batched beam search over the decoder's incremental cache.

Both searches encode the source once and feed one new target token per step; the decoder cache
(:meth:`Seq2SeqTransformer.new_cache`) keeps self-attention keys/values and the encoder's
projected keys/values (fairseq's contract). Rows whose sentence is finished are dropped from the
batch with :meth:`DecoderCache.reorder`, so long sentences do not make short ones pay.

Conventions shared by both searches:

* Output: per input row, in input order, the generated ids without BOS and EOS.
* Maximum output length per sentence: ``int(max_len_a * src_len + max_len_b)`` where
  ``src_len`` counts non-pad source tokens (fairseq's ``--max-len-a/--max-len-b``). A sentence
  that reaches it stops there, without EOS, and no EOS log-probability is added to its score.
* PAD and BOS are never generated (their log-probabilities are ``-inf``).
* The model runs in whatever dtype/autocast the caller set; log-softmax and scores are float32.

Beam search scores a finished hypothesis with fairseq's length normalisation,
``sum(log p) / len ** length_penalty``, where ``len`` counts the generated tokens including the
EOS (fairseq's ``--lenpen``; not GNMT's ``((5 + len) / 6) ** alpha``).
"""

from __future__ import annotations

import torch
from torch import Tensor


def max_lengths(src: Tensor, src_padding_mask: Tensor | None, a: float, b: float) -> list[int]:
    """Per-row output limit ``int(a * src_len + b)`` (at least 0); ``src (B, S)``."""
    if src_padding_mask is None:
        src_lens = [src.size(1)] * src.size(0)
    else:
        src_lens = (~src_padding_mask).sum(dim=1).tolist()
    return [max(0, int(a * n + b)) for n in src_lens]


def _log_probs(logits: Tensor, pad_id: int, bos_id: int) -> Tensor:
    """Float32 log-softmax of ``logits (N, V)`` with PAD and BOS excluded."""
    lprobs = torch.log_softmax(logits.float(), dim=-1)  # (N, V)
    lprobs[:, pad_id] = float("-inf")
    lprobs[:, bos_id] = float("-inf")
    return lprobs


@torch.no_grad()
def greedy_search(
    model,
    src: Tensor,
    src_padding_mask: Tensor | None,
    *,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    max_len_a: float = 1.5,
    max_len_b: float = 10,
    use_cache: bool = True,
) -> list[list[int]]:
    """Most probable next token at every step.

    Args:
        src: source ids ``(B, S)``; src_padding_mask: ``(B, S)`` bool, True = pad (or None).
        use_cache: feed one token per step through the cache; ``False`` re-runs the decoder on
            the whole prefix every step (same tokens, for benchmarking the cache).

    Returns:
        ``B`` lists of token ids (no BOS/EOS), in input order.
    """
    B = src.size(0)
    if B == 0:
        return []
    limits = torch.tensor(max_lengths(src, src_padding_mask, max_len_a, max_len_b))
    memory = model.encode(src, src_padding_mask)  # (B, S, D)
    mask = src_padding_mask
    cache = model.new_cache() if use_cache else None
    tokens = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)  # (n, t + 1)
    rows = torch.arange(B)  # original index of each live row (CPU)
    out: list[list[int]] = [[] for _ in range(B)]
    keep = limits > 0
    t = 0
    while True:
        if not keep.all():  # drop finished rows from the batch and the cache
            rows = rows[keep]
            if rows.numel() == 0:
                break
            index = keep.nonzero().squeeze(1).to(src.device)  # (n',)
            memory, tokens = memory.index_select(0, index), tokens.index_select(0, index)
            mask = None if mask is None else mask.index_select(0, index)
            if cache is not None:
                cache.reorder(index)
        new = tokens[:, -1:] if use_cache else tokens  # (n, 1) or (n, t + 1)
        logits = model.decode(new, memory, mask, cache=cache)[:, -1]  # (n, V)
        next_tokens = _log_probs(logits, pad_id, bos_id).argmax(dim=-1)  # (n,)
        tokens = torch.cat([tokens, next_tokens.unsqueeze(1)], dim=1)  # (n, t + 2)
        ended = (next_tokens == eos_id).cpu()
        for row, token, is_eos in zip(rows.tolist(), next_tokens.tolist(), ended.tolist()):
            if not is_eos:
                out[row].append(token)
        t += 1
        keep = ~ended & (limits[rows] > t)
    return out


@torch.no_grad()
def beam_search(
    model,
    src: Tensor,
    src_padding_mask: Tensor | None,
    *,
    beam_size: int = 5,
    length_penalty: float = 1.0,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    max_len_a: float = 1.5,
    max_len_b: float = 10,
) -> list[list[int]]:
    """Batched beam search: ``B`` sentences times ``K = beam_size`` beams as ``B*K`` rows.

    Each step takes the top ``2K`` extensions of a sentence's ``K`` beams (fairseq): EOS among
    the first ``K`` becomes a finished hypothesis, the first ``K`` non-EOS extensions stay live.
    A sentence stops when it has ``K`` finished hypotheses and its best live beam, normalised at
    its current length, scores no better than the worst of them (Hugging Face's default
    stopping rule: exact for ``length_penalty <= 0``, a heuristic above 0, where a longer
    hypothesis could still gain from the normalisation), or when it reaches its maximum length,
    where the live beams are finished without EOS. With ``K = 1`` this is greedy search.

    Args:
        src: source ids ``(B, S)``; src_padding_mask: ``(B, S)`` bool, True = pad (or None).
        beam_size: ``K``; length_penalty: exponent of the length normalisation (0 = raw sum).

    Returns:
        ``B`` lists of token ids (no BOS/EOS), in input order: each sentence's best finished
        hypothesis by normalised score.
    """
    best = scored_beam_search(
        model,
        src,
        src_padding_mask,
        beam_size=beam_size,
        length_penalty=length_penalty,
        bos_id=bos_id,
        eos_id=eos_id,
        pad_id=pad_id,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
    )
    return [hyp for _, hyp in best]


@torch.no_grad()
def scored_beam_search(
    model,
    src: Tensor,
    src_padding_mask: Tensor | None,
    *,
    beam_size: int,
    length_penalty: float,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    max_len_a: float,
    max_len_b: float,
) -> list[tuple[float, list[int]]]:
    """:func:`beam_search`, also returning each best hypothesis's normalised score."""
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    B, K, device = src.size(0), beam_size, src.device
    if B == 0:
        return []
    limits = torch.tensor(max_lengths(src, src_padding_mask, max_len_a, max_len_b))
    memory = model.encode(src, src_padding_mask).repeat_interleave(K, dim=0)  # (B*K, S, D)
    mask = None if src_padding_mask is None else src_padding_mask.repeat_interleave(K, dim=0)
    cache = model.new_cache()
    tokens = torch.full((B * K, 1), bos_id, dtype=torch.long, device=device)  # (n*K, t + 1)
    # Only beam 0 starts live, so the first step does not expand K copies of BOS.
    scores = torch.full((B, K), float("-inf"), device=device)  # (n, K) summed log-probs
    scores[:, 0] = 0.0
    sents = torch.arange(B)  # original index of each live sentence (CPU)
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(B)]
    beam_offsets = torch.arange(K, device=device)  # (K,)
    done = torch.zeros(B, dtype=torch.bool)
    t = 0
    while True:
        # Sentences at their length limit: live beams finish as they are, without EOS.
        at_limit = ((limits[sents] <= t) & ~done).nonzero().squeeze(1).tolist()
        if at_limit:
            prefixes, live_scores = tokens[:, 1:].tolist(), scores.tolist()  # (n*K, t), (n, K)
        for i in at_limit:
            for k, score in enumerate(live_scores[i]):
                if score > float("-inf"):
                    norm = score / max(t, 1) ** length_penalty
                    finished[sents[i].item()].append((norm, prefixes[i * K + k]))
            done[i] = True
        if done.any():  # drop finished sentences from the batch and the cache
            keep = (~done).nonzero().squeeze(1)  # (n',)
            sents = sents[keep]
            if sents.numel() == 0:
                break
            keep = keep.to(device)
            rows = (keep.unsqueeze(1) * K + beam_offsets).view(-1)  # (n'*K,)
            memory, tokens = memory.index_select(0, rows), tokens.index_select(0, rows)
            mask = None if mask is None else mask.index_select(0, rows)
            scores = scores.index_select(0, keep)
            cache.reorder(rows)
            done = torch.zeros(sents.numel(), dtype=torch.bool)
        n = sents.numel()

        logits = model.decode(tokens[:, -1:], memory, mask, cache=cache)[:, -1]  # (n*K, V)
        lprobs = _log_probs(logits, pad_id, bos_id)  # (n*K, V)
        V = lprobs.size(1)
        candidates = (scores.view(n * K, 1) + lprobs).view(n, K * V)  # (n, K*V)
        top_scores, top_index = candidates.topk(min(2 * K, K * V), dim=1)  # (n, 2K)
        top_beams, top_tokens = top_index // V, top_index % V  # (n, 2K)
        is_eos = top_tokens == eos_id  # (n, 2K)

        # EOS among the first K candidates: a finished hypothesis of length t + 1 (with EOS).
        finishing = (is_eos[:, :K] & top_scores[:, :K].isfinite()).nonzero().tolist()
        if finishing:
            prefixes = tokens[:, 1:].tolist()  # (n*K, t)
            eos_scores, eos_beams = top_scores[:, :K].tolist(), top_beams[:, :K].tolist()
        for i, j in finishing:
            norm = eos_scores[i][j] / (t + 1) ** length_penalty
            finished[sents[i].item()].append((norm, prefixes[i * K + eos_beams[i][j]]))

        # The first K non-EOS candidates, in score order, are the new live beams.
        rank = is_eos.long() * top_index.size(1) + torch.arange(top_index.size(1), device=device)
        live = rank.argsort(dim=1)[:, :K]  # (n, K)
        scores = top_scores.gather(1, live)  # (n, K)
        beams = top_beams.gather(1, live)  # (n, K)
        rows = (torch.arange(n, device=device).unsqueeze(1) * K + beams).view(-1)  # (n*K,)
        new_tokens = top_tokens.gather(1, live).view(n * K, 1)  # (n*K, 1)
        tokens = torch.cat([tokens.index_select(0, rows), new_tokens], dim=1)  # (n*K, t + 2)
        cache.reorder(rows)
        t += 1

        # Stopping rule: K finished hypotheses that the best live beam does not beat.
        best_live = (scores[:, 0] / t**length_penalty).tolist()  # (n,)
        for i, sent in enumerate(sents.tolist()):
            if len(finished[sent]) >= K:
                worst_kept = sorted((s for s, _ in finished[sent]), reverse=True)[K - 1]
                done[i] = best_live[i] <= worst_kept
    # max() keeps the first of equal scores, i.e. the one finished earliest.
    return [max(hyps, key=lambda h: h[0]) for hyps in finished]


def generate(
    model,
    src: Tensor,
    src_padding_mask: Tensor | None,
    *,
    beam_size: int,
    length_penalty: float,
    max_len_a: float,
    max_len_b: float,
    bos_id: int,
    eos_id: int,
    pad_id: int,
) -> list[list[int]]:
    """Greedy search for ``beam_size == 1``, beam search otherwise; same output format."""
    special = dict(bos_id=bos_id, eos_id=eos_id, pad_id=pad_id)
    if beam_size == 1:
        return greedy_search(
            model, src, src_padding_mask, max_len_a=max_len_a, max_len_b=max_len_b, **special
        )
    return beam_search(
        model,
        src,
        src_padding_mask,
        beam_size=beam_size,
        length_penalty=length_penalty,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
        **special,
    )
