"""Hard word alignments from cross-attention heads and their AER (translate/analysis/alignment.py):
the definition checked on hand-made attention and a hand-made reference, then its properties."""

from __future__ import annotations

import pytest
import torch

from translate.analysis.alignment import (
    aer,
    align_heads,
    parse_pharaoh,
    pharaoh,
    read_pharaoh,
    word_attention,
    word_index,
)
from translate.errors import UserError

SRC = ["▁Das", "▁Haus", "tür", "▁ist", "▁rot"]  # 4 words: Das Haustür ist rot
TGT = ["▁The", "▁front", "▁door", "▁is", "▁re", "d"]  # 5 words: The front door is red


def _rows(*word_rows: list[float]) -> list[list[float]]:
    """Piece rows over SRC from rows over its words (the word's weight on its first piece)."""
    return [[r[0], r[1], 0.0, r[2], r[3]] for r in word_rows]


def test_aer_of_hand_made_attention_against_a_hand_made_reference():
    """Head 0 links The-Das, front-Haustür, door-Haustür, is-ist, red-rot; head 1 puts every
    target word on ist. Reference: sure Das-The, Haustür-door, ist-is, rot-red; possible
    Haustür-front. Counted by hand: head 0 has |A| = 5, |A∩S| = 4, |A∩P| = 5."""
    head0 = _rows(
        [0.9, 0.1, 0, 0],
        [0.2, 0.7, 0.1, 0],
        [0, 0.8, 0.1, 0.1],
        [0, 0, 1, 0],
        [0, 0, 0, 1],
        [0, 0, 0, 1],
    )
    head1 = _rows(*[[0.1, 0.1, 0.7, 0.1]] * 6)
    cross = torch.tensor([head0, head1])  # (H=2, T=6, S=5)
    links = align_heads(cross, SRC, TGT)
    assert links[0] == [(0, 0), (1, 1), (1, 2), (2, 3), (3, 4)]
    assert links[1] == [(2, 0), (2, 1), (2, 2), (2, 3), (2, 4)]
    assert pharaoh(links[0]) == "0-0 1-1 1-2 2-3 3-4"
    sure, possible = parse_pharaoh("0-0 1-2 2-3 3-4 1?1")
    # Sure-only reference: 1 - 2|A∩S| / (|A| + |S|).
    assert aer([links[0]], [sure]) == pytest.approx(1 - 2 * 4 / (5 + 4))
    assert aer([links[1]], [sure]) == pytest.approx(1 - 2 * 1 / (5 + 4))
    # With the possible link: 1 - (|A∩S| + |A∩P|) / (|A| + |S|) = 1 - (4 + 5) / 9.
    assert aer([links[0]], [sure], [possible]) == pytest.approx(0.0)


def test_a_source_words_pieces_add_up_and_a_target_words_pieces_vote_equally():
    # Haus + tür each 0.3 < rot 0.35, but the word Haustür holds 0.6.
    split_word = [0.05, 0.3, 0.3, 0.0, 0.35]
    # red = re + d: "re" alone prefers Haustür (0.7), "d" is all on rot; the mean picks rot.
    re_row, d_row = [0.0, 0.35, 0.35, 0.0, 0.3], [0.0, 0.0, 0.0, 0.0, 1.0]
    rows = [split_word] * 4 + [re_row, d_row]
    merged = word_attention(torch.tensor([rows]), SRC, TGT)  # (1, 5, 4)
    assert merged.shape == (1, 5, 4)
    assert merged[0].sum(dim=-1).tolist() == pytest.approx([1.0] * 5)  # still distributions
    assert merged[0, 4].tolist() == pytest.approx([0.0, 0.35, 0.0, 0.65])
    assert align_heads(torch.tensor([rows]), SRC, TGT)[0] == [
        (1, 0),
        (1, 1),
        (1, 2),
        (1, 3),
        (3, 4),
    ]


def test_words_open_at_the_word_start_mark():
    assert word_index(["▁Das", "▁Haus", "tür", "▁", "<unk>", "▁."]) == [0, 1, 1, 2, 2, 3]
    assert word_index(["Haus", "tür", "▁ist"]) == [0, 0, 1]  # no mark on the first piece


def test_every_target_word_gets_exactly_one_in_range_link():
    g = torch.Generator().manual_seed(0)
    cross = torch.rand(3, len(TGT), len(SRC), generator=g).softmax(dim=-1)  # (H, T, S)
    for links in align_heads(cross, SRC, TGT):
        assert sorted(j for _, j in links) == list(range(5))
        assert all(0 <= i < 4 for i, _ in links)
        assert links == sorted(links)


def test_attention_of_the_wrong_shape_is_refused():
    with pytest.raises(ValueError, match="expected"):
        align_heads(torch.rand(2, len(SRC), len(TGT)), SRC, TGT)


def test_perfect_alignment_scores_zero_and_disjoint_scores_one():
    ref = [{(0, 0), (1, 2), (2, 1)}, {(0, 1)}]
    assert aer(ref, ref) == 0.0
    assert aer([{(5, 5)}, {(1, 0), (2, 2)}], ref) == 1.0
    # Predicting only possible links costs nothing; missing sure links still does.
    assert aer([{(0, 0)}], [{(0, 0)}], [{(1, 1)}]) == 0.0
    assert aer([{(0, 0), (1, 1)}], [{(0, 0)}], [{(1, 1)}]) == 0.0
    assert aer([{(1, 1)}], [{(0, 0)}], [{(1, 1)}]) == pytest.approx(0.5)


def test_aer_sums_over_the_corpus_instead_of_averaging_sentences():
    predicted = [{(0, 0)}, {(0, 0), (1, 1), (2, 2), (3, 3)}]
    sure = [{(1, 1)}, {(0, 0), (1, 1), (2, 2), (3, 3)}]  # sentence AERs 1 and 0, mean 0.5
    assert aer(predicted, sure) == pytest.approx(1 - 2 * 4 / (5 + 5))


def test_aer_refuses_mismatched_or_empty_input():
    with pytest.raises(ValueError, match="same sentences"):
        aer([{(0, 0)}], [{(0, 0)}, {(1, 1)}])
    with pytest.raises(ValueError, match="no links"):
        aer([set()], [set()])


def test_pharaoh_lines_read_sure_and_possible_links(tmp_path):
    sure, possible = parse_pharaoh("0-0 2?1 1-2")
    assert sure == {(0, 0), (1, 2)}
    assert possible == {(0, 0), (1, 2), (2, 1)}  # S ⊆ P
    path = tmp_path / "gold.align"
    path.write_text("0-0 1-1\n\n0?0\n", encoding="utf-8")
    assert read_pharaoh(path) == (
        [{(0, 0), (1, 1)}, set(), set()],
        [{(0, 0), (1, 1)}, set(), {(0, 0)}],
    )
    path.write_text("0-0\n1-x\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"gold.align:2: '1-x' is not a link"):
        read_pharaoh(path)
    with pytest.raises(UserError, match="cannot be read"):
        read_pharaoh(tmp_path / "missing.align")
