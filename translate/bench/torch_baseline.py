"""The training benchmark's baseline model: ``torch.nn.Transformer`` inside our
:class:`~translate.nn.model.TokenEmbedding`, with our dropout rates and initialisation, so that
``python -m translate.bench.train`` compares the attention alone."""

from __future__ import annotations

import warnings

from torch import Tensor, nn

from translate.nn.model import TokenEmbedding, init_weights


class TorchTransformer(nn.Module):
    """The baseline: ``torch.nn.Transformer``, pre-norm, inside our :class:`TokenEmbedding`.

    ``nn.Transformer`` uses one dropout rate for residuals, attention weights and the
    feed-forward; the latter two are set to 0 afterwards, as the benchmark runs ours.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        num_heads: int,
        num_encoder_layers: int,
        num_decoder_layers: int,
        d_ff: int,
        dropout: float,
        pad_id: int,
    ) -> None:
        super().__init__()
        self.embedding = TokenEmbedding(vocab_size, d_model, pad_id, dropout)
        with warnings.catch_warnings():  # "enable_nested_tensor is True, but ...": inference only
            warnings.filterwarnings("ignore", message="enable_nested_tensor")
            self.transformer = nn.Transformer(
                d_model,
                num_heads,
                num_encoder_layers,
                num_decoder_layers,
                d_ff,
                dropout,
                batch_first=True,
                norm_first=True,
            )
        for layer in (*self.transformer.encoder.layers, *self.transformer.decoder.layers):
            layer.self_attn.dropout = 0.0
            if hasattr(layer, "multihead_attn"):
                layer.multihead_attn.dropout = 0.0
            layer.dropout.p = 0.0  # between the two feed-forward linears
        init_weights(self)

    def forward(
        self,
        src: Tensor,
        tgt_in: Tensor,
        src_padding_mask: Tensor | None = None,
        target_index: Tensor | None = None,
    ) -> Tensor:
        """Logits ``(B, T, V)``, or ``(N, V)`` at the flat positions ``target_index (N,)`` only,
        as :meth:`Seq2SeqTransformer.forward` (what ``Trainer`` asks for)."""
        T = tgt_in.size(1)
        causal = nn.Transformer.generate_square_subsequent_mask(T, device=src.device)  # (T, T)
        out = self.transformer(
            self.embedding(src),
            self.embedding(tgt_in),
            tgt_mask=causal,
            src_key_padding_mask=src_padding_mask,
            memory_key_padding_mask=src_padding_mask,
            tgt_is_causal=True,
        )  # (B, T, D)
        if target_index is not None:
            out = out.reshape(-1, out.size(-1)).index_select(0, target_index)  # (N, D)
        return self.embedding.project(out)  # (B, T, V) or (N, V)
