"""The masked sequence loss: label-smoothed cross-entropy over the non-pad target tokens."""

from __future__ import annotations

import torch
from torch import Tensor


def sequence_loss(
    logits: Tensor, target: Tensor, pad_id: int, label_smoothing: float = 0.0
) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed cross-entropy and summed NLL over non-pad targets.

    ``logits (B, T, V)`` in any dtype are scored in float32; ``target (B, T)``. One
    log-softmax serves both sums (fairseq's ``label_smoothed_nll_loss``): the vocabulary-sized
    tensors dominate a small model's step, so computing them once matters. The smoothed loss
    spreads ``label_smoothing`` uniformly over the vocabulary, as ``F.cross_entropy`` does.
    """
    lprobs = torch.log_softmax(logits.float(), dim=-1).reshape(-1, logits.size(-1))  # (B*T, V)
    gold = target.reshape(-1, 1)  # (B*T, 1)
    keep = gold != pad_id
    nll = -lprobs.gather(1, gold)[keep].sum()
    if label_smoothing == 0.0:
        return nll, nll.detach()
    smooth = -lprobs.sum(dim=-1, keepdim=True)[keep].sum()
    eps = label_smoothing
    loss = (1.0 - eps) * nll + eps / lprobs.size(-1) * smooth
    return loss, nll.detach()
