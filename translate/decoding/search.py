"""Greedy and batched beam search over the decoder's incremental cache (fairseq's contract).

Finished sentences leave the batch (:meth:`DecoderCache.reorder`). Both searches return, per
input row in order, the ids without BOS and EOS; at most ``int(max_len_a * src_len + max_len_b)``
(``src_len``: non-pad source tokens; fairseq's ``--max-len-a/b``), where a sentence stops
without EOS and no EOS log-probability is scored. PAD and BOS are never generated. Log-softmax
and scores are float32. Beam search normalises as fairseq's ``--lenpen``,
``sum(log p) / len ** length_penalty`` with ``len`` counting the EOS (not GNMT's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from translate.nn.model import DecoderCache

# Per original sentence, (normalised score, ids) in the order they finished.
_Finished = list[list[tuple[float, list[int]]]]


def max_length(src_len: int, a: float, b: float) -> int:
    return max(0, int(a * src_len + b))


def max_lengths(src: Tensor, src_padding_mask: Tensor | None, a: float, b: float) -> list[int]:
    if src_padding_mask is None:
        src_lens = [src.size(1)] * src.size(0)
    else:
        src_lens = (~src_padding_mask).sum(dim=1).tolist()
    return [max_length(n, a, b) for n in src_lens]


def _padding_only(mask: Tensor | None) -> Tensor | None:
    """``mask`` if it excludes a key, else None (no mask arithmetic at every step)."""
    return mask if mask is not None and bool(mask.any()) else None


def _log_probs(logits: Tensor, pad_id: int, bos_id: int) -> Tensor:
    lprobs = torch.log_softmax(logits.float(), dim=-1)  # (N, V)
    lprobs[:, pad_id] = float("-inf")
    lprobs[:, bos_id] = float("-inf")
    return lprobs


def most_probable(lprobs: Tensor) -> Tensor:
    return lprobs.argmax(dim=-1)


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
    pick: Callable[[Tensor], Tensor] = most_probable,
) -> list[list[int]]:
    """One token per step, by ``pick`` (log-probs ``(n, V)`` to ids ``(n,)``: sampling passes its
    own). ``use_cache=False`` re-runs the decoder on the whole prefix (benchmarks the cache)."""
    B = src.size(0)
    if B == 0:
        return []
    mask = _padding_only(src_padding_mask)
    limits = max_lengths(src, mask, max_len_a, max_len_b)
    memory = model.encode(src, mask)  # (B, S, D)
    cache = model.new_cache() if use_cache else None
    # The decoder's input: the newest token (n, 1) with the cache, else the prefix (n, t + 1).
    tokens = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
    # Plain Python bookkeeping: at a few rows, tensor operations would cost more than a step.
    rows = list(range(B))  # original index of each live row
    out: list[list[int]] = [[] for _ in range(B)]
    keep = [i for i in rows if limits[i] > 0]  # positions in ``rows`` that go on
    t = 0
    while True:
        if len(keep) < len(rows):  # drop finished rows from the batch and the cache
            rows = [rows[i] for i in keep]
            if not rows:
                break
            index = torch.tensor(keep, device=src.device)  # (n',)
            tokens = tokens.index_select(0, index)
            if not use_cache:  # with a cache, the encoder output lives on in its K/V only
                memory = memory.index_select(0, index)
            mask = None if mask is None else mask.index_select(0, index)
            if cache is not None:
                cache.reorder(index, index)
        logits = model.decode(tokens, memory, mask, cache=cache)[:, -1]  # (n, V)
        memory = memory if cache is None else None  # now in the cross-attention caches
        next_tokens = pick(_log_probs(logits, pad_id, bos_id)).unsqueeze(1)  # (n, 1)
        tokens = next_tokens if use_cache else torch.cat([tokens, next_tokens], dim=1)
        t += 1
        keep = []
        for i, (row, token) in enumerate(zip(rows, next_tokens.view(-1).tolist())):
            if token != eos_id:
                out[row].append(token)
                if limits[row] > t:
                    keep.append(i)
    return out


@dataclass
class _Beams:
    """``n`` live sentences times ``K`` beams: row ``i * K + k`` of ``tokens`` and the
    self-attention caches is beam ``k`` of sentence ``i``; ``memory``, ``mask`` and the
    cross-attention caches have one row per sentence, which its beams share."""

    memory: Tensor | None  # (n, S, D) until the first step moves it into the cross caches
    mask: Tensor | None  # (n, S), True = pad
    cache: DecoderCache
    tokens: Tensor  # (n*K, t + 1): BOS, then each beam's prefix
    scores: Tensor  # (n, K) summed float32 log-probs; -inf for a beam that is not live
    sents: list[int]  # per live sentence, plain Python: its original index
    done: list[bool]  # finished, not yet dropped


def _start_beams(
    model, src: Tensor, src_padding_mask: Tensor | None, K: int, bos_id: int
) -> _Beams:
    B, device = src.size(0), src.device
    # Only beam 0 starts live, so the first step does not expand K copies of BOS.
    scores = torch.full((B, K), float("-inf"), device=device)  # (B, K)
    scores[:, 0] = 0.0
    return _Beams(
        memory=model.encode(src, src_padding_mask),  # (B, S, D)
        mask=src_padding_mask,
        cache=model.new_cache(),
        tokens=torch.full((B * K, 1), bos_id, dtype=torch.long, device=device),  # (B*K, 1)
        scores=scores,
        sents=list(range(B)),
        done=[False] * B,
    )


def _finish_at_limit(
    beams: _Beams, limits: list[int], t: int, length_penalty: float, finished: _Finished
) -> None:
    """Finish the live beams of sentences at their limit ``t``, without EOS (at ``max(t, 1)``)."""
    at_limit = [i for i, s in enumerate(beams.sents) if limits[s] <= t and not beams.done[i]]
    if not at_limit:
        return
    K = beams.scores.size(1)
    prefixes, live_scores = beams.tokens[:, 1:].tolist(), beams.scores.tolist()  # (n*K, t), (n, K)
    for i in at_limit:
        for k, score in enumerate(live_scores[i]):
            if score > float("-inf"):
                norm = score / max(t, 1) ** length_penalty
                finished[beams.sents[i]].append((norm, prefixes[i * K + k]))
        beams.done[i] = True


def _drop_done(beams: _Beams) -> bool:
    """Drop done sentences from the batch and the cache; False when none is left live."""
    if not any(beams.done):
        return True
    kept = [i for i, done in enumerate(beams.done) if not done]
    beams.sents = [beams.sents[i] for i in kept]
    if not kept:
        return False
    K = beams.scores.size(1)
    keep = torch.tensor(kept, device=beams.tokens.device)  # (n',)
    rows = (keep.unsqueeze(1) * K + torch.arange(K, device=keep.device)).view(-1)  # (n'*K,)
    if beams.memory is not None:
        beams.memory = beams.memory.index_select(0, keep)
    beams.tokens = beams.tokens.index_select(0, rows)
    beams.mask = None if beams.mask is None else beams.mask.index_select(0, keep)
    beams.scores = beams.scores.index_select(0, keep)
    beams.cache.reorder(rows, keep)
    beams.done = [False] * len(kept)
    return True


def _top_candidates(scores: Tensor, lprobs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Summed log-prob, source beam and token of each sentence's ``2K`` best extensions, each
    ``(n, 2K)``, from ``scores (n, K)`` and ``lprobs (n*K, V)``; ties in topk's order."""
    n, K = scores.shape
    # A sentence's best 2K extensions are among each beam's best 2K tokens, so only those get
    # the beam's score added (n*K*2K sums, not n*K*V) before the sentence-wide choice.
    width = min(2 * K, lprobs.size(1))
    beam_lprobs, beam_tokens = lprobs.topk(width, dim=1)  # (n*K, W)
    candidates = (scores.view(n * K, 1) + beam_lprobs).view(n, K * width)  # (n, K*W)
    top_scores, top_index = candidates.topk(min(2 * K, K * width), dim=1)  # (n, 2K)
    top_tokens = beam_tokens.view(n, K * width).gather(1, top_index)  # (n, 2K)
    return top_scores, top_index // width, top_tokens


