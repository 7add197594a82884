"""Our MHA against torch.nn.MultiheadAttention, the fused path against the manual one, and the
properties that must hold for any attention (masking, normalisation, caching)."""

import pytest
import torch
from equivalence import assert_same_outputs_and_grads
from torch import nn

from translate.nn.attention import AttentionCache, MultiHeadAttention, scaled_dot_product_attention
from translate.nn.sdpa import masked_fused_attention

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
    B, T = 2, 6
    S = T
    assert_sdpa_matches_manual(heads, B, T, masks_for(case, B, T, S, heads))


def assert_sdpa_matches_manual(heads, B, T, masks):
    """Self-attention through both impls with the same weights: equal outputs and gradients."""
    manual = MultiHeadAttention(D, heads, impl="manual")
    sdpa = MultiHeadAttention(D, heads, impl="sdpa")
    sdpa.load_state_dict(manual.state_dict())
    assert_same_outputs_and_grads(manual, sdpa, torch.randn(B, T, D), masks)


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


@pytest.mark.parametrize("static", [False, True])
def test_cache_reorder_selects_beams(static):
    cache = AttentionCache(static=static)
    rows = torch.arange(3.0).view(3, 1, 1, 1)  # (B, Hkv, T, Dh)
    if static:
        cache.store(rows, rows + 10)
    else:
        cache.append(rows, rows + 10)
    cache.reorder(torch.tensor([2, 2, 0]))
    cache.reorder(torch.tensor([1, 0]))  # a second selection composes with the first
    assert cache.k.flatten().tolist() == [2.0, 2.0]
    assert cache.v.flatten().tolist() == [12.0, 12.0]


def test_self_attention_cache_appends_after_a_reorder():
    cache = AttentionCache()
    step = torch.arange(3.0).view(3, 1, 1, 1)  # (B, Hkv, 1, Dh): row b holds b
    for t in range(10):  # past the first buffer's room, so it grows while rows move
        cache.append(step + 10 * t, step + 10 * t)
        cache.reorder(torch.tensor([1, 2, 0]))
    k, _ = cache.append(step, step)
    assert cache.length == 11 and k.shape == (3, 1, 11, 1)
    # Each reorder rotates the rows; the history moved with them, the new step did not.
    history = torch.arange(3.0).view(3, 1)
    for _ in range(10):
        history = history[torch.tensor([1, 2, 0])]
    assert k[:, 0, 10, 0].tolist() == [0.0, 1.0, 2.0]
    assert k[:, 0, 0, 0].tolist() == history.flatten().tolist()


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


# --- kdim / vdim, torch parity for every mask kind, seq-first refusal -----------------------

KDIM, VDIM = 12, 20
TORCH_MASK_CASES = [
    "none",
    "kpm_bool",
    "kpm_float",
    "attn_bool",
    "attn_float",
    "attn_3d",
    "causal",
    "kpm+attn_bool",
    "kpm+attn_float",
]


def torch_masks(case, B, T, S, heads):
    """Masks for ours and for torch; torch spells ``is_causal`` as a causal mask plus the hint.

    No query row is ever fully masked (column 0 stays visible): torch returns NaN there.
    """
    pad = padding_mask([S, S - 3], S)
    attn_bool = torch.rand(T, S) < 0.4
    attn_bool[:, 0] = False
    kpm = attn = None
    if case in ("kpm_bool", "kpm+attn_bool"):
        kpm = pad
    if case in ("kpm_float", "kpm+attn_float"):
        kpm = torch.randn(B, S).masked_fill(pad, float("-inf"))
    if case in ("attn_bool", "kpm+attn_bool"):
        attn = attn_bool
    if case in ("attn_float", "kpm+attn_float"):
        attn = torch.randn(T, S).masked_fill(attn_bool, float("-inf"))
    if case == "attn_3d":
        attn = torch.randn(B * heads, T, S)
    ours = dict(key_padding_mask=kpm, attn_mask=attn)
    theirs = dict(key_padding_mask=kpm, attn_mask=attn)
    if case == "causal":
        ours["is_causal"] = True
        theirs["attn_mask"] = torch.triu(torch.ones(T, S, dtype=torch.bool), diagonal=1)
        theirs["is_causal"] = True
    return ours, theirs


