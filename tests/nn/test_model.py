"""The Transformer's properties: parameter counts, causality, caching, gradients, initialisation."""

import math

import pytest
import torch

from translate.nn.config import TransformerConfig
from translate.nn.layers import DecoderLayer, EncoderLayer, SinusoidalPositionalEncoding
from translate.nn.model import Seq2SeqTransformer, count_parameters

V, D = 50, 32


def tiny(heads=4, impl="manual", norm_first=True, seed=0, **kw):
    torch.manual_seed(seed)
    model = Seq2SeqTransformer(
        V,
        d_model=D,
        num_heads=heads,
        d_ff=64,
        dropout=0.0,
        attention_impl=impl,
        norm_first=norm_first,
        **kw,
    )
    return model.eval()


def batch(seed=1):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, V, (3, 6), generator=g)
    src_pad = torch.zeros(3, 6, dtype=torch.bool)
    src_pad[1, 4:] = True
    src[1, 4:] = 0
    tgt = torch.randint(4, V, (3, 5), generator=g)
    tgt[:, 0] = 2
    return src, src_pad, tgt


def test_parameter_count_is_independent_of_head_count():
    counts = {h: count_parameters(tiny(heads=h)) for h in (1, 4, 8, 16)}
    assert len(set(counts.values())) == 1, counts
    # Tied embeddings are counted once: V*D, not 2*V*D or 3*V*D.
    model = tiny()
    assert sum(p.numel() for p in model.parameters() if p.dim() == 2 and p.shape[0] == V) == V * D


def test_sizes_come_from_arguments():
    model = Seq2SeqTransformer(
        V, d_model=16, num_heads=2, num_encoder_layers=3, num_decoder_layers=1, d_ff=24
    )
    assert len(model.encoder_layers) == 3 and len(model.decoder_layers) == 1
    assert model.encoder_layers[0].ffn.fc1.weight.shape == (24, 16)
    with pytest.raises(ValueError, match="not divisible"):
        Seq2SeqTransformer(V, d_model=30, num_heads=4)
    with pytest.raises(ValueError, match="d_ff"):
        Seq2SeqTransformer(V, d_model=32, num_heads=4, d_ff=0)


def test_xavier_initialisation_and_embedding_scale():
    model = Seq2SeqTransformer(1000, d_model=128, num_heads=4, d_ff=512)
    w = model.encoder_layers[0].ffn.fc1.weight  # (512, 128)
    bound = math.sqrt(6.0 / (512 + 128))
    assert w.abs().max() <= bound and w.abs().max() > 0.95 * bound
    q = model.decoder_layers[1].cross_attn.q_proj.weight
    assert q.abs().max() <= math.sqrt(6.0 / 256)
    assert abs(model.embedding.embed.weight[1:].std().item() - 128**-0.5) < 0.01
    assert (model.embedding.embed.weight[0] == 0).all()


def test_positional_encoding_is_a_growing_buffer_without_parameters():
    pe = SinusoidalPositionalEncoding(16, initial_length=4)
    assert list(pe.parameters()) == [] and "table" not in pe.state_dict()
    long = pe(10, offset=3)
    assert long.shape == (10, 16)
    torch.testing.assert_close(long[0, 0::2], torch.sin(3 / 10000 ** (torch.arange(0, 16, 2) / 16)))
    torch.testing.assert_close(pe(1, offset=12)[0], long[-1])


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("impl", ["manual", "sdpa"])
def test_decoder_never_attends_to_future_tokens(norm_first, impl):
    model = tiny(impl=impl, norm_first=norm_first)
    src, src_pad, tgt = batch()
    logits = model(src, tgt, src_pad)
    changed = tgt.clone()
    changed[:, 3] = (changed[:, 3] + 1 - 4) % (V - 4) + 4
    logits2 = model(src, changed, src_pad)
    torch.testing.assert_close(logits2[:, :3], logits[:, :3])
    assert not torch.allclose(logits2[:, 3:], logits[:, 3:])


