"""PyTorch's fused ``scaled_dot_product_attention`` for grouped K/V heads, and which kernel it
picks. torch >= 2.5 indexes the shared K/V heads inside the kernel (``enable_gqa``); an older
torch gets them copied per query head. A probe at import decides, not the version string.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend


def probe_enable_gqa() -> bool:
    q = torch.zeros(1, 2, 1, 1)  # (B, H=2, T, Dh)
    kv = torch.zeros(1, 1, 1, 1)  # (B, Hkv=1, S, Dh)
    try:
        F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
    except (TypeError, RuntimeError):
        return False
    return True


# Probed once, at import: a plain bool, which torch.compile reads as a constant (a call to the
# probe inside a compiled forward would be traced into the graph).
SUPPORTS_ENABLE_GQA = probe_enable_gqa()


def fused_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
) -> Tensor:
    """SDPA of ``q (B, H, T, Dh)`` and ``k``/``v (B, Hkv, S, Dh)`` -> ``(B, H, T, Dh)``."""
    group = q.size(1) // k.size(1)
    if group == 1:
        return F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal)
    if SUPPORTS_ENABLE_GQA:
        # The kernel reads the shared K/V head for each query head: nothing is copied.
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask, dropout_p, is_causal, enable_gqa=True
        )
    # Older torch: expand to one K/V head per query head, in the same h // group order.
    k = k.repeat_interleave(group, dim=1)  # (B, H, S, Dh)
    v = v.repeat_interleave(group, dim=1)  # (B, H, S, Dh)
    return F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal)


def masked_fused_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor, dropout_p: float = 0.0
) -> Tensor:
    """:func:`fused_attention` with ``nn.MultiheadAttention``'s masks; fully masked rows give 0."""
    if mask.dtype == torch.bool:
        fully_masked = mask.all(dim=-1, keepdim=True)
        allowed = ~(mask & ~fully_masked)  # SDPA's bool convention is True = attend
        out = fused_attention(q, k, v, attn_mask=allowed, dropout_p=dropout_p)
    else:
        fully_masked = torch.isneginf(mask).all(dim=-1, keepdim=True)
        additive = mask.masked_fill(fully_masked, 0.0).to(q.dtype)
        out = fused_attention(q, k, v, attn_mask=additive, dropout_p=dropout_p)
    return out.masked_fill(fully_masked, 0.0)  # (B, H, T, Dh)


def sdpa_backend(
    device: torch.device,
    dtype: torch.dtype,
    num_heads: int,
    head_dim: int,
    masked: bool,
    num_kv_heads: int | None = None,
) -> str:
    """The kernel SDPA picks for our calls of this shape (causal, or with a padding mask), for
    a run's log: torch's private dispatcher's ``"flash_attention"``..., else ``"unknown"``."""
    kv_heads = num_heads if num_kv_heads is None or not SUPPORTS_ENABLE_GQA else num_kv_heads
    q = torch.zeros(2, num_heads, 8, head_dim, device=device, dtype=dtype)  # (B, H, T, Dh)
    kv = torch.zeros(2, kv_heads, 8, head_dim, device=device, dtype=dtype)  # (B, Hkv, S, Dh)
    mask = torch.zeros(2, 1, 1, 8, dtype=torch.bool, device=device) if masked else None
    gqa = {"enable_gqa": True} if kv_heads != num_heads else {}
    try:
        index = torch._fused_sdp_choice(q, kv, kv, mask, 0.0, not masked, **gqa)
        return SDPBackend(index).name.lower()
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return "unknown"
