"""docs/extending.md, "An analysis": the attention-weighted distance of each encoder head over
the batches ``analyze`` measures on, checked against one sentence at a time without padding."""

from __future__ import annotations

import torch

from translate.analysis.heads import make_batches
from translate.nn.model import Seq2SeqTransformer
from translate.runtime.device import autocast, eval_mode

V = 30


# recipe: start distance
# translate/analysis/distance.py
@torch.no_grad()
def attention_distance(model, batches, device, precision) -> dict[str, list[list[float]]]:
    """``{"encoder": [per layer: [per head: mean distance]]}`` over the real (unpadded) queries."""
    sums, rows = 0.0, 0
    with eval_mode(model):
        for batch in (b.to(device) for b in batches):
            with autocast(device, precision):
                maps = model.attention_maps(batch.src, batch.tgt_in, batch.src_padding_mask)
            keep = ~batch.src_padding_mask  # (B, S)
            pos = torch.arange(keep.size(1), device=device)
            dist = (pos[:, None] - pos[None, :]).abs().float()  # (S, S)
            per = [((w.float() * dist).sum(-1) * keep[:, None]).sum((0, 2)) for w in maps.encoder]
            sums, rows = sums + torch.stack(per).double().cpu(), rows + int(keep.sum())  # (L, H)
    return {"encoder": (sums / max(rows, 1)).tolist()}
# recipe: end distance


def test_the_distance_is_each_heads_mean_over_real_queries_in_any_batching():
    torch.manual_seed(0)
    model = Seq2SeqTransformer(vocab_size=V, d_model=16, num_heads=2, d_ff=32, dropout=0.0)
    g = torch.Generator().manual_seed(1)
    src = [torch.randint(4, V, (n,), generator=g).tolist() for n in (3, 9, 5, 6)]
    tgt = [torch.randint(4, V, (n,), generator=g).tolist() for n in (4, 2, 6, 3)]
    batches = make_batches(src, tgt, max_tokens=1000)
    assert len(batches) == 1 and batches[0].src_padding_mask.any()  # padding to exclude
    ours = attention_distance(model, batches, torch.device("cpu"), "32")["encoder"]
    alone = [  # (sentences, L, H): one sentence a batch, so no padding
        attention_distance(model, make_batches([s], [t], 1000), torch.device("cpu"), "32")
        for s, t in zip(src, tgt)
    ]
    lengths = torch.tensor([len(s) + 1 for s in src], dtype=torch.float64)  # with EOS
    per_sentence = torch.tensor([a["encoder"] for a in alone], dtype=torch.float64)
    expected = (per_sentence * lengths[:, None, None]).sum(0) / lengths.sum()
    # The model sums in float32: agreement to float32's precision, whatever the batching.
    torch.testing.assert_close(torch.tensor(ours), expected.float())
    assert torch.tensor(ours).shape == (model.num_layers["encoder"], 2)
    assert model.training  # eval_mode put it back
