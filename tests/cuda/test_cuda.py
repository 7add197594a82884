"""The core checks on every device this machine has: the CPU always, CUDA when a GPU is visible.

Every test is parametrized over devices. The CUDA parameters carry ``pytest.mark.cuda``, so
``pytest -m cuda tests/cuda`` selects exactly them (``python -m translate.bench.gpu`` runs that on
a GPU box, docs/gpu.md), and are skipped with the reason where ``torch.cuda.is_available()`` is
False. A dtype a device cannot compute in is skipped with the error PyTorch gave.

Low-precision results are compared with the float32 result of the same (rounded) weights and
inputs, with tolerances a few times the dtype's rounding error on values of order one.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from translate.checkpoint import FORMAT_VERSION, load_checkpoint, save_checkpoint
from translate.data.batching import collate
from translate.decoding.search import beam_search, greedy_search
from translate.nn.attention import AttentionCache, MultiHeadAttention
from translate.nn.loss import sequence_loss
from translate.nn.model import Seq2SeqTransformer
from translate.runtime.device import autocast
from translate.schema import OptimSettings
from translate.training.step import Trainer

NO_GPU = "no CUDA GPU is visible (torch.cuda.is_available() is False)"
CUDA = pytest.param(
    "cuda",
    id="cuda",
    marks=[pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)],
)
DEVICES = [pytest.param("cpu", id="cpu"), CUDA]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
PRECISIONS = {"32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# (outputs, per-head weights): bf16 keeps 8 significant bits, fp16 11, float32 24.
TOL = {
    torch.float32: (dict(atol=2e-5, rtol=1e-4), dict(atol=2e-6, rtol=1e-4)),
    torch.bfloat16: (dict(atol=6e-2, rtol=5e-2), dict(atol=1.5e-2, rtol=5e-2)),
    torch.float16: (dict(atol=8e-3, rtol=8e-3), dict(atol=2e-3, rtol=8e-3)),
}
D, HEADS = 32, 4
V, PAD, BOS, EOS = 40, 0, 2, 3


def on(name: str) -> torch.device:
    """``cuda`` as an indexed device (``torch.cuda`` calls want one)."""
    return (
        torch.device("cuda", torch.cuda.current_device()) if name == "cuda" else torch.device(name)
    )


def require_dtype(device: torch.device, dtype: torch.dtype) -> None:
    """Skip, with PyTorch's own error, when attention cannot run in ``dtype`` on ``device``."""
    if dtype == torch.float32:
        return
    if device.type == "cuda" and dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        pytest.skip(f"bf16 is not supported by {torch.cuda.get_device_name(device)}")
    try:
        mha = nn.MultiheadAttention(8, 2, batch_first=True).to(device, dtype)
        x = torch.randn(1, 3, 8, device=device, dtype=dtype)
        mha(x, x, x, need_weights=True)[0].sum().backward()
        torch.nn.functional.scaled_dot_product_attention(x[None], x[None], x[None])
    except (RuntimeError, NotImplementedError) as err:
        first = str(err).splitlines()[0]
        where = f"{device.type} (torch {torch.__version__})"
        pytest.skip(f"{dtype} attention is unsupported on {where}: {first}")


def require_autocast(device: torch.device, precision: str) -> None:
    """Skip when ``precision``'s autocast cannot run the model on ``device``."""
    if precision == "32":
        return
    require_dtype(device, PRECISIONS[precision])
    try:
        with autocast(device, precision):
            nn.Linear(4, 4).to(device)(torch.randn(2, 4, device=device)).sum()
    except (RuntimeError, NotImplementedError) as err:
        first = str(err).splitlines()[0]
        pytest.skip(f"{precision} autocast is unsupported on {device.type}: {first}")


def mha_pair(device, dtype, impl, seed=0):
    """``(torch reference in dtype, its float32 copy, ours in dtype)`` with equal weights."""
    torch.manual_seed(seed)
    ref = nn.MultiheadAttention(D, HEADS, batch_first=True)
    with torch.no_grad():  # non-zero biases, so that their copying matters too
        ref.in_proj_bias.normal_()
        ref.out_proj.bias.normal_()
    ref = ref.to(device, dtype).eval()
    exact = nn.MultiheadAttention(D, HEADS, batch_first=True).to(device).eval()
    exact.load_state_dict({k: v.float() for k, v in ref.state_dict().items()})
    return ref, exact, MultiHeadAttention.from_torch(ref, impl=impl).eval()


def inputs(device, dtype, *shape, seed=1):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(device, dtype)
    return x, x.float()  # the rounded values in float32, for the exact reference


def padding(lengths, S, device):
    return torch.arange(S, device=device)[None] >= torch.tensor(lengths, device=device)[:, None]


def close(actual, expected, tol):
    torch.testing.assert_close(actual.float(), expected.float(), **tol)


