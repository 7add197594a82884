"""Multi-head attention written out by hand (the reference, Vaswani et al. 2017, which can
return per-head weights), or the same function through ``F.scaled_dot_product_attention``
(``impl="sdpa"``; ``need_weights=True`` switches it to the manual path, logged once).

Masks follow ``torch.nn.MultiheadAttention``: bool ``True`` excludes a key, a float mask is
added to the scores; a query row with every key excluded gives zeros (not NaN) and zero weights.

Incremental decoding (fairseq's contract): the caller owns an :class:`AttentionCache` per
module, updated in place at every step; cross-attention (``static=True``) projects the encoder
output once. Keys/values may hold one row per ``r`` query rows: a sentence's beams then read
one copy of its encoder output, not ``r``.

Grouped-query attention (Ainslie et al. 2023): query head ``h`` reads K/V head ``h // G``,
``G = num_heads // num_kv_heads`` (1: multi-query, Shazeer 2019); the K/V projections and the
cache shrink by ``G``, masks, weights and ``head_mask`` stay per query head.
"""

from __future__ import annotations

import functools
import logging
import math
import operator

import torch
from torch import Tensor, nn

from translate.nn.cache import AttentionCache
from translate.nn.config import IMPLS, check_heads
from translate.nn.derived import DerivedWeight, Linear, linear_t, stacked, transposed, uses_derived
from translate.nn.dropout import dropout
from translate.nn.sdpa import fused_attention, masked_fused_attention

