"""Our MHA against torch.nn.MultiheadAttention, the fused path against the manual one, and the
properties that must hold for any attention (masking, normalisation, caching)."""

import pytest
import torch
from torch import nn

from translate.attention import AttentionCache, MultiHeadAttention, scaled_dot_product_attention

D = 32


def make_pair(heads: int, packed: bool = True, seed: int = 0):
    torch.manual_seed(seed)
    ref = nn.MultiheadAttention(D, heads, batch_first=True)
    if not packed:
        # The separate q/k/v layout torch uses when kdim/vdim differ, with equal sizes here.
        ref._qkv_same_embed_dim = False
        w = ref.in_proj_weight.detach().clone()
        ref.q_proj_weight = nn.Parameter(w[:D].clone())
        ref.k_proj_weight = nn.Parameter(w[D : 2 * D].clone())
        ref.v_proj_weight = nn.Parameter(w[2 * D :].clone())
        ref.register_parameter("in_proj_weight", None)
    with torch.no_grad():  # non-zero biases so their copying is tested too
        ref.in_proj_bias.normal_()
        ref.out_proj.bias.normal_()
    ref.eval()
    ours = MultiHeadAttention.from_torch(ref).eval()
    return ref, ours


def padding_mask(lengths, S):
    return torch.arange(S).unsqueeze(0) >= torch.tensor(lengths).unsqueeze(1)  # True = pad


@pytest.mark.parametrize("heads", [1, 4, 8, 16])
@pytest.mark.parametrize("cross", [False, True])
def test_equals_torch_with_padding(heads, cross):
    ref, ours = make_pair(heads)
    B, T = 3, 5
    S = 7 if cross else T
    q = torch.randn(B, T, D)
    kv = torch.randn(B, S, D) if cross else q
    kpm = padding_mask([S, S - 2, 1], S)
    out_ref, w_ref = ref(
        q, kv, kv, key_padding_mask=kpm, need_weights=True, average_attn_weights=False
    )
    out, w = ours(q, kv, kv, key_padding_mask=kpm, need_weights=True)
    torch.testing.assert_close(out, out_ref, atol=1e-5, rtol=1e-5)
    assert w.shape == (B, heads, T, S)
    torch.testing.assert_close(w, w_ref, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("heads", [1, 4, 8, 16])
def test_equals_torch_causal_bool_and_float_masks(heads):
    ref, ours = make_pair(heads, packed=False)
    B, T = 2, 6
    x = torch.randn(B, T, D)
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    float_mask = torch.randn(T, T).masked_fill(causal, float("-inf"))
    per_head = torch.randn(B * heads, T, T) * 0.5
    for mask in (causal, float_mask, per_head):
        out_ref, w_ref = ref(x, x, x, attn_mask=mask, need_weights=True, average_attn_weights=False)
        out, w = ours(x, x, x, attn_mask=mask, need_weights=True)
        torch.testing.assert_close(out, out_ref, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(w, w_ref, atol=1e-6, rtol=1e-5)
    out, _ = ours(x, x, x, is_causal=True)
    out_ref, _ = ref(x, x, x, attn_mask=causal)
    torch.testing.assert_close(out, out_ref, atol=1e-5, rtol=1e-5)


def test_from_torch_packed_and_separate_give_same_module():
    ref_packed, ours_packed = make_pair(4, packed=True, seed=3)
    ref_sep, ours_sep = make_pair(4, packed=False, seed=3)
    for a, b in zip(ours_packed.parameters(), ours_sep.parameters()):
        torch.testing.assert_close(a, b)


def test_from_torch_rejects_unsupported():
    with pytest.raises(ValueError, match="add_bias_kv"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(D, 2, add_bias_kv=True))


@pytest.mark.parametrize("embed_dim,heads,match", [(30, 4, "not divisible"), (32, 0, ">= 1")])
def test_invalid_head_count(embed_dim, heads, match):
    with pytest.raises(ValueError, match=match):
        MultiHeadAttention(embed_dim, heads)


def test_unknown_impl():
    with pytest.raises(ValueError, match="impl"):
        MultiHeadAttention(D, 4, impl="flash")


MASK_CASES = ["none", "padding", "causal", "bool_attn", "float_attn", "padding+causal"]


def masks_for(case, B, T, S, heads):
    kpm = padding_mask([S, S - 3], S) if "padding" in case else None
    attn = None
    causal = "causal" in case
    if case == "bool_attn":
        attn = torch.rand(T, S) < 0.3
    if case == "float_attn":
        attn = torch.randn(B * heads, T, S)
    return dict(key_padding_mask=kpm, attn_mask=attn, is_causal=causal)


@pytest.mark.parametrize("case", MASK_CASES)
@pytest.mark.parametrize("heads", [1, 8])
def test_sdpa_equals_manual_forward_and_grad(case, heads):
    torch.manual_seed(0)
    manual = MultiHeadAttention(D, heads, impl="manual")
    sdpa = MultiHeadAttention(D, heads, impl="sdpa")
    sdpa.load_state_dict(manual.state_dict())
    B, T = 2, 6
    S = T
    masks = masks_for(case, B, T, S, heads)
    x1 = torch.randn(B, T, D, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    out1, _ = manual(x1, x1, x1, **masks)
    out2, _ = sdpa(x2, x2, x2, **masks)
    torch.testing.assert_close(out2, out1, atol=1e-5, rtol=1e-5)
    g = torch.randn_like(out1)
    out1.backward(g)
    out2.backward(g)
    torch.testing.assert_close(x2.grad, x1.grad, atol=1e-5, rtol=1e-4)
    for p1, p2 in zip(manual.parameters(), sdpa.parameters()):
        torch.testing.assert_close(p2.grad, p1.grad, atol=1e-5, rtol=1e-4)


def test_sdpa_with_need_weights_uses_manual_path_and_returns_weights():
    torch.manual_seed(0)
    sdpa = MultiHeadAttention(D, 4, impl="sdpa")
    x = torch.randn(2, 5, D)
    out, w = sdpa(x, x, x, need_weights=True)
    assert w.shape == (2, 4, 5, 5)
    out_fused, none = sdpa(x, x, x)
    assert none is None
    torch.testing.assert_close(out, out_fused, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("impl", ["manual", "sdpa"])
def test_masked_keys_get_zero_weight_rows_sum_to_one_and_fully_masked_rows_are_zero(impl):
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, 4, impl=impl)
    B, T, S = 3, 4, 6
    q, kv = torch.randn(B, T, D), torch.randn(B, S, D)
    kpm = padding_mask([6, 2, 0], S)  # the last row has no valid key at all
    out, w = mha(q, kv, kv, key_padding_mask=kpm, need_weights=True)
    assert torch.isfinite(out).all()
    assert (w[1, :, :, 2:] == 0).all()
    torch.testing.assert_close(w[:2].sum(-1), torch.ones(2, 4, T))
    assert (w[2] == 0).all()
    # A fully masked query row attends to nothing: its head outputs are zero, so only the
    # output projection's bias remains.
    expected = mha.out_proj.bias.expand(T, D)
    out_plain, _ = mha(q, kv, kv, key_padding_mask=kpm)
    torch.testing.assert_close(out_plain[2], expected)
    out_plain.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in mha.parameters())


def test_fully_masked_rows_with_float_mask_are_zero_not_nan():
    q = k = v = torch.randn(1, 2, 3, 4)
    mask = torch.zeros(3, 3)
    mask[1] = float("-inf")
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert torch.isfinite(out).all() and (out[:, :, 1] == 0).all() and (w[:, :, 1] == 0).all()


def test_dropout_on_weights_only_in_training():
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, 4, dropout=0.5)
    x = torch.randn(2, 5, D)
    mha.eval()
    a, _ = mha(x, x, x)
    b, _ = mha(x, x, x)
    torch.testing.assert_close(a, b)
    mha.train()
    _, w = mha(x, x, x, need_weights=True)
    zero_frac = (w == 0).float().mean().item()
    assert 0.3 < zero_frac < 0.7  # about half the weights dropped...
    kept = w[w != 0]
    assert kept.max() > 1.0 / 5  # ...and the survivors rescaled by 1 / (1 - p)


def test_gradcheck_float64_with_mask():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2).double()
    q = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
    kv = torch.randn(2, 4, 8, dtype=torch.float64, requires_grad=True)
    kpm = padding_mask([4, 2], 4)
    assert torch.autograd.gradcheck(lambda a, b: mha(a, b, b, key_padding_mask=kpm)[0], (q, kv))
    assert torch.autograd.gradcheck(lambda a: mha(a, a, a, is_causal=True)[0], (q,))