def _finish_eos(
    beams: _Beams,
    top_scores: Tensor,
    top_beams: Tensor,
    is_eos: Tensor,
    t: int,
    length_penalty: float,
    finished: _Finished,
) -> None:
    """EOS among a sentence's first ``K`` candidates finishes its beam's prefix (``t + 1``
    tokens with EOS); before :func:`_advance`."""
    K = beams.scores.size(1)
    if not is_eos[:, :K].any():  # most steps: one check instead of the search below
        return
    finishing = (is_eos[:, :K] & top_scores[:, :K].isfinite()).nonzero().tolist()
    if not finishing:
        return
    prefixes = beams.tokens[:, 1:].tolist()  # (n*K, t)
    eos_scores, eos_beams = top_scores[:, :K].tolist(), top_beams[:, :K].tolist()
    for i, j in finishing:
        norm = eos_scores[i][j] / (t + 1) ** length_penalty
        finished[beams.sents[i]].append((norm, prefixes[i * K + eos_beams[i][j]]))


def _advance(
    beams: _Beams, top_scores: Tensor, top_beams: Tensor, top_tokens: Tensor, is_eos: Tensor
) -> None:
    """Make the first ``K`` non-EOS candidates ``(n, 2K)`` the live beams."""
    n, K = beams.scores.shape
    width, device = top_scores.size(1), top_scores.device
    # Non-EOS candidates sort first, each group keeping its score order.
    rank = is_eos.long() * width + torch.arange(width, device=device)  # (n, 2K)
    live = rank.argsort(dim=1)[:, :K]  # (n, K)
    beams.scores = top_scores.gather(1, live)  # (n, K)
    parents = top_beams.gather(1, live)  # (n, K)
    rows = (torch.arange(n, device=device).unsqueeze(1) * K + parents).view(-1)  # (n*K,)
    new_tokens = top_tokens.gather(1, live).view(n * K, 1)  # (n*K, 1)
    prefixes = beams.tokens.index_select(0, rows)  # (n*K, t + 1)
    beams.tokens = torch.cat([prefixes, new_tokens], dim=1)  # (n*K, t + 2)
    beams.cache.reorder(rows, None)  # parents are the same sentence's: cross caches stay


