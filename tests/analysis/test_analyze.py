"""Per-head diagnostics: entropy aggregation, degenerate-head flags, head masking, the CLI."""

from __future__ import annotations

import copy
import json
import logging
import math

import pytest
import torch
from conftest import compose_config

from translate.analysis.head_report import OUTPUTS
from translate.analysis.heads import (
    HeadAccumulator,
    head_ids,
    head_statistics,
    make_batches,
)
from translate.analysis.importance import HeadMasked, pruning_curve
from translate.analyze import analyze
from translate.decoding.search import greedy_search
from translate.errors import UserError
from translate.nn.model import Seq2SeqTransformer
from translate.settings import analysis_settings

V, D = 40, 32
# The degenerate-head thresholds exactly as conf/analysis/default.yaml sets them.
THRESHOLDS = analysis_settings(compose_config("analyze", ["output_dir=unused"]).analysis).degenerate


def tiny_model(heads: int = 4, seed: int = 0) -> Seq2SeqTransformer:
    torch.manual_seed(seed)
    model = Seq2SeqTransformer(V, d_model=D, num_heads=heads, d_ff=64, dropout=0.0)
    return model.eval()


def lengths_layout(lengths: list[int], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(query_ignore, n_keys)`` of an encoder batch with these source lengths."""
    ignore = torch.arange(width).unsqueeze(0) >= torch.tensor(lengths).unsqueeze(1)  # (B, S)
    n_keys = torch.tensor(lengths).unsqueeze(1).expand(-1, width)  # (B, S)
    return ignore, n_keys


def uniform_weights(lengths: list[int], width: int, heads: int) -> torch.Tensor:
    """``(B, H, S, S)``: every query spreads evenly over its sentence's keys; pads get 0."""
    w = torch.zeros(len(lengths), heads, width, width)
    for b, n in enumerate(lengths):
        w[b, :, :, :n] = 1.0 / n
    return w


def mean_entropy(p: torch.Tensor, ignore: torch.Tensor) -> torch.Tensor:
    """The definition, written out: mean over the kept query rows of ``-sum_s p log p``
    (``0 log 0 = 0``); ``p (H, T, S)``, ``ignore (1, T)`` True for padded queries."""
    terms = torch.where(p > 0, -p * p.log(), torch.zeros_like(p))  # (H, T, S)
    keep = ~ignore  # (1, T)
    return (terms.sum(-1) * keep).sum(-1) / keep.sum(-1)  # (H,)


def test_per_head_entropy_is_log_s_for_uniform_and_zero_for_one_hot_ignoring_padding():
    lengths, width = [5, 3], 5
    ignore, n_keys = lengths_layout(lengths, width)
    acc = HeadAccumulator("encoder", 0, 2, max_offset=2)
    weights = uniform_weights(lengths, width, 2)
    weights[:, 1] = 0.0
    weights[:, 1, :, 0] = 1.0  # head 1: one-hot on the first key
    acc.add(weights, ignore, n_keys)
    uniform, one_hot = acc.stats(THRESHOLDS)
    # Token-weighted over the 5 + 3 real queries; the 2 padded query rows are not counted.
    expected = (5 * math.log(5) + 3 * math.log(3)) / 8
    assert uniform.entropy == pytest.approx(expected)
    assert uniform.normalized_entropy == pytest.approx(1.0)
    assert one_hot.entropy == pytest.approx(0.0) and one_hot.normalized_entropy == 0.0
    # The same per-head number as the definition over all queries of the batch.
    flat = weights.transpose(0, 1).reshape(2, -1, width)  # (H, B*S, S)
    reference = mean_entropy(flat, ignore.reshape(1, -1))
    assert uniform.entropy == pytest.approx(float(reference[0]))
    # Accumulating batch by batch equals one pass over the whole batch.
    split = HeadAccumulator("encoder", 0, 2, max_offset=2)
    split.add(weights[:1], ignore[:1], n_keys[:1])
    split.add(weights[1:], ignore[1:], n_keys[1:])
    assert split.stats(THRESHOLDS)[0].entropy == pytest.approx(uniform.entropy)


def test_degenerate_heads_previous_token_uniform_and_eos_flagged_a_normal_head_not():
    g = torch.Generator().manual_seed(0)
    B, S, H = 4, 10, 4
    ignore, n_keys = lengths_layout([S] * B, S)
    w = torch.zeros(B, H, S, S)
    for t in range(S):
        w[:, 0, t, max(t - 1, 0)] = 1.0  # previous token (query 0 has none: itself)
    w[:, 1] = 1.0 / S  # uniform
    w[:, 2, :, S - 1] = 0.9  # the sentence end (EOS) ...
    w[:, 2, :, : S - 1] = 0.1 / (S - 1)  # ... with a little spread
    targets = torch.randint(0, S, (B, S), generator=g)  # a content-like head: places vary
    w[:, 3] = 0.4 / (S - 1)
    w[:, 3].scatter_(-1, targets.unsqueeze(-1), 0.6)
    acc = HeadAccumulator("encoder", 1, H, max_offset=2)
    acc.add(w, ignore, n_keys)
    prev, uniform, eos, normal = acc.stats(THRESHOLDS)
    assert prev.degenerate == "previous token" and prev.pattern == "offset-1"
    assert prev.pattern_fraction == pytest.approx(0.9)
    assert uniform.degenerate == "near-uniform"
    assert eos.degenerate == "EOS (sentence end)"
    assert normal.degenerate is None
    assert normal.normalized_entropy < THRESHOLDS.uniform_entropy


def test_causal_decoder_previous_token_head_is_flagged():
    B, T = 2, 6
    ignore = torch.zeros(B, T, dtype=torch.bool)
    n_keys = torch.arange(1, T + 1).expand(B, T)
    w = torch.zeros(B, 1, T, T)
    for t in range(T):
        w[:, 0, t, max(t - 1, 0)] = 1.0
    acc = HeadAccumulator("decoder_self", 0, 1, max_offset=2)
    acc.add(w, ignore, n_keys)
    (head,) = acc.stats(THRESHOLDS)
    assert head.degenerate == "previous token" and head.pattern_fraction == pytest.approx(1.0)


def test_head_statistics_on_a_model_exclude_padding_like_the_definition():
    model = tiny_model(heads=4)
    g = torch.Generator().manual_seed(1)
    src = [torch.randint(4, V, (n,), generator=g).tolist() for n in (3, 7, 5)]
    tgt = [torch.randint(4, V, (n,), generator=g).tolist() for n in (4, 2, 6)]
    batches = make_batches(src, tgt, max_tokens=1000)
    assert len(batches) == 1
    stats = head_statistics(model, batches, torch.device("cpu"), "32", THRESHOLDS)
    assert len(stats) == 6 * 4
    batch = batches[0]
    maps = model.attention_maps(batch.src, batch.tgt_in, batch.src_padding_mask)
    enc = maps.encoder[1]  # (B, H, S, S)
    flat = enc.transpose(0, 1).reshape(4, -1, enc.size(-1))  # (H, B*S, S)
    reference = mean_entropy(flat, batch.src_padding_mask.reshape(1, -1))
    ours = [s.entropy for s in stats if s.kind == "encoder" and s.layer == 1]
    torch.testing.assert_close(torch.tensor(ours), reference.double(), check_dtype=False)


@pytest.mark.parametrize("kind", ["encoder", "decoder_self", "decoder_cross"])
def test_masking_a_head_equals_zeroing_its_slice_of_out_proj(kind):
    model = tiny_model(heads=4)
    g = torch.Generator().manual_seed(2)
    src = torch.randint(4, V, (2, 6), generator=g)
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[1, 4:] = True
    src[1, 4:] = 0
    tgt = torch.randint(4, V, (2, 5), generator=g)
    layer, head, d_k = 1, 2, D // 4
    mask = {k: torch.ones(n, 4) for k, n in model.num_layers.items()}
    mask[kind][layer, head] = 0.0
    zeroed = copy.deepcopy(model)
    stack = zeroed.encoder_layers if kind == "encoder" else zeroed.decoder_layers
    module = stack[layer].cross_attn if kind == "decoder_cross" else stack[layer].self_attn
    with torch.no_grad():
        module.out_proj.weight[:, head * d_k : (head + 1) * d_k] = 0.0  # only that head's input
    masked_out = model(src, tgt, pad, head_mask=mask)
    torch.testing.assert_close(masked_out, zeroed(src, tgt, pad))
    assert not torch.allclose(masked_out, model(src, tgt, pad))
    # Decoding through the wrapper analyze uses (incremental, with the cache) agrees too.
    ids = dict(bos_id=2, eos_id=3, pad_id=0, max_len_a=1.0, max_len_b=4)
    assert greedy_search(HeadMasked(model, mask), src, pad, **ids) == greedy_search(
        zeroed, src, pad, **ids
    )


def test_pruning_curve_masks_least_important_first_one_point_per_head_count():
    model = tiny_model(heads=1)  # 6 heads: 90% and 80% both round to 5 kept
    order = head_ids(model)
    masks = []

    def removed(mask) -> int:
        masks.append(mask)
        return int(sum((m == 0).sum() for m in mask.values()))

    curve = pruning_curve(model, order, [1.0, 0.9, 0.8, 0.5, 0.0], removed, lambda m: 0.0)
    assert [p["heads_kept"] for p in curve] == [6, 5, 3, 0]
    assert [p["loss"] for p in curve] == [0, 1, 3, 6]  # loss_fn saw that many masked heads
    assert curve[2]["removed"] == [list(h) for h in order[:3]]  # the first of the order go
    assert len(masks) == 4


def test_training_and_analyze_read_the_same_analysis_settings():
    """One set of values in conf/analysis/default.yaml, no defaults repeated in code."""
    analyze_cfg = analysis_settings(compose_config("analyze", ["output_dir=unused"]).analysis)
    train_cfg = analysis_settings(compose_config("train", []).analysis)
    assert analyze_cfg == train_cfg
    assert train_cfg.degenerate == THRESHOLDS and train_cfg.summary_sentences > 0
    with pytest.raises(UserError, match="analysis.degenerate.max_offset='x' must be an integer"):
        analysis_settings(compose_config("analyze", ["analysis.degenerate.max_offset=x"]).analysis)


def test_training_results_carry_the_head_summary(trained_run):
    run, results = trained_run
    summary = json.loads((run / "results.json").read_text())["head_summary"]
    assert set(summary["entropy"]) == {"encoder", "decoder_self", "decoder_cross"}
    assert summary["total_heads"] == 6 * results["heads"]
    assert 0 <= summary["degenerate_heads"] <= summary["total_heads"]
    assert len(summary["degenerate"]) == summary["degenerate_heads"]
    assert all(v >= 0 for v in summary["entropy"].values())


@pytest.mark.slow
def test_analyze_writes_json_heatmaps_pruning_curve_and_tensorboard(trained_run, tmp_path, caplog):
    run, results = trained_run
    cfg = compose_config(
        "analyze",
        [
            f"checkpoint={results['checkpoint']}",
            f"output_dir={tmp_path}",
            "runtime.device=cpu",
            "analysis.max_sentences=16",
            "analysis.importance.bleu_sentences=3",
            "analysis.pruning.bleu_sentences=4",
            "analysis.pruning.fractions=[1.0,0.5,0.0]",
            "analysis.heatmap_sentences=1",
            "analysis.silver_train_pairs=200",  # silver alignments in a second
        ],
    )
    with caplog.at_level(logging.INFO, logger="translate.analysis.head_report"):
        out = analyze(cfg)
    # Its last line names every output it wrote; no figure is printed before it is known.
    last = caplog.records[-1].getMessage()
    assert all(name in last for name in OUTPUTS) and str(tmp_path) in last
    assert "n/a" not in caplog.text
    on_disk = json.loads((tmp_path / "analysis.json").read_text())
    assert on_disk["heads"] == results["heads"] == 2 and on_disk["sentences"] == 16
    assert len(on_disk["head_stats"]) == 12
    first = on_disk["head_stats"][0]
    for key in ("entropy", "normalized_entropy", "loss_increase", "bleu_drop", "prune_rank"):
        assert key in first
    assert sorted(s["prune_rank"] for s in on_disk["head_stats"]) == list(range(12))
    curve = out["pruning"]
    assert [p["heads_kept"] for p in curve] == [12, 6, 0]
    assert curve[0]["loss"] == pytest.approx(out["base"]["loss"])
    assert len(curve[-1]["removed"]) == 12
    for name in ("pruning.png", "heads.png", "heatmaps/sentence0/encoder_self_layer0.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert len(list((tmp_path / "heatmaps" / "sentence0").glob("*.png"))) == 6
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
