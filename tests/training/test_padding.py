"""No work on padding: the padding-free loss path equals the full-logits one (values and
gradients), and the batch sampler packs real tokens tighter than a plain length sort."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from translate.data.batching import TokenBatchSampler, collate, cut_batches, padding_ratio
from translate.nn.loss import sequence_loss
from translate.nn.model import Seq2SeqTransformer
from translate.schema import OptimSettings
from translate.scoring import batch_loss, mean_nll
from translate.training.step import Trainer

V, PAD = 40, 0
CPU = torch.device("cpu")


def tiny(dropout: float = 0.0) -> Seq2SeqTransformer:
    torch.manual_seed(0)
    return Seq2SeqTransformer(V, d_model=32, num_heads=4, d_ff=64, dropout=dropout, pad_id=PAD)


def ragged_batch(seed: int = 0, rows: int = 5):
    """Rows of different source and target lengths, so both sides carry padding."""
    g = torch.Generator().manual_seed(seed)

    def ids(n: int) -> list[int]:
        return torch.randint(4, V, (n,), generator=g).tolist()

    return collate([(i, ids(2 + 3 * i % 7), ids(1 + 2 * i % 6)) for i in range(rows)])


def full_logits_sums(model, batch, label_smoothing: float, head_mask=None):
    """The reference: logits ``(B, T, V)`` at every position, pads dropped by ``ignore_index``
    (PyTorch's own label smoothing, summed over the real targets)."""
    logits = model(batch.src, batch.tgt_in, batch.src_padding_mask, head_mask)  # (B, T, V)
    flat, gold = logits.reshape(-1, V), batch.tgt_out.reshape(-1)  # (B*T, V), (B*T,)
    loss = F.cross_entropy(
        flat, gold, ignore_index=PAD, label_smoothing=label_smoothing, reduction="sum"
    )
    nll = F.cross_entropy(flat, gold, ignore_index=PAD, reduction="sum")
    return loss, nll


def padding_free_sums(model, batch, label_smoothing: float):
    index = batch.target_index(PAD)  # (N,)
    logits = model(batch.src, batch.tgt_in, batch.src_padding_mask, target_index=index)
    assert logits.shape == (batch.num_tgt_tokens, V)
    target = batch.tgt_out.reshape(-1)[index]  # (N,)
    return sequence_loss(logits, target, PAD, label_smoothing)


def grads(model) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def assert_same_sums_and_gradients(model, sums, reference, ref_sums) -> None:
    """``sums`` (loss, NLL) of ``model`` equal ``reference``'s, and so do the gradients of
    the losses (backpropagated here)."""
    (loss, nll), (ref_loss, ref_nll) = sums, ref_sums
    torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(nll, ref_nll, rtol=1e-6, atol=1e-5)
    loss.backward()
    ref_loss.backward()
    expected = grads(reference)
    for name, grad in grads(model).items():
        torch.testing.assert_close(grad, expected[name], rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_padding_free_loss_and_gradients_equal_the_full_logits_ones(label_smoothing):
    batch = ragged_batch()
    assert batch.num_tgt_tokens < batch.tgt_out.numel()  # there is padding to skip
    model = tiny(dropout=0.1).train()
    reference = copy.deepcopy(model)
    torch.manual_seed(1)  # the same dropout masks in both passes
    loss, nll = padding_free_sums(model, batch, label_smoothing)
    torch.manual_seed(1)
    ref_loss, ref_nll = full_logits_sums(reference, batch, label_smoothing)
    assert_same_sums_and_gradients(model, (loss, nll), reference, (ref_loss, ref_nll))


def test_sequence_loss_scores_full_and_selected_logits_alike():
    """The same positions, as ``(B, T, V)`` with pads or as the real ``(N, V)`` rows."""
    logits = torch.randn(3, 4, V, generator=torch.Generator().manual_seed(0))
    target = torch.randint(4, V, (3, 4), generator=torch.Generator().manual_seed(1))
    target[0, 2:], target[2, 1:] = PAD, PAD
    real = target != PAD
    for eps in (0.0, 0.1):
        full = sequence_loss(logits, target, PAD, eps)
        selected = sequence_loss(logits[real], target[real], PAD, eps)  # (N, V), (N,)
        torch.testing.assert_close(selected, full)


def test_mean_nll_equals_the_full_logits_mean():
    model = tiny().eval()
    batches = [ragged_batch(seed) for seed in range(3)]
    ones = {k: torch.ones(n, 4) for k, n in model.num_layers.items()}
    ones["decoder_cross"][0, 1] = 0  # the head mask must still reach the model
    for head_mask in (None, ones):
        with torch.no_grad():
            nll = sum(float(full_logits_sums(model, b, 0.0, head_mask)[1]) for b in batches)
        expected = nll / sum(b.num_tgt_tokens for b in batches)
        assert mean_nll(model, batches, CPU, "32", head_mask) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("clip_norm", [0.0, 1.0])
def test_trainer_step_equals_the_full_logits_reference(clip_norm):
    optim = OptimSettings(1e-3, [0.9, 0.98], 1e-9, 0.0, 0, 0.0, 0.1, clip_norm)
    model = tiny(dropout=0.1)
    reference = copy.deepcopy(model).train()
    trainer = Trainer(model, optim, CPU, "32", pad_id=PAD)
    shapes = []
    model.register_forward_hook(lambda module, args, out: shapes.append(tuple(out.shape)))
    batches = [ragged_batch(0), ragged_batch(1, rows=3)]  # two micro-batches, one update
    torch.manual_seed(1)
    result = trainer.step(batches)

    torch.manual_seed(1)
    total = sum(b.num_tgt_tokens for b in batches)
    loss_sum = nll_sum = 0.0
    for batch in batches:
        loss, nll = full_logits_sums(reference, batch, 0.1)
        (loss / total).backward()
        loss_sum, nll_sum = loss_sum + float(loss.detach()), nll_sum + float(nll.detach())
    norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in reference.parameters()]))

    assert shapes == [(b.num_tgt_tokens, V) for b in batches]  # no logits for padding
    assert result.loss == pytest.approx(loss_sum / total, rel=1e-6)
    assert result.nll == pytest.approx(nll_sum / total, rel=1e-6)
    assert result.grad_norm == pytest.approx(float(norm), rel=1e-5)
    assert result.tokens == sum(b.num_src_tokens + b.num_tgt_tokens for b in batches)
    assert result.padded_tokens == sum(b.src.numel() + b.tgt_out.numel() for b in batches)