def _mark_stopped(beams: _Beams, t: int, length_penalty: float, finished: _Finished) -> None:
    """Mark done the sentences with ``K`` finished hypotheses the best live beam can't beat."""
    K = beams.scores.size(1)
    full = [i for i, sent in enumerate(beams.sents) if len(finished[sent]) >= K]
    if not full:
        return
    best_live = (beams.scores[:, 0] / t**length_penalty).tolist()  # (n,)
    for i in full:
        worst_kept = sorted((s for s, _ in finished[beams.sents[i]]), reverse=True)[K - 1]
        beams.done[i] = best_live[i] <= worst_kept


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
    with_scores: bool = False,
    nbest: int | None = None,
) -> list[list[int]] | list[tuple[float, list[int]]] | list[list[tuple[float, list[int]]]]:
    """Batched beam search, ``K = beam_size`` beams per sentence; each sentence's best finished
    hypothesis (``with_scores``: with its score), or its ``nbest`` (at most ``K``) best as
    ``(score, ids)``, best first. Each step takes a sentence's top ``2K`` extensions (fairseq):
    EOS among the first ``K`` finishes a hypothesis, the first ``K`` non-EOS stay live. A
    sentence stops at ``K`` finished that its best live beam, normalised at its current length,
    does not beat (Hugging Face's rule: exact for ``length_penalty <= 0``), or at its maximum
    length, its live beams finished without EOS. With ``K = 1`` this is greedy search."""
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    B = src.size(0)
    if B == 0:
        return []
    mask = _padding_only(src_padding_mask)
    limits = max_lengths(src, mask, max_len_a, max_len_b)
    beams = _start_beams(model, src, mask, beam_size, bos_id)
    finished: _Finished = [[] for _ in range(B)]
    t = 0
    while True:
        _finish_at_limit(beams, limits, t, length_penalty, finished)
        if not _drop_done(beams):
            break
        # One decoder step at output length t: finish EOS candidates, advance the live beams.
        new = beams.tokens[:, -1:]  # (n*K, 1)
        logits = model.decode(new, beams.memory, beams.mask, cache=beams.cache)[:, -1]  # (n*K, V)
        beams.memory = None  # now in the cross-attention caches
        lprobs = _log_probs(logits, pad_id, bos_id)  # (n*K, V)
        top_scores, top_beams, top_tokens = _top_candidates(beams.scores, lprobs)  # (n, 2K) each
        is_eos = top_tokens == eos_id  # (n, 2K)
        _finish_eos(beams, top_scores, top_beams, is_eos, t, length_penalty, finished)
        _advance(beams, top_scores, top_beams, top_tokens, is_eos)
        t += 1
        _mark_stopped(beams, t, length_penalty, finished)
    if nbest is not None:  # sorted() is stable: equal scores keep their finishing order
        return [sorted(hyps, key=lambda h: -h[0])[:nbest] for hyps in finished]
    # max() keeps the first of equal scores, i.e. the one finished earliest.
    best = [max(hyps, key=lambda h: h[0]) for hyps in finished]
    return best if with_scores else [hyp for _, hyp in best]
