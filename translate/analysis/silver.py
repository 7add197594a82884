"""Silver word alignments where no gold ones exist: eflomal (Östling & Tiedemann 2016; ``pip
install -e ".[align]"``) on the analysed and training pairs, both directions symmetrised by
grow-diag-final-and (why not the intersection: docs/alignment.md, "Silver")."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path

from translate.analysis.alignment import Link, parse_pharaoh

log = logging.getLogger(__name__)

MISSING = (
    "eflomal is not installed, so there are no silver alignments to measure heads against: "
    'pip install -e ".[align]", or give gold ones with analysis.alignments=<Pharaoh file>'
)
# The 8 neighbours of a link, the diagonals last (Koehn's grow-diag order).
NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


def eflomal_available() -> bool:
    try:
        import eflomal  # noqa: F401
    except ImportError:
        return False
    return True


def grow_diag_final_and(forward: set[Link], reverse: set[Link]) -> set[Link]:
    """Koehn's symmetrisation of one sentence's two directional (source, target) alignments: the
    intersection, grown by adjacent union links covering a word still unaligned on either side,
    then union links whose words are both unaligned."""
    union, links = forward | reverse, forward & reverse
    src_done, tgt_done = {i for i, _ in links}, {j for _, j in links}

    def add(link: Link) -> None:
        links.add(link)
        src_done.add(link[0])
        tgt_done.add(link[1])

    grown = True
    while grown:
        grown = False
        for i, j in sorted(links):
            for di, dj in NEIGHBOURS:
                p = (i + di, j + dj)
                if p in union and p not in links and (p[0] not in src_done or p[1] not in tgt_done):
                    add(p)
                    grown = True
    for one_way in (forward, reverse):  # final-and: only links whose words are both free
        for i, j in sorted(one_way):
            if i not in src_done and j not in tgt_done:
                add((i, j))
    return links


def silver_alignments(
    sources: Sequence[str],
    targets: Sequence[str],
    train_sources: Sequence[str],
    train_targets: Sequence[str],
) -> list[set[Link]]:
    """grow-diag-final-and links of each ``(sources[k], targets[k])`` pair over whitespace
    words, from eflomal trained on these pairs and the training pairs (lower-cased for the
    aligner: word numbers are unchanged, counts are shared). Import-checked by the caller."""
    import eflomal

    train = [(s, t) for s, t in zip(train_sources, train_targets) if s.split() and t.split()]
    src = [s.lower() for s in [*sources, *(s for s, _ in train)]]
    tgt = [t.lower() for t in [*targets, *(t for _, t in train)]]
    # eflomal writes its links into files; these live in a temporary folder, gone afterwards.
    with tempfile.TemporaryDirectory(prefix="translate-eflomal-") as tmp:
        fwd, rev = Path(tmp, "forward"), Path(tmp, "reverse")
        eflomal.Aligner().align(src, tgt, links_filename_fwd=str(fwd), links_filename_rev=str(rev))
        lines = [p.read_text(encoding="utf-8").splitlines()[: len(sources)] for p in (fwd, rev)]
    return [grow_diag_final_and(parse_pharaoh(f)[0], parse_pharaoh(r)[0]) for f, r in zip(*lines)]