# ------------------------------------------------------------------ attention


@pytest.mark.parametrize("impl", ["manual", "sdpa"])
@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("device", DEVICES)
def test_attention_with_key_padding_equals_torch(device, dtype, impl):
    device = on(device)
    require_dtype(device, dtype)
    ref, exact, ours = mha_pair(device, dtype, impl)
    q, q32 = inputs(device, dtype, 3, 5, D, seed=1)
    kv, kv32 = inputs(device, dtype, 3, 7, D, seed=2)
    kpm = padding([7, 5, 1], 7, device)
    with torch.no_grad():
        expected = exact(q32, kv32, kv32, key_padding_mask=kpm, need_weights=False)[0]
        out = ours(q, kv, kv, key_padding_mask=kpm)[0]
        theirs = ref(q, kv, kv, key_padding_mask=kpm, need_weights=False)[0]
    assert out.dtype == dtype
    close(out, expected, TOL[dtype][0])
    close(theirs, expected, TOL[dtype][0])  # the tolerance is one torch itself meets


@pytest.mark.parametrize("impl", ["manual", "sdpa"])
@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("device", DEVICES)
def test_causal_attention_equals_torch(device, dtype, impl):
    device = on(device)
    require_dtype(device, dtype)
    ref, exact, ours = mha_pair(device, dtype, impl)
    x, x32 = inputs(device, dtype, 2, 6, D)
    causal = torch.triu(torch.ones(6, 6, dtype=torch.bool, device=device), diagonal=1)
    kpm = padding([6, 4], 6, device)
    with torch.no_grad():
        expected = exact(x32, x32, x32, attn_mask=causal, need_weights=False)[0]
        close(ours(x, x, x, is_causal=True)[0], expected, TOL[dtype][0])
        expected = exact(x32, x32, x32, attn_mask=causal, key_padding_mask=kpm)[0]
        out = ours(x, x, x, is_causal=True, key_padding_mask=kpm)[0]
    close(out, expected, TOL[dtype][0])


@pytest.mark.parametrize("impl", ["manual", "sdpa"])
@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("device", DEVICES)
def test_per_head_weights_equal_torch(device, dtype, impl):
    device = on(device)
    require_dtype(device, dtype)
    ref, exact, ours = mha_pair(device, dtype, impl)
    q, q32 = inputs(device, dtype, 3, 5, D, seed=3)
    kv, kv32 = inputs(device, dtype, 3, 7, D, seed=4)
    kpm = padding([7, 3, 6], 7, device)
    with torch.no_grad():
        out_ref, w_ref = exact(
            q32, kv32, kv32, key_padding_mask=kpm, need_weights=True, average_attn_weights=False
        )
        out, w = ours(q, kv, kv, key_padding_mask=kpm, need_weights=True)
    assert w.shape == (3, HEADS, 5, 7)
    close(w, w_ref, TOL[dtype][1])
    close(out, out_ref, TOL[dtype][0])
    assert not w[1, :, :, 3:].any()  # padded keys get exactly zero weight
    close(w.float().sum(-1), torch.ones(3, HEADS, 5, device=device), TOL[dtype][1])


@pytest.mark.parametrize("impl", ["manual", "sdpa"])
@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("device", DEVICES)
def test_cached_attention_equals_full(device, dtype, impl):
    device = on(device)
    require_dtype(device, dtype)
    _, _, self_attn = mha_pair(device, dtype, impl, seed=5)
    _, _, cross_attn = mha_pair(device, dtype, impl, seed=6)
    x, _ = inputs(device, dtype, 2, 6, D, seed=7)
    memory, _ = inputs(device, dtype, 2, 4, D, seed=8)
    kpm = padding([4, 2], 4, device)
    with torch.no_grad():
        full_self = self_attn(x, x, x, is_causal=True)[0]
        full_cross = cross_attn(x, memory, memory, key_padding_mask=kpm)[0]
        self_cache, cross_cache = AttentionCache(), AttentionCache(static=True)
        steps_self, steps_cross = [], []
        for t in range(6):
            xt = x[:, t : t + 1]
            steps_self.append(self_attn(xt, xt, xt, is_causal=True, cache=self_cache)[0])
            out = cross_attn(xt, memory, memory, key_padding_mask=kpm, cache=cross_cache)[0]
            steps_cross.append(out)
    assert self_cache.length == 6 and cross_cache.length == 4
    close(torch.cat(steps_self, 1), full_self, TOL[dtype][0])
    close(torch.cat(steps_cross, 1), full_cross, TOL[dtype][0])


# ------------------------------------------------------------------ model and decoding


def tiny_model(device, seed=0, dropout=0.0) -> Seq2SeqTransformer:
    torch.manual_seed(seed)
    model = Seq2SeqTransformer(
        vocab_size=V,
        d_model=D,
        num_heads=HEADS,
        d_ff=64,
        dropout=dropout,
        attention_dropout=dropout,
        pad_id=PAD,
        attention_impl="sdpa",
    )
    return model.to(device)


