"""Grouped-query and multi-query attention: ``num_kv_heads`` K/V heads shared by groups of query
heads. GQA must be exactly an MHA whose K/V weights repeat each group's, on both paths, under
every mask, through the cache and in its gradients; ``num_kv_heads == num_heads`` is today's
MHA."""

import pytest
import torch
import torch.nn.functional as F
from equivalence import assert_same_outputs_and_grads
from torch import nn

from translate.nn import sdpa
from translate.nn.attention import MultiHeadAttention
from translate.nn.cache import AttentionCache
from translate.nn.model import Seq2SeqTransformer, count_parameters

D = 32
GROUPINGS = [(8, 1), (8, 2), (8, 4), (4, 2)]  # (heads, kv_heads): MQA and GQA
MASKS = ["none", "causal", "padding", "padding+causal"]
IMPLS = ["manual", "sdpa"]


def padding_mask(lengths, S):
    return torch.arange(S).unsqueeze(0) >= torch.tensor(lengths).unsqueeze(1)  # True = pad


def make_gqa(heads, kv_heads, impl="manual", seed=0):
    torch.manual_seed(seed)
    mha = MultiHeadAttention(D, heads, impl=impl, num_kv_heads=kv_heads).eval()
    with torch.no_grad():  # non-zero biases, so their grouping is tested too
        for proj in (mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj):
            proj.bias.normal_()
    return mha


