"""The masked sequence loss: label-smoothed cross-entropy over the non-pad target tokens."""

from __future__ import annotations

import torch
from torch import Tensor


def sequence_loss(
    logits: Tensor, target: Tensor, pad_id: int, label_smoothing: float = 0.0
) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed cross-entropy and summed NLL over non-pad targets, in float32,
    of ``logits (B, T, V)`` / ``target (B, T)`` or ``(N, V)`` / ``(N,)`` (the real positions).
    One log-softmax serves both (fairseq's ``label_smoothed_nll_loss``): vocabulary-sized
    tensors dominate a small model's step. Smoothing is uniform, as ``F.cross_entropy``'s."""
    lprobs = torch.log_softmax(logits.float(), dim=-1).reshape(-1, logits.size(-1))  # (M, V)
    gold = target.reshape(-1, 1)  # (M, 1), M = B*T or N
    # `where`, not boolean indexing: indexing makes the device count the kept rows (a host
    # sync); `where` also keeps a NaN at a pad position out of the sums.
    keep = gold != pad_id  # (M, 1)
    nll = -torch.where(keep, lprobs.gather(1, gold), 0.0).sum()
    if label_smoothing == 0.0:
        return nll, nll.detach()
    smooth = -torch.where(keep, lprobs.sum(dim=-1, keepdim=True), 0.0).sum()
    eps = label_smoothing
    loss = (1.0 - eps) * nll + eps / lprobs.size(-1) * smooth
    return loss, nll.detach()
