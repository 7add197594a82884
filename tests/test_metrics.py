"""sacreBLEU scoring, paired bootstrap and attention entropy, checked against their definitions."""

import math
import os
import random

import pytest
import sacrebleu
import torch

from translate.metrics import attention_entropy, paired_bootstrap, score

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


def test_entropy_uniform_is_log_s_and_one_hot_is_zero():
    B, H, T, S = 2, 3, 4, 7
    uniform = torch.full((B, H, T, S), 1.0 / S)
    torch.testing.assert_close(attention_entropy(uniform), torch.full((B, H), math.log(S)))
    one_hot = torch.nn.functional.one_hot(torch.randint(S, (B, H, T)), S).float()
    torch.testing.assert_close(attention_entropy(one_hot), torch.zeros(B, H))


def test_entropy_excludes_fully_masked_rows_and_masked_queries():
    T, S = 5, 4
    w = torch.full((1, 2, T, S), 1.0 / S)  # (B, H, T, S)
    w[0, 0, 1:, :] = torch.nn.functional.one_hot(torch.tensor([0, 3, 1, 2]), S).float()
    w[0, 1, 3:] = 0.0  # keys all masked for the last two queries: all-zero rows
    # Head 0: one uniform row and four one-hot rows; head 1: three uniform rows kept.
    torch.testing.assert_close(attention_entropy(w), torch.tensor([[math.log(S) / 5, math.log(S)]]))
    query_pad = torch.tensor([[False, True, True, True, True]])  # (B, T), True = padding
    ent = attention_entropy(w, query_pad.unsqueeze(1))  # mask broadcast over heads
    torch.testing.assert_close(ent, torch.tensor([[math.log(S), math.log(S)]]))
    assert attention_entropy(torch.zeros(2, 3, 4)).isnan().all()  # nothing kept: NaN


def test_entropy_matches_the_definition_on_random_distributions():
    g = torch.Generator().manual_seed(0)
    w = torch.softmax(torch.randn(3, 2, 6, 9, generator=g), dim=-1)  # (B, H, T, S)
    expected = -(w * w.log()).sum(-1).mean(-1)  # (B, H)
    torch.testing.assert_close(attention_entropy(w), expected)
    torch.testing.assert_close(attention_entropy(w.to(torch.bfloat16)), expected, atol=0.02, rtol=0)