def repeat_groups(t: torch.Tensor, heads: int, kv_heads: int) -> torch.Tensor:
    """K/V projection rows ``(Hkv * Dh, ...)`` -> ``(H * Dh, ...)``: query head ``h`` gets
    K/V head ``h // (H / Hkv)``'s rows."""
    rows = t.view(kv_heads, -1, *t.shape[1:])  # (Hkv, Dh, ...)
    return rows.repeat_interleave(heads // kv_heads, dim=0).reshape(-1, *t.shape[1:])


def as_mha(gqa: MultiHeadAttention) -> MultiHeadAttention:
    """The multi-head module that computes the same function: every K/V head repeated."""
    H, Hkv = gqa.num_heads, gqa.num_kv_heads
    mha = MultiHeadAttention(D, H, impl=gqa.impl).eval()
    state = {
        name: repeat_groups(value, H, Hkv) if name.startswith(("k_proj", "v_proj")) else value
        for name, value in gqa.state_dict().items()
    }
    mha.load_state_dict(state)
    return mha


def mask_kwargs(case, B, S):
    lengths = [S, S - 2, 0][:B]  # the last row has no key at all: fully masked
    kpm = padding_mask(lengths, S) if "padding" in case else None
    return dict(key_padding_mask=kpm, is_causal="causal" in case)


def test_invalid_kv_heads_fail_with_a_clear_message():
    for kv in (0, 3, 16, -2):
        with pytest.raises(ValueError, match=f"num_kv_heads={kv} must be >= 1 and divide "):
            MultiHeadAttention(D, 8, num_kv_heads=kv)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("heads", [1, 4, 8])
def test_kv_heads_equal_heads_is_the_multi_head_module(impl, heads):
    """Same parameters (names, shapes, seeded values), same outputs and weights."""
    torch.manual_seed(3)
    before = MultiHeadAttention(D, heads, impl=impl).eval()
    torch.manual_seed(3)
    explicit = MultiHeadAttention(D, heads, impl=impl, num_kv_heads=heads).eval()
    assert explicit.num_kv_heads == before.num_kv_heads == heads
    a, b = before.state_dict(), explicit.state_dict()
    assert list(a) == list(b)
    for name in a:
        assert torch.equal(a[name], b[name]), name
    x = torch.randn(2, 5, D)
    kpm = padding_mask([5, 3], 5)
    for kwargs in (dict(is_causal=True), dict(key_padding_mask=kpm, need_weights=True)):
        out_a, w_a = before(x, x, x, **kwargs)
        out_b, w_b = explicit(x, x, x, **kwargs)
        assert torch.equal(out_a, out_b)
        assert (w_a is None and w_b is None) or torch.equal(w_a, w_b)


@pytest.mark.parametrize("heads", [1, 4])
def test_kv_heads_equal_heads_still_equals_torch(heads):
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(D, heads, batch_first=True).eval()
    ours = MultiHeadAttention(D, heads, num_kv_heads=heads).eval()
    ours.load_state_dict(MultiHeadAttention.from_torch(ref).state_dict())
    x = torch.randn(2, 6, D)
    kpm = padding_mask([6, 4], 6)
    out_ref, _ = ref(x, x, x, key_padding_mask=kpm)
    out, _ = ours(x, x, x, key_padding_mask=kpm)
    torch.testing.assert_close(out, out_ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("heads,kv_heads", GROUPINGS)
def test_kv_projections_shrink_by_the_group_size(heads, kv_heads):
    mha = MultiHeadAttention(D, heads, num_kv_heads=kv_heads)
    kv_dim = kv_heads * D // heads
    assert mha.k_proj.weight.shape == mha.v_proj.weight.shape == (kv_dim, D)
    assert mha.k_proj.bias.shape == mha.v_proj.bias.shape == (kv_dim,)
    assert mha.q_proj.weight.shape == mha.out_proj.weight.shape == (D, D)
    # Xavier-uniform on the smaller matrices: bound sqrt(6 / (fan_in + fan_out)).
    bound = (6 / (D + kv_dim)) ** 0.5
    assert mha.k_proj.weight.abs().max() <= bound and mha.k_proj.weight.abs().max() > bound / 2
    assert (mha.k_proj.bias == 0).all()


@pytest.mark.parametrize("case", MASKS)
@pytest.mark.parametrize("heads,kv_heads", GROUPINGS)
@pytest.mark.parametrize("impl", IMPLS)
def test_gqa_equals_mha_with_repeated_kv_weights(impl, heads, kv_heads, case):
    """Outputs, weights, input gradients; and the GQA K/V weight gradients are the group sums
    of the repeated MHA's."""
    gqa = make_gqa(heads, kv_heads, impl)
    mha = as_mha(gqa)
    B, T = 3, 6
    x1 = torch.randn(B, T, D, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    masks = mask_kwargs(case, B, T)
    out_g, _ = gqa(x1, x1, x1, **masks)
    out_m, _ = mha(x2, x2, x2, **masks)
    torch.testing.assert_close(out_g, out_m, atol=1e-5, rtol=1e-5)
    _, w_g = gqa(x1, x1, x1, need_weights=True, **masks)
    _, w_m = mha(x2, x2, x2, need_weights=True, **masks)
    assert w_g.shape == (B, heads, T, T)
    torch.testing.assert_close(w_g, w_m, atol=1e-6, rtol=1e-5)

    g = torch.randn_like(out_g)
    out_g.backward(g)
    out_m.backward(g)
    torch.testing.assert_close(x1.grad, x2.grad, atol=1e-5, rtol=1e-4)
    for name, p in gqa.named_parameters():
        grad_m = mha.get_parameter(name).grad
        if name.startswith(("k_proj", "v_proj")):  # (H*Dh, ...) -> (Hkv, G, Dh, ...) summed
            grad_m = grad_m.view(kv_heads, heads // kv_heads, -1, *p.shape[1:]).sum(1)
            grad_m = grad_m.reshape(p.shape)
        torch.testing.assert_close(p.grad, grad_m, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("heads,kv_heads", [(8, 1), (8, 2)])
def test_gqa_cross_attention_with_padding_equals_mha(impl, heads, kv_heads):
    gqa = make_gqa(heads, kv_heads, impl, seed=1)
    mha = as_mha(gqa)
    q, memory = torch.randn(3, 4, D), torch.randn(3, 7, D)
    kpm = padding_mask([7, 2, 0], 7)
    out_g, _ = gqa(q, memory, memory, key_padding_mask=kpm)
    out_m, _ = mha(q, memory, memory, key_padding_mask=kpm)
    torch.testing.assert_close(out_g, out_m, atol=1e-5, rtol=1e-5)
    assert torch.isfinite(out_g).all()


@pytest.mark.parametrize("case", MASKS + ["float_attn_per_head"])
@pytest.mark.parametrize("heads,kv_heads", [(8, 1), (8, 2)])
def test_gqa_manual_equals_sdpa(heads, kv_heads, case):
    manual = make_gqa(heads, kv_heads, "manual")
    fused = make_gqa(heads, kv_heads, "sdpa")
    fused.load_state_dict(manual.state_dict())
    B, T = 3, 6
    masks = mask_kwargs(case, B, T)
    if case == "float_attn_per_head":  # (B*H, T, S): one mask per query head
        masks["attn_mask"] = torch.randn(B * heads, T, T)
    assert_same_outputs_and_grads(manual, fused, torch.randn(B, T, D), masks)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("heads,kv_heads", [(8, 1), (8, 2), (4, 4)])
def test_cached_decoding_equals_full_and_stores_only_kv_heads(impl, heads, kv_heads):
    gqa = make_gqa(heads, kv_heads, impl)
    B, T, S, Dh = 2, 7, 5, D // heads
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    kpm = padding_mask([S, 3], S)
    full_self, _ = gqa(x, x, x, is_causal=True)
    full_cross, _ = gqa(x, memory, memory, key_padding_mask=kpm)
    self_cache, cross_cache = AttentionCache(), AttentionCache(static=True)
    steps_self, steps_cross = [], []
    for t in range(T):
        step = x[:, t : t + 1]
        steps_self.append(gqa(step, step, step, is_causal=True, cache=self_cache)[0])
        steps_cross.append(gqa(step, memory, memory, key_padding_mask=kpm, cache=cross_cache)[0])
    torch.testing.assert_close(torch.cat(steps_self, 1), full_self, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.cat(steps_cross, 1), full_cross, atol=1e-5, rtol=1e-5)
    assert self_cache.k.shape == self_cache.v.shape == (B, kv_heads, T, Dh)
    assert cross_cache.k.shape == cross_cache.v.shape == (B, kv_heads, S, Dh)
    assert self_cache.nbytes == 2 * B * kv_heads * T * Dh * x.element_size()


@pytest.mark.parametrize("impl", IMPLS)
def test_beam_reorder_of_a_gqa_cache_equals_recomputation(impl):
    gqa = make_gqa(8, 2, impl)
    x = torch.randn(3, 6, D)
    cache = AttentionCache()
    gqa(x[:, :4], x[:, :4], x[:, :4], is_causal=True, cache=cache)
    index = torch.tensor([2, 2, 0])
    cache.reorder(index)
    assert cache.k.shape[:2] == (3, 2)
    picked = x.index_select(0, index)
    step = picked[:, 4:5]
    out, _ = gqa(step, step, step, is_causal=True, cache=cache)
    full, _ = gqa(picked[:, :5], picked[:, :5], picked[:, :5], is_causal=True)
    torch.testing.assert_close(out, full[:, 4:5], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("impl", IMPLS)
def test_head_mask_still_masks_query_heads(impl):
    """Two query heads of one group share K/V; masking one removes that query head only."""
    heads, kv_heads, Dh = 8, 2, D // 8
    gqa = make_gqa(heads, kv_heads, impl)
    x = torch.randn(2, 5, D)
    mask = torch.ones(heads)
    mask[1] = 0
    unmasked, _ = gqa(x, x, x)
    masked, _ = gqa(x, x, x, head_mask=mask)
    assert not torch.allclose(masked, unmasked, atol=1e-4)
    with torch.no_grad():
        gqa.out_proj.weight[:, Dh : 2 * Dh] = 0
    expected, _ = gqa(x, x, x)
    torch.testing.assert_close(masked, expected, atol=1e-6, rtol=1e-5)


def record_sdpa_calls(monkeypatch) -> list[tuple[int, int, bool]]:
    """``(query heads, key heads, enable_gqa)`` of every ``F.scaled_dot_product_attention``."""
    calls, real = [], F.scaled_dot_product_attention

    def spy(q, k, v, *args, **kwargs):
        calls.append((q.size(1), k.size(1), kwargs.get("enable_gqa", False)))
        return real(q, k, v, *args, **kwargs)

    monkeypatch.setattr(sdpa.F, "scaled_dot_product_attention", spy)
    return calls


@pytest.mark.parametrize("supported", [True, False])
@pytest.mark.parametrize("case", MASKS)
def test_sdpa_groups_in_the_kernel_or_expands_kv_on_an_older_torch(monkeypatch, supported, case):
    """With ``enable_gqa`` the kernel gets the Hkv heads as they are; without it (the probe says
    an older torch) K/V are expanded to H heads first. Both equal the manual path."""
    if supported and not sdpa.SUPPORTS_ENABLE_GQA:
        pytest.skip("this torch has no enable_gqa")
    monkeypatch.setattr(sdpa, "SUPPORTS_ENABLE_GQA", supported)
    manual = make_gqa(8, 2, "manual")
    fused = make_gqa(8, 2, "sdpa")
    fused.load_state_dict(manual.state_dict())
    x = torch.randn(3, 6, D)
    masks = mask_kwargs(case, 3, 6)
    calls = record_sdpa_calls(monkeypatch)
    out, _ = fused(x, x, x, **masks)
    assert calls == [(8, 2, True)] if supported else calls == [(8, 8, False)]
    torch.testing.assert_close(out, manual(x, x, x, **masks)[0], atol=1e-5, rtol=1e-5)


def test_the_probe_answers_for_the_installed_torch():
    major, minor = (int(p) for p in torch.__version__.split(".")[:2])
    assert sdpa.SUPPORTS_ENABLE_GQA == sdpa.probe_enable_gqa() == ((major, minor) >= (2, 5))


def test_sdpa_backend_names_a_kernel_for_grouped_calls():
    for masked in (False, True):
        name = sdpa.sdpa_backend(torch.device("cpu"), torch.float32, 8, 4, masked, num_kv_heads=2)
        assert name != "unknown"


# --- the model: every attention grouped, cached decoding unchanged ---------------------------


def tiny_model(kv_heads, impl="manual", heads=4):
    torch.manual_seed(0)
    model = Seq2SeqTransformer(
        50, d_model=D, num_heads=heads, d_ff=64, dropout=0.0, attention_impl=impl,
        num_kv_heads=kv_heads,
    )  # fmt: skip
    return model.eval()


def attentions(model):
    for layer in model.encoder_layers:
        yield layer.self_attn
    for layer in model.decoder_layers:
        yield layer.self_attn
        yield layer.cross_attn


def test_model_threads_kv_heads_into_every_attention():
    heads, kv_heads = 4, 2
    model = tiny_model(kv_heads, heads=heads)
    mods = list(attentions(model))
    assert len(mods) == 6 and all(m.num_kv_heads == kv_heads for m in mods)
    # Each attention loses (H - Hkv) * Dh rows of K and of V, weights and biases.
    rows = (heads - kv_heads) * D // heads
    saved = len(mods) * 2 * rows * (D + 1)
    assert count_parameters(tiny_model(None, heads=heads)) - count_parameters(model) == saved
    assert all(m.num_kv_heads == heads for m in attentions(tiny_model(None, heads=heads)))


@pytest.mark.parametrize("impl", IMPLS)
def test_model_cached_decoding_with_gqa_equals_full_prefix(impl):
    model = tiny_model(1, impl)
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, 50, (2, 6), generator=g)
    src_pad = torch.zeros(2, 6, dtype=torch.bool)
    src_pad[1, 4:] = True
    tgt = torch.randint(4, 50, (2, 5), generator=g)
    memory = model.encode(src, src_pad)
    full = model.decode(tgt, memory, src_pad)
    cache = model.new_cache()
    steps = [model.decode(tgt[:, t : t + 1], memory, src_pad, cache=cache) for t in range(5)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    for c in (*cache.self_attn, *cache.cross_attn):
        assert c.k.size(1) == 1