def test_padding_ratio_of_batches_and_of_index_batches_agree():
    examples = [(i, [5] * (1 + i % 4), [6] * (1 + i % 3)) for i in range(6)]
    index_batches = [[0, 1, 2], [3, 4, 5]]
    batches = [collate([examples[i] for i in b]) for b in index_batches]
    # Lengths as the model sees them: the EOS (source) and BOS or EOS (target) included.
    src_lens = [len(s) + 1 for _, s, _ in examples]
    tgt_lens = [len(t) + 1 for _, _, t in examples]
    # Sources 2,3,4 | 5,2,3 -> 9 of 12 and 10 of 15; targets 2,3,4 | 2,3,4 -> 9 of 12 twice.
    expected = {"src": 19 / 27, "tgt": 18 / 24, "all": 37 / 51}
    assert padding_ratio(batches) == pytest.approx(expected)
    assert padding_ratio(index_batches, src_lens, tgt_lens) == pytest.approx(expected)
    assert np.isnan(padding_ratio([])["all"])


def correlated_lengths(n: int = 5000, seed: int = 0):
    """Source and target lengths that go together, as translations' do (Multi30k-like)."""
    rng = np.random.default_rng(seed)
    src = np.clip(np.round(rng.lognormal(2.7, 0.37, n)), 3, 60).astype(np.int64) + 1
    tgt = np.clip(np.round(src * rng.normal(0.95, 0.18, n)), 3, 60).astype(np.int64) + 1
    return src, tgt


@pytest.mark.parametrize("max_tokens", [1024, 4096])
def test_sampler_packs_tighter_than_a_plain_length_sort(max_tokens):
    src, tgt = correlated_lengths()
    sampler = TokenBatchSampler(src, tgt, max_tokens, shuffle=True, seed=3)
    rng = np.random.default_rng([3, 0])
    perm = rng.permutation(len(src))
    plain = cut_batches(perm[np.lexsort((src[perm], tgt[perm]))].tolist(), src, tgt, max_tokens)
    ours = padding_ratio(list(sampler), src, tgt)
    before = padding_ratio(plain, src, tgt)
    assert ours["all"] > before["all"] + 0.01 and ours["src"] > before["src"]
    # Same seed and epoch, same batches (what resuming relies on); another epoch differs.
    again = TokenBatchSampler(src, tgt, max_tokens, shuffle=True, seed=3)
    assert list(again) == list(sampler)
    again.set_epoch(1)
    assert list(again) != list(sampler)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_padded_shapes_leave_the_loss_and_gradients_as_they_were(label_smoothing):
    """What a bf16 step on a CPU does for oneDNN (Trainer's pad_shapes): positions padded to a
    multiple of 8, loss rows to one of 64. The extra positions and rows change nothing."""
    batch = ragged_batch()
    padded = batch.padded(8, PAD)
    assert padded.src.size(1) % 8 == 0 and padded.tgt_in.size(1) % 8 == 0
    assert padded.src.size(1) > batch.src.size(1) and padded.num_tgt_tokens < 64
    model = tiny().eval()  # no dropout (its masks would follow the shapes); gradients flow
    reference = copy.deepcopy(model)
    rows = []
    forward = lambda *args, **kw: rows.append(kw["target_index"].numel()) or model(*args, **kw)  # noqa: E731
    loss, nll = batch_loss(forward, padded, CPU, "32", PAD, label_smoothing, row_multiple=64)
    ref_loss, ref_nll = batch_loss(reference, batch, CPU, "32", PAD, label_smoothing)
    assert rows == [64]
    assert_same_sums_and_gradients(model, (loss, nll), reference, (ref_loss, ref_nll))
