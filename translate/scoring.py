"""Teacher-forced scoring: :func:`batch_loss`, the one loss of a batch, which training
optimises and :func:`mean_nll` reports as the dev and test loss."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable

import torch
from torch import Tensor

from translate.data.batching import Batch, to_device
from translate.nn.loss import sequence_loss
from translate.nn.model import Seq2SeqTransformer
from translate.runtime.device import autocast, eval_mode


def batch_loss(
    forward: Callable[..., Tensor],
    batch: Batch,
    device: torch.device,
    precision: str,
    pad_id: int,
    label_smoothing: float = 0.0,
    row_multiple: int = 1,
) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed loss and summed NLL of ``batch``, logits for its real target
    positions only; ``forward``: the model or its wrapper (``torch.compile``). ``row_multiple``:
    extra rows (copies of the first position, pad targets, in neither sum) up to a multiple."""
    index = batch.target_index(pad_id)  # (N,), found on the host
    extra = -index.numel() % row_multiple
    index = to_device(torch.cat([index, index.new_zeros(extra)]) if extra else index, device)
    batch = batch.to(device)
    with autocast(device, precision):
        logits = forward(
            batch.src, batch.tgt_in, batch.src_padding_mask, target_index=index
        )  # (N + extra, V)
    target = batch.tgt_out.reshape(-1).index_select(0, index)  # (B*T,) -> (N + extra,)
    if extra:
        target[-extra:] = pad_id
    return sequence_loss(logits, target, pad_id, label_smoothing)


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
    forward = functools.partial(model, head_mask=head_mask)
    nll, tokens = 0.0, 0
    with eval_mode(model):
        for batch in batches:
            nll += float(batch_loss(forward, batch, device, precision, model.pad_id)[1])
            tokens += batch.num_tgt_tokens
    return nll / tokens if tokens else math.nan
