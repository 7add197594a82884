"""sacreBLEU scoring and the paired bootstrap, checked against their definitions."""

import logging
import os
import random

import pytest
import sacrebleu

from translate.metrics import paired_bootstrap, score

WORDS = [
    "the",
    "a",
    "cat",
    "dog",
    "sat",
    "on",
    "mat",
    "house",
    "red",
    "blue",
    "big",
    "small",
    "ran",
    "to",
    "of",
    ",",
    ".",
]


def corpus(seed, n=80):
    """Random references and hypotheses with a controlled share of words kept from them."""
    rng = random.Random(seed)
    refs = [" ".join(rng.choices(WORDS, k=rng.randint(6, 12))) for _ in range(n)]

    def noisy(keep):
        return [
            " ".join(w if rng.random() < keep else rng.choice(WORDS) for w in r.split())
            for r in refs
        ]

    return refs, noisy


def test_identical_text_scores_100():
    refs, _ = corpus(0)
    result = score(refs, refs)
    assert result["bleu"] == pytest.approx(100.0)
    assert result["chrf"] == pytest.approx(100.0)


def test_scores_are_sacrebleus_corpus_scores_with_13a_signature():
    refs, noisy = corpus(1)
    hyps = noisy(0.6)
    result = score(hyps, refs)
    assert result["bleu"] == sacrebleu.corpus_bleu(hyps, [refs]).score
    assert result["chrf"] == sacrebleu.corpus_chrf(hyps, [refs]).score
    assert 0 < result["bleu"] < 100
    assert "tok:13a" in result["bleu_signature"] and "nrefs:1" in result["bleu_signature"]
    assert result["chrf_signature"].startswith("nrefs:1|")


def test_length_mismatch_is_a_clear_error():
    refs, noisy = corpus(2)
    with pytest.raises(ValueError, match="79 lines but there are 80 references"):
        score(noisy(0.5)[:-1], refs)
    with pytest.raises(ValueError, match="worse has 79 lines"):
        paired_bootstrap(refs, {"worse": noisy(0.5)[:-1]}, refs)


def test_paired_bootstrap_same_system_is_not_significant_better_one_is():
    refs, noisy = corpus(3)
    base, better = noisy(0.5), noisy(0.9)
    one_fixed = [refs[0], *base[1:]]  # better on a single sentence out of 80
    systems = {"same": list(base), "better": better, "one_fixed": one_fixed}
    env_before = os.environ.get("SACREBLEU_SEED")
    result = paired_bootstrap(base, systems, refs)
    assert os.environ.get("SACREBLEU_SEED") == env_before  # the seed is set for the call only
    assert list(result) == list(systems)
    for name, hyps in systems.items():
        assert result[name]["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
        assert result[name]["baseline_bleu"] == pytest.approx(score(base, refs)["bleu"])
    assert result["same"]["p_value"] == 1.0
    assert result["better"]["bleu"] > result["better"]["baseline_bleu"] + 20
    assert result["better"]["p_value"] < 0.05
    assert result["one_fixed"]["bleu"] > result["one_fixed"]["baseline_bleu"]
    assert result["one_fixed"]["p_value"] > 0.05
    signature = result["better"]["signature"]
    assert "bs:1000" in signature and "seed:12345" in signature and "tok:13a" in signature
    # Seeded: the same call gives the same p-value; another seed, other resamples.
    again = paired_bootstrap(base, {"one_fixed": one_fixed}, refs)
    assert again["one_fixed"]["p_value"] == result["one_fixed"]["p_value"]
    other = paired_bootstrap(base, {"one_fixed": one_fixed}, refs, seed=7)
    assert "seed:7" in other["one_fixed"]["signature"]


def test_paired_bootstrap_rejects_a_seed_sacrebleu_would_ignore():
    refs, noisy = corpus(4)
    with pytest.raises(ValueError, match="seed"):
        paired_bootstrap(refs, {"x": noisy(0.5)}, refs, seed=0)


def test_paired_bootstrap_mutes_sacrebleus_progress_lines_for_the_call_only(caplog):
    """sacreBLEU logs three INFO lines per test; the ablation report runs one per job."""
    refs, noisy = corpus(5)
    logger = logging.getLogger("sacrebleu")
    with caplog.at_level(logging.INFO):
        paired_bootstrap(noisy(0.5), {"better": noisy(0.9)}, refs, n_samples=50)
        assert not [r for r in caplog.records if r.name.startswith("sacrebleu")]
        assert logger.level == logging.NOTSET  # as before the call
        logger.info("after the call")
    assert [r.message for r in caplog.records] == ["after the call"]