log = logging.getLogger(__name__)


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
    training: bool = False,
) -> tuple[Tensor, Tensor]:
    """Reference attention: ``q (B, H, T, Dh)``, ``k``/``v (B, Hkv, S, Dh)``, ``mask``
    broadcastable to ``(B, H, T, S)`` -> ``out (B, H, T, Dh)``, ``weights (B, H, T, S)``."""
    B, H, T, Dh = q.shape
    Hkv, S = k.size(1), k.size(2)
    # The G = H / Hkv query heads of a group take turns on the query axis, so each shared K/V
    # head is multiplied once, as it is, never copied G times.
    q = q.reshape(B, Hkv, H // Hkv * T, Dh)  # (B, Hkv, G*T, Dh) from (B, Hkv, G, T, Dh)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(Dh)  # (B, Hkv, G*T, S)
    scores = scores.view(B, H, T, S)  # (B, H, T, S): masks and softmax per query head
    fully_masked = None
    if mask is not None:
        excluded = mask if mask.dtype == torch.bool else torch.isneginf(mask)
        fully_masked = excluded.all(dim=-1, keepdim=True)  # (B|1, H|1, T, 1)
        if mask.dtype == torch.bool:
            # Un-exclude fully masked rows so softmax stays finite; their weights are zeroed below.
            scores = scores.masked_fill(mask & ~fully_masked, float("-inf"))
        else:
            scores = scores + mask.masked_fill(fully_masked, 0.0)
    weights = torch.softmax(scores, dim=-1)
    if fully_masked is not None:
        weights = weights.masked_fill(fully_masked, 0.0)
    weights = dropout(weights, dropout_p, training)
    out = weights.reshape(B, Hkv, H // Hkv * T, S) @ v  # (B, Hkv, G*T, Dh)
    return out.view(B, H, T, Dh), weights  # (B, H, T, Dh), (B, H, T, S)


class MultiHeadAttention(nn.Module):
    """Multi-head attention, batch-first, with ``torch.nn.MultiheadAttention``'s semantics;
    ``num_kv_heads`` (a divisor of ``num_heads``, None = ``num_heads``) K/V heads."""

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        impl: str = "manual",
        kdim: int | None = None,
        vdim: int | None = None,
        num_kv_heads: int | None = None,
    ) -> None:
        super().__init__()
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        check_heads(embed_dim, num_heads, num_kv_heads)
        if impl not in IMPLS:
            raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
        self.embed_dim = embed_dim
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        self.impl = impl
        kv_dim = num_kv_heads * self.head_dim
        self.q_proj = Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = Linear(self.kdim, kv_dim, bias=bias)
        self.v_proj = Linear(self.vdim, kv_dim, bias=bias)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias)
        # The q/k/v projections stacked, for decoding steps (_project_step).
        self._qkv_weight, self._qkv_bias = DerivedWeight(transposed), DerivedWeight(stacked)
        self.reset_parameters()

    def reset_parameters(self) -> None:  # as nn.MultiheadAttention's
        for proj in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            nn.init.xavier_uniform_(proj.weight)
            if proj.bias is not None:
                nn.init.zeros_(proj.bias)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        cache: AttentionCache | None = None,
        head_mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """``query (B, T, D)``, ``key (B, S, kdim)``, ``value (B, S, vdim)`` -> ``(B, T, D)``
        and, with ``need_weights``, ``(B, H, T, S_total)``. A filled static cache replaces
        ``key``/``value``; they may have ``B / r`` rows (without ``attn_mask``/``is_causal``):
        query rows ``i*r .. i*r + r-1`` then attend to key row ``i``. ``key_padding_mask
        (B_kv, S_total)``; ``attn_mask (T, S_total)`` or ``(B*H, T, S_total)``; ``is_causal`` is
        offset by the cached length; ``head_mask (H,)`` scales each query head's output.
        """
        B, T, _ = query.shape
        q, k, v, past, r = self._project(query, key, value, attn_mask, is_causal, cache)
        # A single new query against a full history needs no causal mask: every key is past.
        causal = is_causal and not (past > 0 and T == 1)
        out, weights = self._attend(
            q, k, v, key_padding_mask, attn_mask, causal, past, need_weights
        )
        if head_mask is not None:
            out = out * head_mask.view(1, self.num_heads, 1, 1).to(out.dtype)  # (1, H, 1, 1)
        out = out.transpose(1, 2).reshape(B, T, self.embed_dim)  # (B, T, H*Dh)
        if weights is not None and r > 1:  # (B / r, H, r * T, S) -> (B, H, T, S)
            weights = weights.unflatten(2, (r, T)).transpose(1, 2).flatten(0, 1)
        return self.out_proj(out), (weights if need_weights else None)

    def _project(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attn_mask: Tensor | None,
        is_causal: bool,
        cache: AttentionCache | None,
    ) -> tuple[Tensor, Tensor, Tensor, int, int]:
        """Queries ``(B / r, H, r * T, Dh)``, keys and values ``(B / r, Hkv, S_total, Dh)``,
        the cached length before this call, and ``r``, the query rows per key row."""
        B, T, _ = query.shape
        # A decoding step's self-attention, without autograd: one GEMM.
        self_step = cache is not None and not cache.static and key is query and value is query
        if self_step and uses_derived(self.q_proj.weight):
            return *self._project_step(query, cache), 1
        filled = cache is not None and cache.static and cache.k is not None
        r = _query_group(B, (cache.k if filled else key).size(0), attn_mask, is_causal)
        # The r query rows that share a key row become r * T queries of that row.
        query = query.reshape(B // r, r * T, self.embed_dim)  # (B / r, r * T, D)
        # Queries are projected before keys and values: autograd sums self-attention's input
        # gradient in that order, and another order would change training in the last bits.
        q = self._split_heads(self.q_proj(query), self.num_heads)  # (B / r, H, r * T, Dh)
        k, v, past = self._project_kv(key, value, cache)  # (B / r, Hkv, S_total, Dh) each
        return q, k, v, past, r

    def _project_step(self, x: Tensor, cache: AttentionCache) -> tuple[Tensor, Tensor, Tensor, int]:
        """A decoding step's q/k/v of ``x (B, T, D)`` as one GEMM (a step of a few rows pays per
        operator, not per multiply), K/V appended to ``cache``; and the cached length before."""
        projections = (self.q_proj, self.k_proj, self.v_proj)
        weight_t = self._qkv_weight.get(*(p.weight for p in projections))  # (D, D + 2*Dkv)
        bias = self._qkv_bias.get(*(p.bias for p in projections))  # (D + 2*Dkv,) or None
        kv_dim = self.num_kv_heads * self.head_dim
        q, k, v = linear_t(x, weight_t, bias).split([self.embed_dim, kv_dim, kv_dim], dim=-1)
        past = cache.length
        k, v = cache.append(
            self._split_heads(k, self.num_kv_heads), self._split_heads(v, self.num_kv_heads)
        )  # (B, Hkv, past + T, Dh) each
        return self._split_heads(q, self.num_heads), k, v, past  # q: (B, H, T, Dh)

    def _split_heads(self, x: Tensor, heads: int) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, heads, self.head_dim).transpose(1, 2)  # (B, heads, T, Dh)

    def _project_kv(
        self, key: Tensor, value: Tensor, cache: AttentionCache | None
    ) -> tuple[Tensor, Tensor, int]:
        """Keys and values ``(B, Hkv, S_total, Dh)``, and the cached length before this call."""
        if cache is not None and cache.static and cache.k is not None:
            return cache.k, cache.v, 0  # encoder keys/values projected at the first step
        k = self._split_heads(self.k_proj(key), self.num_kv_heads)  # (B, Hkv, S, Dh)
        v = self._split_heads(self.v_proj(value), self.num_kv_heads)  # (B, Hkv, S, Dh)
        if cache is None:
            return k, v, 0
        if cache.static:
            cache.store(k, v)
            return k, v, 0
        past = cache.length
        k, v = cache.append(k, v)  # (B, Hkv, past + S, Dh) each
        return k, v, past

    def _attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        key_padding_mask: Tensor | None,
        attn_mask: Tensor | None,
        causal: bool,
        past: int,
        need_weights: bool,
    ) -> tuple[Tensor, Tensor | None]:
        """Per-head outputs ``(B, H, T, Dh)`` from ``q (B, H, T, Dh)`` and ``k``/``v``
        ``(B, Hkv, S, Dh)``, and weights ``(B, H, T, S)`` on the manual path."""
        dropout_p = self.dropout if self.training else 0.0
        use_manual = self.impl == "manual" or need_weights
        if need_weights and self.impl == "sdpa":
            _log_weights_fallback()
        unmasked = key_padding_mask is None and attn_mask is None and (not causal or past == 0)
        if not use_manual and unmasked:
            # Mask-free or plain causal: let SDPA pick its fastest kernel (Flash where available).
            return fused_attention(q, k, v, dropout_p=dropout_p, is_causal=causal), None
        B, _, T, _ = q.shape
        mask = merge_masks(
            B, self.num_heads, T, k.size(2), key_padding_mask, attn_mask, causal, past, q.device
        )
        if use_manual:
            return scaled_dot_product_attention(q, k, v, mask, dropout_p, self.training)
        return masked_fused_attention(q, k, v, mask, dropout_p), None

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention, impl: str = "manual") -> MultiHeadAttention:
        """Ours with the weights of a batch-first ``torch.nn.MultiheadAttention``, in its packed
        ``in_proj_weight`` layout or the separate one of other ``kdim``/``vdim``."""
        if module.bias_k is not None or module.add_zero_attn:
            raise ValueError("add_bias_kv and add_zero_attn have no counterpart here")
        if not module.batch_first:
            raise ValueError(
                "the nn.MultiheadAttention is seq-first (batch_first=False) but MultiHeadAttention "
                "is batch-first; construct nn.MultiheadAttention(..., batch_first=True)"
            )
        D, out = module.embed_dim, module.out_proj
        bias = module.in_proj_bias is not None
        ours = cls(
            D,
            module.num_heads,
            module.dropout,
            bias=bias,
            impl=impl,
            kdim=module.kdim,
            vdim=module.vdim,
        )
        if module._qkv_same_embed_dim:
            weights = module.in_proj_weight.detach().split(D, dim=0)  # 3 x (D, D)
        else:
            # (D, D), (D, kdim), (D, vdim): only k/v widths may differ from D.
            weights = (module.q_proj_weight, module.k_proj_weight, module.v_proj_weight)
        # torch keeps one packed bias (3D,) in both layouts.
        biases = module.in_proj_bias.detach().split(D) if bias else (None, None, None)
        ours.to(device=out.weight.device, dtype=out.weight.dtype)
        projections = (ours.q_proj, ours.k_proj, ours.v_proj, ours.out_proj)
        with torch.no_grad():
            for proj, w, b in zip(projections, (*weights, out.weight), (*biases, out.bias)):
                proj.weight.copy_(w)
                if b is not None:
                    proj.bias.copy_(b)
        return ours


def _query_group(B: int, B_kv: int, attn_mask: Tensor | None, is_causal: bool) -> int:
    if B_kv == B:
        return 1
    if B % B_kv or attn_mask is not None or is_causal:
        raise ValueError(
            f"keys/values have {B_kv} rows for {B} query rows: they may have fewer only if "
            f"{B_kv} divides {B}, without attn_mask or is_causal"
        )
    return B // B_kv


@functools.cache  # once per process
def _log_weights_fallback() -> None:
    log.info("need_weights=True: using the manual attention path (SDPA returns no weights)")


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
    """The masks of one call as one broadcastable to ``(B, H, T, S)`` (None if none): bool, or
    float if any is. Only the drop-in compatibility needs float and 3-D ``(B*H, T, S)`` masks."""
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
    dtype = next((m.dtype for m in masks if m.dtype != torch.bool), None)
    if dtype is None:
        return functools.reduce(operator.or_, masks)
    as_float = [
        torch.zeros(m.shape, dtype=dtype, device=device).masked_fill(m, float("-inf"))
        if m.dtype == torch.bool
        else m
        for m in masks
    ]
    return functools.reduce(operator.add, as_float)
