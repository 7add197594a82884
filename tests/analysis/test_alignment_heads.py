"""Alignment heads in ``translate.analyze``: teacher-forced links per cross head, gold and silver
references (eflomal, grow-diag-final-and), and what analysis.json and alignment.png hold."""

from __future__ import annotations

import itertools
import json
import logging

import pytest
import torch
from conftest import compose_config

from translate.analysis import alignment_heads, silver
from translate.analysis.alignment import align_heads, read_pharaoh
from translate.analysis.alignment_heads import Reference, cross_links, head_aer
from translate.analysis.heads import make_batches
from translate.analysis.silver import grow_diag_final_and, silver_alignments
from translate.analyze import analyze
from translate.data.tokenizer import Tokenizer
from translate.decoding.translator import load_translator
from translate.errors import UserError


def test_batched_links_equal_each_pair_aligned_alone(trained_run):
    """Padding, length sorting and the BOS/EOS rows and columns do not move a link: every
    pair's links from padded batches are those of the pair run alone, unpadded."""
    _, results = trained_run
    loaded = load_translator(results["checkpoint"], "cpu", "32")
    tok, model = loaded.tokenizer, loaded.model
    texts = ["ein Haus .", "der kleine Hund sieht die große Katze", "ja"]
    src_ids, tgt_ids = tok.encode(texts), tok.encode(["a house .", "the small dog", "yes yes"])
    batches = make_batches(src_ids, tgt_ids, max_tokens=64)
    links = cross_links(model, batches, tok, torch.device("cpu"), "32")
    model.eval()
    for k, (s, t) in enumerate(zip(src_ids, tgt_ids)):
        src = torch.tensor([[*s, Tokenizer.EOS]])  # (1, S + 1)
        tgt_in = torch.tensor([[Tokenizer.BOS, *t]])  # (1, T + 1)
        with torch.no_grad():
            maps = model.attention_maps(src, tgt_in)
        for layer, weights in enumerate(maps.decoder_cross):
            alone = align_heads(weights[0, :, : len(t), : len(s)], tok.pieces(s), tok.pieces(t))
            assert [links[layer, h][k] for h in range(model.num_heads)] == alone


def test_head_aer_reports_each_head_and_the_best_per_layer():
    sure = [{(0, 0), (1, 1)}, {(0, 0)}]
    links = {
        (0, 0): [[(0, 0), (1, 1)], [(0, 0)]],  # perfect
        (0, 1): [[(1, 0), (0, 1)], [(1, 0)]],  # all wrong
        (1, 0): [[(0, 0), (0, 1)], [(0, 0)]],  # 2 of 3 right
        (1, 1): [[(0, 0), (1, 1)], [(1, 0)]],
    }
    out = head_aer(links, Reference(sure, sure, "silver", "toy"))
    assert [(h["layer"], h["head"], h["aer"]) for h in out["heads"]] == [
        (0, 0, 0.0),
        (0, 1, 1.0),
        (1, 0, pytest.approx(1 - 4 / 6)),
        (1, 1, pytest.approx(1 - 4 / 6)),
    ]
    assert [(b["layer"], b["head"]) for b in out["best_per_layer"]] == [(0, 0), (1, 0)]
    assert out["best"]["aer"] == 0.0 and out["reference"] == "silver"


def test_grow_diag_final_and_by_hand():
    forward = {(0, 0), (1, 1), (4, 3)}
    reverse = {(0, 0), (1, 1), (2, 1), (4, 4)}
    # Intersection 0-0 1-1; grow adds 2-1 (beside 1-1, source word 2 free); final-and adds
    # 4-3 (both words free), after which 4-4's source word is taken ("and": both must be free).
    assert grow_diag_final_and(forward, reverse) == {(0, 0), (1, 1), (2, 1), (4, 3)}
    # Growing goes on from what it added: 2-1 reaches 3-2, and 3-2 reaches 3-3.
    chain = grow_diag_final_and({(1, 1), (3, 2)}, {(1, 1), (2, 1), (3, 3)})
    assert chain == {(1, 1), (2, 1), (3, 2), (3, 3)}
    assert grow_diag_final_and(set(), {(0, 1)}) == {(0, 1)}