def make_kv_pair(heads, impl, seed=0):
    torch.manual_seed(seed)
    ref = nn.MultiheadAttention(D, heads, kdim=KDIM, vdim=VDIM, batch_first=True)
    assert not ref._qkv_same_embed_dim  # torch's separate q/k/v layout
    with torch.no_grad():  # non-zero biases so their copying is tested too
        ref.in_proj_bias.normal_()
        ref.out_proj.bias.normal_()
    ref.eval()
    return ref, MultiHeadAttention.from_torch(ref, impl=impl).eval()


def test_kdim_vdim_projection_shapes_and_unchanged_state_dict_keys():
    mha = MultiHeadAttention(D, 4, kdim=KDIM, vdim=VDIM)
    assert mha.k_proj.weight.shape == (D, KDIM)
    assert mha.v_proj.weight.shape == (D, VDIM)
    assert mha.q_proj.weight.shape == mha.out_proj.weight.shape == (D, D)
    default = MultiHeadAttention(D, 4)
    assert default.k_proj.weight.shape == default.v_proj.weight.shape == (D, D)
    assert (
        list(mha.state_dict())
        == list(default.state_dict())
        == [f"{name}_proj.{p}" for name in ("q", "k", "v", "out") for p in ("weight", "bias")]
    )


@pytest.mark.parametrize("case", TORCH_MASK_CASES)
@pytest.mark.parametrize("impl", ["manual", "sdpa"])
@pytest.mark.parametrize("heads", [1, 4])
def test_equals_torch_with_kdim_vdim_every_mask(case, impl, heads):
    ref, ours = make_kv_pair(heads, impl)
    assert ours.impl == impl
    B, T, S = 2, 5, 7
    q, k, v = torch.randn(B, T, D), torch.randn(B, S, KDIM), torch.randn(B, S, VDIM)
    ours_masks, torch_masks_ = torch_masks(case, B, T, S, heads)

    out_ref, w_avg_ref = ref(q, k, v, need_weights=True, **torch_masks_)
    _, w_ref = ref(q, k, v, need_weights=True, average_attn_weights=False, **torch_masks_)
    out_fast_ref, _ = ref(q, k, v, need_weights=False, **torch_masks_)
    torch.testing.assert_close(out_fast_ref, out_ref, atol=1e-5, rtol=1e-5)

    out, none = ours(q, k, v, **ours_masks)  # for "sdpa" this is the fused path
    assert none is None
    torch.testing.assert_close(out, out_ref, atol=1e-5, rtol=1e-5)
    out_w, w = ours(q, k, v, need_weights=True, **ours_masks)
    torch.testing.assert_close(out_w, out_ref, atol=1e-5, rtol=1e-5)
    assert w.shape == (B, heads, T, S)
    torch.testing.assert_close(w, w_ref, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(w.mean(dim=1), w_avg_ref, atol=1e-6, rtol=1e-5)


def test_from_torch_refuses_seq_first_module():
    with pytest.raises(ValueError, match=r"batch-first.*batch_first=True"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(D, 4))


def test_from_torch_separate_layout_keeps_each_projection():
    ref, ours = make_kv_pair(4, "manual", seed=1)
    torch.testing.assert_close(ours.q_proj.weight, ref.q_proj_weight)
    torch.testing.assert_close(ours.k_proj.weight, ref.k_proj_weight)
    torch.testing.assert_close(ours.v_proj.weight, ref.v_proj_weight)
    torch.testing.assert_close(
        torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]), ref.in_proj_bias
    )


# --- sdpa path against the manual one: combined masks, fully masked rows, chunked cache --------


@pytest.mark.parametrize("attn_kind", ["bool", "float", "float_3d"])
@pytest.mark.parametrize("heads", [1, 4])
def test_sdpa_equals_manual_with_padding_and_attn_mask(attn_kind, heads):
    torch.manual_seed(1)
    B, T = 3, 6
    kpm = padding_mask([T, T - 2, 2], T)
    if attn_kind == "bool":
        attn = torch.rand(T, T) < 0.3
    elif attn_kind == "float":
        attn = torch.randn(T, T).masked_fill(torch.rand(T, T) < 0.3, float("-inf"))
    else:
        attn = torch.randn(B * heads, T, T)
    assert_sdpa_matches_manual(heads, B, T, dict(key_padding_mask=kpm, attn_mask=attn))