def pairs(n=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [
        (
            i,
            torch.randint(4, V, (3 + i % 4,), generator=g).tolist(),
            torch.randint(4, V, (2 + i % 3,), generator=g).tolist(),
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("precision", list(PRECISIONS))
@pytest.mark.parametrize("device", DEVICES)
def test_model_forward_backward_is_finite(device, precision):
    device = on(device)
    require_autocast(device, precision)
    model = tiny_model(device, dropout=0.1).train()
    batch = collate(pairs()).to(device)
    with autocast(device, precision):
        logits = model(batch.src, batch.tgt_in, batch.src_padding_mask)
    assert logits.dtype == PRECISIONS[precision]  # autocast really ran in that dtype
    loss, _ = sequence_loss(logits, batch.tgt_out, PAD, 0.1)
    loss.backward()
    assert math.isfinite(loss.item()) and logits.shape == (*batch.tgt_in.shape, V)
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert sum(float(g.abs().sum()) for g in grads) > 0


@pytest.mark.parametrize("device", DEVICES)
def test_greedy_equals_beam_1_and_cached_equals_full(device):
    device = on(device)
    model = tiny_model(device, seed=3).eval()
    batch = collate(pairs(5, seed=2)).to(device)
    args = dict(bos_id=BOS, eos_id=EOS, pad_id=PAD, max_len_a=1.0, max_len_b=4)
    src, mask = batch.src, batch.src_padding_mask
    cached = greedy_search(model, src, mask, **args)
    assert len(cached) == 5 and any(cached)
    assert greedy_search(model, src, mask, use_cache=False, **args) == cached
    assert beam_search(model, src, mask, beam_size=1, **args) == cached


# ------------------------------------------------------------------ training


def trainer_for(device, precision, seed=0, eps=1e-9) -> Trainer:
    optim = OptimSettings(3e-3, [0.9, 0.98], eps, 0.0, 0, 0.0, 0.1, 1.0)
    return Trainer(tiny_model(device, seed), optim, device, precision, pad_id=PAD)


@pytest.mark.parametrize("precision", list(PRECISIONS))
@pytest.mark.parametrize("device", DEVICES)
def test_trainer_steps_lower_the_loss(device, precision):
    device = on(device)
    require_autocast(device, precision)
    trainer = trainer_for(device, precision)
    assert trainer.scaler.is_enabled() == (precision == "fp16")
    batch = collate(pairs())
    results = [trainer.step([batch]) for _ in range(8)]
    trained = [r for r in results if not r.skipped]
    # fp16 may skip a first step while the scaler finds its scale; never most of them.
    assert len(trained) >= 6, [r.skipped for r in results]
    assert all(math.isfinite(r.loss) and math.isfinite(r.grad_norm) for r in trained)
    assert trained[-1].loss < 0.9 * trained[0].loss, [r.loss for r in trained]


@pytest.mark.parametrize("device", DEVICES)
def test_checkpoint_moves_between_the_device_and_the_cpu(device, tmp_path):
    device = on(device)
    # eps=1: Adam's step stays smooth in the gradient, so kernel rounding noise stays tiny.
    trainer = trainer_for(device, "32", eps=1.0)
    trainer.step([collate(pairs())])
    path = tmp_path / "last.pt"
    state = {"format_version": FORMAT_VERSION, "config": {}, "tokenizer": b"spm", "step": 1}
    save_checkpoint({**state, **trainer.state_dict()}, path)

    on_cpu = load_checkpoint(path, map_location="cpu")
    for name, value in trainer.model.state_dict().items():
        assert on_cpu["model"][name].device.type == "cpu"
        assert torch.equal(on_cpu["model"][name], value.cpu()), name
    cpu_trainer = trainer_for(torch.device("cpu"), "32", seed=9, eps=1.0)
    cpu_trainer.load_state_dict(on_cpu)
    resaved = tmp_path / "from_cpu.pt"
    save_checkpoint({**state, **cpu_trainer.state_dict()}, resaved)

    # Other initial weights, which the load overwrites.
    back = trainer_for(device, "32", seed=7, eps=1.0)
    back.load_state_dict(load_checkpoint(resaved, map_location=device))
    for a, b in zip(back.model.parameters(), trainer.model.parameters()):
        assert a.device == device and torch.equal(a, b)
    moments = [s["exp_avg"] for s in back.optimizer.state.values()]
    assert moments and all(m.device == device for m in moments)
    # The restored optimizer continues exactly as the original one does.
    batch = collate(pairs(seed=1))
    assert back.step([batch]).loss == pytest.approx(trainer.step([batch]).loss, rel=1e-6)
    for a, b in zip(back.model.parameters(), trainer.model.parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
