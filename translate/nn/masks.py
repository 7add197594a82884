"""The masks of an attention call, merged into one, with ``torch.nn.MultiheadAttention``'s
conventions: a boolean ``True`` excludes a key, a float mask is added to the scores. Only the
drop-in compatibility needs more than a padding mask or causality: float and per-head 3-D masks.
"""

from __future__ import annotations

import torch
from torch import Tensor


def merge_masks(
    B: int,
    H: int,
    T: int,
    S: int,
    key_padding_mask: Tensor | None,
    attn_mask: Tensor | None,
    is_causal: bool,
    past: int,
    device: torch.device,
) -> Tensor | None:
    """The masks of one attention call merged into one broadcastable to ``(B, H, T, S)``:
    bool (``True`` = excluded), or float (added to the scores) if any of them is.

    ``key_padding_mask (B, S)``; ``attn_mask (T, S)`` or ``(B*H, T, S)``; ``is_causal``
    excludes keys after each query, whose absolute position is ``past + t``. None if there is
    no mask at all."""
    masks = []
    if key_padding_mask is not None:
        masks.append(key_padding_mask.view(B, 1, 1, S))  # (B, 1, 1, S)
    if attn_mask is not None:
        if attn_mask.dim() == 3:
            attn_mask = attn_mask.view(B, H, T, S)  # (B, H, T, S) from (B*H, T, S)
        masks.append(attn_mask)
    if is_causal:
        # Query t (absolute position past + t) may see keys 0..past + t.
        rows = torch.arange(past, past + T, device=device).unsqueeze(1)  # (T, 1)
        masks.append(torch.arange(S, device=device).unsqueeze(0) > rows)  # (T, S)
    if not masks:
        return None
    if any(m.dtype != torch.bool for m in masks):
        dtype = next(m.dtype for m in masks if m.dtype != torch.bool)
        as_float = [
            torch.zeros(m.shape, dtype=dtype, device=device).masked_fill(m, float("-inf"))
            if m.dtype == torch.bool
            else m
            for m in masks
        ]
        merged = as_float[0]
        for m in as_float[1:]:
            merged = merged + m
        return merged
    merged = masks[0]
    for m in masks[1:]:
        merged = merged | m
    return merged
