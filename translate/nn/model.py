"""The encoder-decoder Transformer on our own multi-head attention, with one token table for
source, target and output projection (the SentencePiece vocabulary is joint).

Initialisation: weight matrices Xavier-uniform, biases zero; the shared embedding normal with std
``d_model ** -0.5``: scaled by ``sqrt(d_model)`` on input, token vectors enter with unit
variance like the positions, and the tied output projection starts with logits of unit scale
(fairseq's and Vaswani et al.'s convention). Head masking (Michel et al. 2019), at inference:
``head_mask`` maps :data:`HEAD_MASK_KEYS` to ``(num_layers, H)`` multipliers of head outputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from translate.nn.cache import AttentionCache
from translate.nn.config import TransformerConfig, out_of_range
from translate.nn.derived import DerivedWeight, transposed, uses_derived
from translate.nn.dropout import Dropout
from translate.nn.layers import DecoderLayer, EncoderLayer, SinusoidalPositionalEncoding

HEAD_MASK_KEYS = ("encoder", "decoder_self", "decoder_cross")


class TokenEmbedding(nn.Module):
    """The joint token table as source and target input and as the tied output projection."""

    def __init__(self, vocab_size: int, d_model: int, pad_id: int, dropout: float) -> None:
        super().__init__()
        self.d_model, self.pad_id = d_model, pad_id
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        self.positions = SinusoidalPositionalEncoding(d_model)
        self.dropout = Dropout(dropout)
        self._table = DerivedWeight(transposed)  # (D, V)

    def reset_parameters(self) -> None:
        nn.init.normal_(self.embed.weight, mean=0.0, std=self.d_model**-0.5)
        with torch.no_grad():
            self.embed.weight[self.pad_id].zero_()

    def forward(self, tokens: Tensor, offset: int = 0) -> Tensor:
        x = self.embed(tokens) * math.sqrt(self.d_model)  # (B, T, D)
        x = x + self.positions(tokens.size(1), offset).to(x.dtype)
        return self.dropout(x) if self.training else x

    def project(self, x: Tensor, step: bool = False) -> Tensor:
        """``(..., D)`` -> logits ``(..., V)``; a decoding ``step`` without autograd reads a
        contiguous ``(D, V)`` copy, about twice as fast for a few rows."""
        weight = self.embed.weight
        if step and uses_derived(weight):
            return x @ self._table.get(weight)
        return x @ weight.t()


def init_weights(module: nn.Module) -> None:
    """The one initialisation (module docstring) of our model and the baselines."""
    for sub in module.modules():
        if isinstance(sub, nn.Linear):
            nn.init.xavier_uniform_(sub.weight)
            if sub.bias is not None:
                nn.init.zeros_(sub.bias)
        elif isinstance(sub, TokenEmbedding):
            sub.reset_parameters()


@dataclass
class DecoderCache:
    """One self- and one cross-attention cache per decoder layer."""

    self_attn: list[AttentionCache] = field(default_factory=list)
    cross_attn: list[AttentionCache] = field(default_factory=list)

    @property
    def length(self) -> int:  # target positions already decoded
        return self.self_attn[0].length

    def reorder(self, rows: Tensor, sources: Tensor | None) -> None:
        """Select ``rows (B',)`` of the self-attention caches and ``sources`` of the cross-
        attention ones (None: keep them, right when ``rows`` moves beams within sentences)."""
        for cache in self.self_attn:
            cache.reorder(rows)
        if sources is not None:
            for cache in self.cross_attn:
                cache.reorder(sources)


@dataclass
class AttentionMaps:
    """Per-layer attention weights, each ``(B, H, T_query, T_key)``."""

    encoder: list[Tensor]
    decoder_self: list[Tensor]
    decoder_cross: list[Tensor]


class Seq2SeqTransformer(nn.Module):
    """Built from a :class:`TransformerConfig`, or from the fields that differ from its defaults."""

    def __init__(
        self, vocab_size: int, config: TransformerConfig | None = None, pad_id: int = 0, **fields
    ) -> None:
        super().__init__()
        if config is None:
            config = TransformerConfig(**fields)
        elif fields:
            # A field replaced in a config would keep the others' derived values (num_kv_heads).
            raise TypeError(f"give a config or its fields, not both: {sorted(fields)}")
        bad = out_of_range(config)
        if bad is not None:
            name, value, check = bad
            raise ValueError(f"{name}={value} must be {check.must}")
        self.config = config
        self.d_model = config.d_model
        self.num_heads = config.num_heads
        self.num_kv_heads = config.num_kv_heads
        self.pad_id = pad_id
        self.embedding = TokenEmbedding(vocab_size, config.d_model, pad_id, config.dropout)
        self.encoder_layers = nn.ModuleList(
            EncoderLayer(config) for _ in range(config.num_encoder_layers)
        )
        self.decoder_layers = nn.ModuleList(
            DecoderLayer(config) for _ in range(config.num_decoder_layers)
        )
        # Pre-norm stacks end un-normalised; a final LayerNorm keeps their outputs on scale.
        self.encoder_norm = nn.LayerNorm(config.d_model) if config.norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(config.d_model) if config.norm_first else nn.Identity()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init_weights(self)

    def _encode(
        self, src: Tensor, src_padding_mask: Tensor | None, need_weights: bool, head_mask
    ) -> tuple[Tensor, list[Tensor]]:
        x = self.embedding(src)
        weights = []
        for i, layer in enumerate(self.encoder_layers):
            x, w = layer(x, src_padding_mask, need_weights, _head_mask(head_mask, "encoder", i))
            weights.append(w)
        return self.encoder_norm(x), weights

    def _decode(
        self,
        tgt: Tensor,
        memory: Tensor,
        memory_padding_mask: Tensor | None,
        cache: DecoderCache | None,
        need_weights: bool,
        head_mask,
    ) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        """Final decoder hidden states ``(B, T, D)``, before the vocabulary projection."""
        offset = 0 if cache is None else cache.length
        x = self.embedding(tgt, offset)
        self_ws, cross_ws = [], []
        for i, layer in enumerate(self.decoder_layers):
            x, self_w, cross_w = layer(
                x,
                memory,
                memory_padding_mask,
                self_cache=None if cache is None else cache.self_attn[i],
                cross_cache=None if cache is None else cache.cross_attn[i],
                need_weights=need_weights,
                self_head_mask=_head_mask(head_mask, "decoder_self", i),
                cross_head_mask=_head_mask(head_mask, "decoder_cross", i),
            )
            self_ws.append(self_w)
            cross_ws.append(cross_w)
        return self.decoder_norm(x), self_ws, cross_ws

    def encode(
        self,
        src: Tensor,
        src_padding_mask: Tensor | None = None,
        head_mask: dict[str, Tensor] | None = None,
    ) -> Tensor:
        """``src (B, S)``, ``src_padding_mask (B, S)`` (True = pad) -> ``(B, S, D)``."""
        return self._encode(src, src_padding_mask, False, head_mask)[0]

    def decode(
        self,
        tgt: Tensor,
        memory: Tensor | None,
        memory_padding_mask: Tensor | None = None,
        cache: DecoderCache | None = None,
        head_mask: dict[str, Tensor] | None = None,
    ) -> Tensor:
        """Next-token logits ``(B, T, V)`` for ``tgt (B, T)``: the whole prefix, or with a cache
        (updated in place; ``memory`` read at the first step only) the new tokens only.
        ``memory (B / r, S, D)`` may hold one row per ``r`` consecutive target rows."""
        hidden = self._decode(tgt, memory, memory_padding_mask, cache, False, head_mask)[0]
        return self.embedding.project(hidden, step=cache is not None)  # (B, T, V)

    def forward(
        self,
        src: Tensor,
        tgt_in: Tensor,
        src_padding_mask: Tensor | None = None,
        head_mask: dict[str, Tensor] | None = None,
        target_index: Tensor | None = None,
    ) -> Tensor:
        """Teacher-forced logits ``(B, T, V)`` for ``src (B, S)`` and ``tgt_in (B, T)`` (target
        padding comes last, behind the causal mask: no target padding mask is needed).
        ``target_index (N,)``: flat positions ``b * T + t`` of the real target tokens, for
        ``(N, V)`` logits that skip padding in the projection and log-softmax. Indices, not a
        boolean mask: a mask's count would need a host sync and break a ``torch.compile`` graph.
        """
        memory = self.encode(src, src_padding_mask, head_mask)
        hidden = self._decode(tgt_in, memory, src_padding_mask, None, False, head_mask)[0]
        if target_index is not None:
            hidden = hidden.reshape(-1, hidden.size(-1))  # (B*T, D), row-major positions
            hidden = hidden.index_select(0, target_index)  # (N, D)
        return self.embedding.project(hidden)  # (B, T, V) or (N, V)

    @torch.no_grad()
    def attention_maps(
        self,
        src: Tensor,
        tgt_in: Tensor,
        src_padding_mask: Tensor | None = None,
        head_mask: dict[str, Tensor] | None = None,
    ) -> AttentionMaps:
        memory, enc_w = self._encode(src, src_padding_mask, True, head_mask)
        _, self_w, cross_w = self._decode(tgt_in, memory, src_padding_mask, None, True, head_mask)
        return AttentionMaps(enc_w, self_w, cross_w)

    def new_cache(self) -> DecoderCache:
        n = len(self.decoder_layers)
        self_attn = [AttentionCache() for _ in range(n)]
        return DecoderCache(self_attn, [AttentionCache(static=True) for _ in range(n)])

    @property
    def num_layers(self) -> dict[str, int]:
        n_enc, n_dec = len(self.encoder_layers), len(self.decoder_layers)
        return {"encoder": n_enc, "decoder_self": n_dec, "decoder_cross": n_dec}


def _head_mask(head_mask: dict[str, Tensor] | None, key: str, layer: int) -> Tensor | None:
    return None if head_mask is None or key not in head_mask else head_mask[key][layer]


def count_parameters(model: nn.Module, trainable_only: bool = True) -> int:
    """Number of (trainable) parameters; tied weights are counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
