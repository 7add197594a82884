"""Word alignments read off cross-attention heads, and their alignment error rate (AER).

A head links each target word to the source word it attends to most (Garg et al. 2019). Words
are pieces merged at ``▁``: a source word's weight is the **sum** of its pieces', a target word's
row the **mean** of its pieces' rows (why: docs/alignment.md, "From attention to word links").
Links are 0-based ``(source word, target word)``, Pharaoh's ``i-j``. AER is Och & Ney's (2003):
``1 - (|A∩S| + |A∩P|) / (|A| + |S|)``, sure links ``S ⊆ P``, summed over the corpus."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import torch

from translate.errors import UserError

Link = tuple[int, int]  # (source word, target word), 0-based
WORD_START = "\u2581"  # SentencePiece's "▁": this piece begins a new word


def word_index(pieces: Sequence[str]) -> list[int]:
    """The 0-based word of each piece: one starting with ``▁`` (or the first) opens a word."""
    words, index = [], -1
    for n, piece in enumerate(pieces):
        if n == 0 or piece.startswith(WORD_START):
            index += 1
        words.append(index)
    return words


def _membership(pieces: Sequence[str], like: torch.Tensor) -> torch.Tensor:
    """``(pieces, words)`` one-hot: entry ``[p, w]`` is 1 when piece ``p`` is in word ``w``."""
    index = torch.tensor(word_index(pieces), device=like.device)
    n_words = int(index[-1]) + 1 if len(pieces) else 0
    return torch.nn.functional.one_hot(index, n_words).to(like.dtype)  # (P, W)


def word_attention(
    cross: torch.Tensor, src_pieces: Sequence[str], tgt_pieces: Sequence[str]
) -> torch.Tensor:
    """Piece attention ``(H, T, S)`` merged into word attention ``(H, target words, source
    words)``: summed over a source word's pieces, averaged over a target word's."""
    if cross.shape[1:] != (len(tgt_pieces), len(src_pieces)):
        raise ValueError(
            f"attention of shape {tuple(cross.shape)} for {len(tgt_pieces)} target and "
            f"{len(src_pieces)} source pieces; expected (H, {len(tgt_pieces)}, {len(src_pieces)})"
        )
    weights = cross.float()
    to_src_words = _membership(src_pieces, weights)  # (S, Ws)
    to_tgt_words = _membership(tgt_pieces, weights)  # (T, Wt)
    mean_rows = (to_tgt_words / to_tgt_words.sum(dim=0)).T  # (Wt, T), each row sums to 1
    return mean_rows @ (weights @ to_src_words)  # (Wt, T) @ (H, T, Ws) -> (H, Wt, Ws)


def align_heads(
    cross: torch.Tensor, src_pieces: Sequence[str], tgt_pieces: Sequence[str]
) -> list[list[Link]]:
    """Each head's hard word alignment of one pair: for every target word the source word of
    highest :func:`word_attention`, as sorted links. ``cross``: one layer's ``(H, T, S)`` over the
    real pieces (BOS/EOS dropped by the caller); row ``t`` predicts target piece ``t``."""
    best = word_attention(cross, src_pieces, tgt_pieces).argmax(dim=-1)  # (H, Wt)
    return [sorted((int(i), j) for j, i in enumerate(head.tolist())) for head in best]


def pharaoh(links: Iterable[Link]) -> str:
    """``"0-0 1-2"``: the Pharaoh line of one sentence's links, sorted."""
    return " ".join(f"{i}-{j}" for i, j in sorted(links))


def parse_pharaoh(line: str) -> tuple[set[Link], set[Link]]:
    """``(sure, possible)`` links of one line: ``i-j`` sure, ``i?j`` possible only (as the
    German-English gold set's lilt/alignment-scripts); ``possible`` includes ``sure``."""
    sure: set[Link] = set()
    possible: set[Link] = set()
    for token in line.split():
        sep = "-" if "-" in token else "?"
        i, _, j = token.partition(sep)
        if not (i.isdigit() and j.isdigit()):
            raise ValueError(f"{token!r} is not a link i-j or i?j of word numbers")
        link = (int(i), int(j))
        possible.add(link)
        if sep == "-":
            sure.add(link)
    return sure, possible


def read_pharaoh(path: str | Path) -> tuple[list[set[Link]], list[set[Link]]]:
    """``(sure, possible)`` per line of a Pharaoh file; a bad line is a UserError naming it."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"alignments file {path} cannot be read ({err}); check the path") from None
    links = []
    for n, line in enumerate(lines, 1):
        try:
            links.append(parse_pharaoh(line))
        except ValueError as err:
            raise UserError(f"{path}:{n}: {err}; write 0-based links as 0-0 1-2 2?3") from None
    return [s for s, _ in links], [p for _, p in links]


def aer(
    predicted: Sequence[Iterable[Link]],
    sure: Sequence[Iterable[Link]],
    possible: Sequence[Iterable[Link]] | None = None,
) -> float:
    """Corpus AER, one collection of links per sentence, each count summed over them. Without
    ``possible``, ``P = S`` and AER is ``1 - F1``; links in ``S`` count as possible too."""
    if len(predicted) != len(sure) or (possible is not None and len(possible) != len(sure)):
        raise ValueError("predicted, sure and possible links must cover the same sentences")
    hits_s = hits_p = n_a = n_s = 0
    for k, (a_links, s_links) in enumerate(zip(predicted, sure)):
        a, s = set(a_links), set(s_links)
        p = s if possible is None else s | set(possible[k])
        hits_s, hits_p = hits_s + len(a & s), hits_p + len(a & p)
        n_a, n_s = n_a + len(a), n_s + len(s)
    if n_a + n_s == 0:
        raise ValueError("no links to compare: predicted and sure alignments are all empty")
    return 1.0 - (hits_s + hits_p) / (n_a + n_s)
