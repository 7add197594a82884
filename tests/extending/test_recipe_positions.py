"""docs/extending.md, "A model variant": a learned position table in a real model, in the place
of the sinusoids (what ``TokenEmbedding(learned=...)`` does in the guide), trained one step and
decoded with and without the cache."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from translate.nn.model import Seq2SeqTransformer, count_parameters

V, D, ROWS = 30, 16, 12


# recipe: start table
# translate/nn/layers.py
class LearnedPositionalEncoding(nn.Module):
    """A trained table of ``max_len`` positions; the same call as SinusoidalPositionalEncoding."""

    def __init__(self, d_model: int, max_len: int) -> None:
        super().__init__()
        self.table = nn.Embedding(max_len, d_model)

    def forward(self, length: int, offset: int = 0) -> Tensor:
        if offset + length > self.table.num_embeddings:
            raise ValueError(f"position {offset + length - 1} is beyond the learned table")
        return self.table.weight[offset : offset + length]
# recipe: end table


def tiny(learned: int | None) -> Seq2SeqTransformer:
    torch.manual_seed(0)
    model = Seq2SeqTransformer(vocab_size=V, d_model=D, num_heads=2, d_ff=32, dropout=0.0)
    if learned is not None:
        model.embedding.positions = LearnedPositionalEncoding(D, learned)
    return model.eval()


def batch() -> tuple[Tensor, Tensor, Tensor]:
    g = torch.Generator().manual_seed(1)
    src, tgt = torch.randint(4, V, (3, 7), generator=g), torch.randint(4, V, (3, 6), generator=g)
    pad = torch.zeros(3, 7, dtype=torch.bool)
    pad[1, 5:] = True
    return src.masked_fill(pad, 0), pad, tgt


def test_the_table_is_trained_and_counted():
    model, (src, pad, tgt) = tiny(ROWS), batch()
    assert count_parameters(model) == count_parameters(tiny(None)) + ROWS * D
    model.train()
    model(src, tgt, pad).logsumexp(-1).mean().backward()
    grad = model.embedding.positions.table.weight.grad
    assert grad[:7].abs().sum(-1).gt(0).all()  # the positions used
    assert grad[7:].abs().sum() == 0  # no longer sequence than 7 here


def test_cached_decoding_equals_the_full_prefix_up_to_the_tables_end():
    model, (src, pad, tgt) = tiny(ROWS), batch()
    memory = model.encode(src, pad)
    full = model.decode(tgt, memory, pad)
    cache = model.new_cache()
    steps = [model.decode(tgt[:, t : t + 1], memory, pad, cache=cache) for t in range(6)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(full, tiny(None).decode(tgt, memory, pad))  # the table is in use
    with pytest.raises(ValueError, match="position 12 is beyond the learned table"):
        model.decode(torch.randint(4, V, (3, ROWS - 6 + 1)), memory, pad, cache=cache)