@pytest.mark.parametrize("impl", ["manual", "sdpa"])
def test_self_attention_cache_equals_full_causal(impl):
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, 4, impl=impl).eval()
    x = torch.randn(2, 7, D)
    full, _ = mha(x, x, x, is_causal=True)
    cache = AttentionCache()
    prefix, _ = mha(x[:, :3], x[:, :3], x[:, :3], is_causal=True, cache=cache)  # prefill 3
    steps = [prefix]
    for t in range(3, 7):
        step = x[:, t : t + 1]
        steps.append(mha(step, step, step, is_causal=True, cache=cache)[0])
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    assert cache.length == 7


def test_static_cache_projects_encoder_once():
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, 4).eval()
    memory = torch.randn(2, 5, D)
    q = torch.randn(2, 3, D)
    cache = AttentionCache(static=True)
    out0, _ = mha(q[:, :1], memory, memory, cache=cache)
    k_first = cache.k
    calls = []
    handle = mha.k_proj.register_forward_hook(lambda *a: calls.append(1))
    out1, _ = mha(q[:, 1:2], memory, memory, cache=cache)
    handle.remove()
    assert calls == [] and cache.k is k_first
    full, _ = mha(q, memory, memory)
    torch.testing.assert_close(torch.cat([out0, out1], 1), full[:, :2], atol=1e-6, rtol=1e-5)


def test_cache_reorder_selects_beams():
    cache = AttentionCache(
        k=torch.arange(3.0).view(3, 1, 1, 1), v=torch.arange(3.0).view(3, 1, 1, 1)
    )
    cache.reorder(torch.tensor([2, 2, 0]))
    assert cache.k.flatten().tolist() == [2.0, 2.0, 0.0]


@pytest.mark.parametrize("impl", ["manual", "sdpa"])
def test_head_mask_removes_only_that_heads_contribution(impl):
    torch.manual_seed(0)
    heads, Dh = 4, D // 4
    mha = MultiHeadAttention(D, heads, impl=impl).eval()
    x = torch.randn(2, 5, D)
    mask = torch.ones(heads)
    mask[1] = 0
    masked, _ = mha(x, x, x, head_mask=mask)
    # Zeroing head 1's slice of the output projection must have the same effect.
    with torch.no_grad():
        mha.out_proj.weight[:, Dh : 2 * Dh] = 0
    expected, _ = mha(x, x, x)
    torch.testing.assert_close(masked, expected, atol=1e-6, rtol=1e-5)