def test_sdpa_fully_masked_row_with_float_mask_is_zero_and_equals_manual():
    torch.manual_seed(0)
    B, H, T, S, Dh = 2, 3, 4, 5, 8
    q = torch.randn(B, H, T, Dh, requires_grad=True)
    k = torch.randn(B, H, S, Dh, requires_grad=True)
    v = torch.randn(B, H, S, Dh, requires_grad=True)
    mask = torch.randn(T, S)
    mask[2] = float("-inf")  # query row 2 may see no key
    out = masked_fused_attention(q, k, v, mask, 0.0)
    assert torch.isfinite(out).all()
    assert (out[:, :, 2] == 0).all()
    assert (out[:, :, [0, 1, 3]].abs().sum(-1) > 0).all()
    expected, _ = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-5)
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))

    # The same row masked through the module on the sdpa path.
    mha = MultiHeadAttention(D, 4, impl="sdpa").eval()
    x = torch.randn(B, T, D)
    square = torch.zeros(T, T)
    square[1] = float("-inf")
    fused, _ = mha(x, x, x, attn_mask=square)
    manual, _ = mha(x, x, x, attn_mask=square, need_weights=True)
    assert torch.isfinite(fused).all()
    torch.testing.assert_close(fused, manual, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fused[:, 1], mha.out_proj.bias.expand(B, D))


@pytest.mark.parametrize("impl", ["manual", "sdpa"])
def test_cache_with_several_new_tokens_equals_full_causal(impl):
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, 4, impl=impl).eval()
    x = torch.randn(2, 8, D)
    full, _ = mha(x, x, x, is_causal=True)
    cache = AttentionCache()
    prefix, _ = mha(x[:, :2], x[:, :2], x[:, :2], is_causal=True, cache=cache)
    chunk = x[:, 2:5]  # past = 2, T = 3: the causal mask must be offset by the cached length
    out, _ = mha(chunk, chunk, chunk, is_causal=True, cache=cache)
    assert cache.length == 5
    torch.testing.assert_close(prefix, full[:, :2], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out, full[:, 2:5], atol=1e-5, rtol=1e-5)
    # Without the causal mask the chunk would see its own future: the test can tell the two apart.
    unmasked, _ = mha(x[:, :5], x[:, :5], x[:, :5])
    assert not torch.allclose(unmasked[:, 2:4], full[:, 2:4], atol=1e-3)
    rest = x[:, 5:8]
    out_rest, _ = mha(rest, rest, rest, is_causal=True, cache=cache)
    torch.testing.assert_close(out_rest, full[:, 5:8], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("impl", ["manual", "sdpa"])
def test_shared_key_rows_equal_repeated_ones(impl):
    """Keys/values with one row per r query rows (a sentence's beams) give what r copies give,
    output and weights, with a padding mask and through a cross-attention cache."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, 4, impl=impl).eval()
    n, r, T, S = 3, 4, 2, 5
    memory, query = torch.randn(n, S, D), torch.randn(n * r, T, D)
    kpm = torch.zeros(n, S, dtype=torch.bool)
    kpm[1, 3:] = True
    rep = dict(key_padding_mask=kpm.repeat_interleave(r, 0), need_weights=True)
    expected, expected_w = mha(query, *[memory.repeat_interleave(r, 0)] * 2, **rep)
    out, weights = mha(query, memory, memory, key_padding_mask=kpm, need_weights=True)
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(weights, expected_w, atol=1e-6, rtol=1e-5)
    cache = AttentionCache(static=True)
    mha(query[:, :1], memory, memory, key_padding_mask=kpm, cache=cache)
    assert cache.k.size(0) == n  # stored once per sentence
    step, _ = mha(query[:, 1:], None, None, key_padding_mask=kpm, cache=cache)
    torch.testing.assert_close(step, expected[:, 1:], atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="divides"):
        mha(query[:5], memory, memory)