def test_silver_alignments_of_a_tiny_corpus_link_translated_words():
    pytest.importorskip("eflomal", reason='silver alignments need pip install -e ".[align]"')
    # Each article goes with two nouns, so the pairs tell a noun from its article (with one
    # noun per article, "ein" -> "house" fitted them as well as "Haus" -> "house" did, and
    # eflomal's sampling picked it in about 1 run in 20).
    subjects = [("der Hund", "the dog"), ("der Mann", "the man")]
    subjects += [("die Katze", "the cat"), ("die Frau", "the woman")]
    verbs = [("sieht", "sees"), ("hört", "hears"), ("mag", "likes")]
    objects = [("einen Ball", "a ball"), ("einen Baum", "a tree")]
    objects += [("ein Haus", "a house"), ("ein Buch", "a book")]
    parts = itertools.product(subjects, verbs, objects)
    pairs = [(f"{s} {v} {o}", f"{se} {ve} {oe}") for (s, se), (v, ve), (o, oe) in parts] * 2
    train_src, train_tgt = zip(*pairs)
    # Object first, as German may put it: the links cross.
    links = silver_alignments(
        ["einen Ball sieht der Hund", "die Katze mag ein Haus"],
        ["the dog sees a ball", "the cat likes a house"],
        train_src,
        train_tgt,
    )
    # The nouns and verbs, each seen with one translation only (eflomal samples: articles such
    # as ein/einen -> a may gain a second link from run to run).
    assert links[0] >= {(1, 4), (2, 2), (4, 1)}
    assert links[1] >= {(1, 1), (2, 2), (4, 4)}


def test_without_eflomal_one_line_says_how_to_give_gold(monkeypatch, caplog):
    monkeypatch.setattr(alignment_heads, "eflomal_available", lambda: False)
    with caplog.at_level(logging.WARNING):
        assert alignment_heads.reference_alignments(None, 10, None, ["a"], ["b"]) is None
    assert caplog.messages == [silver.MISSING]
    assert "analysis.alignments=" in silver.MISSING and ".[align]" in silver.MISSING


def test_a_gold_file_shorter_than_the_analysed_pairs_is_refused(tmp_path):
    gold = tmp_path / "gold.align"
    gold.write_text("0-0\n", encoding="utf-8")
    with pytest.raises(UserError, match="has 1 lines for 2 analysed pairs"):
        alignment_heads.reference_alignments(str(gold), 0, None, ["a b", "c"], ["d", "e"])
    ref = alignment_heads.reference_alignments(str(gold), 0, None, ["a b"], ["d"])
    assert (ref.kind, ref.sure, ref.origin) == ("gold", [{(0, 0)}], str(gold))


@pytest.mark.slow
def test_analyze_reports_aer_per_head_against_gold_and_silver(trained_run, tmp_path):
    """A gold file gives each head its AER in analysis.json and alignment.png; without one,
    silver alignments from eflomal are written to silver.align and labelled silver."""
    pytest.importorskip("eflomal", reason='silver alignments need pip install -e ".[align]"')
    _, results = trained_run
    common = [
        f"checkpoint={results['checkpoint']}",
        "runtime.device=cpu",
        "analysis.max_sentences=6",
        "analysis.pruning.bleu_sentences=2",
        "analysis.pruning.fractions=[1.0,0.0]",
        "analysis.heatmap_sentences=0",
        "analysis.silver_train_pairs=200",
    ]
    silver_dir = tmp_path / "silver"
    out = analyze(compose_config("analyze", [*common, f"output_dir={silver_dir}"]))["alignment"]
    assert out["reference"] == "silver" and out["sentences"] == 6
    assert len(out["heads"]) == 2 * 2  # 2 decoder layers x 2 heads
    assert all(0.0 <= h["aer"] <= 1.0 for h in out["heads"])
    for b in out["best_per_layer"]:
        assert b["aer"] == min(h["aer"] for h in out["heads"] if h["layer"] == b["layer"])
    assert (silver_dir / "alignment.png").stat().st_size > 0
    # The silver reference, given back as gold, scores exactly as it did.
    gold_dir = tmp_path / "gold"
    gold = [f"output_dir={gold_dir}", f"analysis.alignments={silver_dir / 'silver.align'}"]
    again = analyze(compose_config("analyze", [*common, *gold]))["alignment"]
    assert again["reference"] == "gold"
    assert [h["aer"] for h in again["heads"]] == [h["aer"] for h in out["heads"]]
    assert not (gold_dir / "silver.align").exists()
    on_disk = json.loads((gold_dir / "analysis.json").read_text())
    assert on_disk["alignment"]["best"] == again["best"]
    assert len(read_pharaoh(silver_dir / "silver.align")[0]) == 6