def test_source_padding_does_not_change_output():
    model = tiny()
    src, src_pad, tgt = batch()
    logits = model(src, tgt, src_pad)
    alone = model(src[1:2, :4], tgt[1:2])
    torch.testing.assert_close(logits[1:2], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("impl", ["manual", "sdpa"])
def test_cached_decoding_equals_full_prefix(impl):
    model = tiny(impl=impl)
    src, src_pad, tgt = batch()
    memory = model.encode(src, src_pad)
    full = model.decode(tgt, memory, src_pad)
    cache = model.new_cache()
    steps = [
        model.decode(tgt[:, t : t + 1], memory, src_pad, cache=cache) for t in range(tgt.size(1))
    ]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    assert cache.length == tgt.size(1)


def test_reordered_cache_matches_recomputation():
    model = tiny()
    src, src_pad, tgt = batch()
    memory = model.encode(src, src_pad)
    cache = model.new_cache()
    for t in range(3):
        model.decode(tgt[:, t : t + 1], memory, src_pad, cache=cache)
    order = torch.tensor([2, 0, 0])
    cache.reorder(order, order)
    step = model.decode(tgt[order, 3:4], memory[order], src_pad[order], cache=cache)
    recomputed = model.decode(tgt[order, :4], memory[order], src_pad[order])[:, -1:]
    torch.testing.assert_close(step, recomputed, atol=1e-5, rtol=1e-5)


def test_manual_and_sdpa_models_agree():
    src, src_pad, tgt = batch()
    manual, sdpa = tiny(impl="manual"), tiny(impl="sdpa")
    sdpa.load_state_dict(manual.state_dict())
    torch.testing.assert_close(
        sdpa(src, tgt, src_pad), manual(src, tgt, src_pad), atol=1e-5, rtol=1e-5
    )


def layer_config(norm_first):
    return TransformerConfig(
        d_model=8,
        num_heads=2,
        d_ff=12,
        dropout=0.0,
        attention_dropout=0.0,
        activation="gelu",
        norm_first=norm_first,
        attention_impl="manual",
    )


@pytest.mark.parametrize("norm_first", [True, False])
def test_gradcheck_encoder_and_decoder_layers(norm_first):
    torch.manual_seed(0)
    enc = EncoderLayer(layer_config(norm_first)).double()
    dec = DecoderLayer(layer_config(norm_first)).double()
    x = torch.randn(2, 4, 8, dtype=torch.float64, requires_grad=True)
    mem = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
    pad = torch.tensor([[False, False, False, True], [False, False, False, False]])
    assert torch.autograd.gradcheck(lambda a: enc(a, pad)[0], (x,))
    assert torch.autograd.gradcheck(lambda a, m: dec(a, m, pad[:, :3])[0], (x, mem))


def test_attention_maps_shapes_and_head_mask_option():
    model = tiny(heads=4)
    src, src_pad, tgt = batch()
    maps = model.attention_maps(src, tgt, src_pad)
    assert [w.shape for w in maps.encoder] == [(3, 4, 6, 6)] * 2
    assert [w.shape for w in maps.decoder_self] == [(3, 4, 5, 5)] * 2
    assert [w.shape for w in maps.decoder_cross] == [(3, 4, 5, 6)] * 2
    ones = {k: torch.ones(n, 4) for k, n in model.num_layers.items()}
    torch.testing.assert_close(model(src, tgt, src_pad, head_mask=ones), model(src, tgt, src_pad))
    ones["decoder_cross"][0, 2] = 0
    assert not torch.allclose(model(src, tgt, src_pad, head_mask=ones), model(src, tgt, src_pad))


@pytest.mark.parametrize("impl", ["manual", "sdpa"])
def test_target_index_returns_the_logits_of_those_positions_only(impl):
    model = tiny(impl=impl)
    src, src_pad, tgt = batch()
    real = torch.ones_like(tgt, dtype=torch.bool)
    real[0, 3:], real[2, 1:] = False, False  # padded target positions
    index = real.reshape(-1).nonzero().squeeze(1)  # (N,) row-major
    selected = model(src, tgt, src_pad, target_index=index)
    full = model(src, tgt, src_pad)
    assert full.shape == (3, 5, V) and selected.shape == (int(real.sum()), V)
    torch.testing.assert_close(selected, full[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "name",
    [
        "embedding.embed.weight",
        "decoder_layers.0.self_attn.q_proj.weight",
        "decoder_layers.1.self_attn.k_proj.weight",
        "decoder_layers.0.self_attn.v_proj.bias",
        "decoder_layers.1.cross_attn.out_proj.weight",
        "decoder_layers.0.ffn.fc1.weight",
        "encoder_layers.1.ffn.fc2.bias",
    ],
)
@pytest.mark.parametrize("kv_heads", [None, 2])
def test_decoding_steps_follow_parameters_after_they_change(name, kv_heads):
    """Decoding without autograd reads derived copies (weights transposed, the self-attention
    projections stacked); it equals the plain path, and an in-place update (an optimizer step)
    must be seen by the next decode, not a stale copy."""
    model = tiny(num_kv_heads=kv_heads)
    src, src_pad, tgt = batch()

    def stepwise_and_full():
        with torch.no_grad():
            memory = model.encode(src, src_pad)
            cache = model.new_cache()
            steps = [
                model.decode(tgt[:, t : t + 1], memory, src_pad, cache=cache) for t in range(5)
            ]
            return torch.cat(steps, dim=1), model.decode(tgt, memory, src_pad)

    before, full = stepwise_and_full()
    torch.testing.assert_close(before, full, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        parameter = model.get_parameter(name)
        parameter.add_(torch.randn_like(parameter))
    after, full = stepwise_and_full()
    torch.testing.assert_close(after, full, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(after, before)
