"""Teacher-forced scoring: how well a model predicts reference translations."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import Tensor

from translate.data.batching import Batch
from translate.nn.loss import sequence_loss
from translate.nn.model import Seq2SeqTransformer
from translate.runtime import autocast, eval_mode


@torch.no_grad()
def mean_nll(
    model: Seq2SeqTransformer,
    batches: Iterable[Batch],
    device: torch.device,
    precision: str,
    head_mask: dict[str, Tensor] | None = None,
) -> float:
    """Mean per-token NLL (nats, no label smoothing) over ``batches``; ``exp`` is perplexity.
    NaN when the batches hold no target token."""
    nll, tokens = 0.0, 0
    with eval_mode(model):
        for batch in batches:
            # Logits for the real target positions only: padding costs no projection.
            index = batch.target_index(model.pad_id).to(device)  # (N,), found on the host
            batch = batch.to(device)
            with autocast(device, precision):
                logits = model(
                    batch.src, batch.tgt_in, batch.src_padding_mask, head_mask, index
                )  # (N, V)
            target = batch.tgt_out.reshape(-1).index_select(0, index)  # (B*T,) -> (N,)
            nll += float(sequence_loss(logits, target, model.pad_id)[1])
            tokens += batch.num_tgt_tokens
    return nll / tokens if tokens else math.nan
