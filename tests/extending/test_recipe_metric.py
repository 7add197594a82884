"""docs/extending.md, "A metric": chrF++ in ``metrics.score``, checked against sacreBLEU's own
function, with the other keys as the package's ``score`` computes them."""

from __future__ import annotations

import sacrebleu
from sacrebleu.metrics import BLEU, CHRF

from translate import metrics

HYPOTHESES = ["the cat sat on the mat", "a dog barks loudly", "it is raining today"]
REFERENCES = ["the cat sat on a mat", "the dog barks loud", "today it is raining"]


def score(hypotheses: list[str], references: list[str]) -> dict:
    """``metrics.score`` with the recipe's lines in place of its last two statements."""
    # recipe: start score
    # translate/metrics.py: the last two statements of score()
    bleu, chrf, chrf_pp = BLEU(), CHRF(), CHRF(word_order=2)
    return {
        "bleu": bleu.corpus_score(hypotheses, [references]).score,
        "chrf": chrf.corpus_score(hypotheses, [references]).score,
        "chrf++": chrf_pp.corpus_score(hypotheses, [references]).score,
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
        "chrf++_signature": str(chrf_pp.get_signature()),
    }
    # recipe: end score


def test_chrf_pp_is_sacrebleus_and_the_other_scores_stay():
    scores = score(HYPOTHESES, REFERENCES)
    chrf_pp = sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES], word_order=2)
    assert scores["chrf++"] == chrf_pp.score
    assert scores["chrf++"] != scores["chrf"]  # word bigrams count
    assert "nw:2" in scores["chrf++_signature"]
    assert metrics.score(HYPOTHESES, REFERENCES).items() <= scores.items()


def test_identical_text_scores_100():
    assert score(REFERENCES, REFERENCES)["chrf++"] == 100.0
