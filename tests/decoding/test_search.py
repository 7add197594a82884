"""Greedy and beam search: properties checked on tiny random models, never on stored outputs."""

import dataclasses
import itertools

import pytest
import torch

from translate.data.batching import collate
from translate.data.tokenizer import Tokenizer
from translate.decoding.generate import STRATEGIES, generate, taken_by
from translate.decoding.search import beam_search, greedy_search, max_lengths
from translate.nn.model import Seq2SeqTransformer
from translate.schema import DecodeSettings

PAD, UNK, BOS, EOS = Tokenizer.PAD, Tokenizer.UNK, Tokenizer.BOS, Tokenizer.EOS
V = 30
SPECIAL = dict(bos_id=BOS, eos_id=EOS, pad_id=PAD)


def tiny(seed, impl="manual"):
    torch.manual_seed(seed)
    model = Seq2SeqTransformer(
        vocab_size=V, d_model=16, num_heads=2, d_ff=32, dropout=0.0, attention_impl=impl
    )
    return model.eval()


class Rigged:
    """A model whose logits for ``tokens`` get ``bias + slope * position`` added.

    Still a function of the prefix only, so it is a valid model for search; with a positive
    slope EOS becomes likelier as the output grows, which gives hypotheses of varied lengths
    (random tiny models otherwise almost never emit EOS).
    """

    def __init__(self, model, tokens=(EOS,), bias=0.0, slope=0.0):
        self.model, self.tokens, self.bias, self.slope = model, list(tokens), bias, slope

    def encode(self, src, src_padding_mask=None):
        return self.model.encode(src, src_padding_mask)

    def new_cache(self):
        return self.model.new_cache()

    def decode(self, tgt, memory, memory_padding_mask=None, cache=None):
        offset = 0 if cache is None else cache.length
        logits = self.model.decode(tgt, memory, memory_padding_mask, cache=cache).clone()
        positions = torch.arange(offset, offset + tgt.size(1), dtype=logits.dtype)  # (T,)
        bias = self.bias + self.slope * positions  # (T,)
        logits[:, :, self.tokens] += bias.view(1, -1, 1)
        return logits


def eos_prone(seed):
    return Rigged(tiny(seed), bias=-4.0, slope=0.6)


def batch(seed, lengths=(7, 5, 3, 6)):
    """Random source ids ``(B, S)`` with right padding to the longest of ``lengths``."""
    g = torch.Generator().manual_seed(seed)
    S = max(lengths)
    src = torch.randint(4, V, (len(lengths), S), generator=g)
    mask = torch.arange(S).unsqueeze(0) >= torch.tensor(lengths).unsqueeze(1)  # (B, S)
    return src.masked_fill(mask, PAD), mask


def sequence_score(model, src, mask, hyp, limit, length_penalty=0.0):
    """The search objective recomputed from scratch: teacher-forced, no cache.

    ``sum log p(y_i | y_<i, x)``, plus ``log p(EOS)`` unless the hypothesis stopped at its length
    limit, divided by ``len ** length_penalty`` (``len`` counts the EOS).
    """
    memory = model.encode(src, mask)
    tgt = torch.tensor([[BOS, *hyp]])
    lprobs = torch.log_softmax(model.decode(tgt, memory, mask).float(), dim=-1)[0]  # (L+1, V)
    score = sum(lprobs[i, tok].item() for i, tok in enumerate(hyp))
    length = len(hyp)
    if len(hyp) < limit:
        score += lprobs[len(hyp), EOS].item()
        length += 1
    return score / max(length, 1) ** length_penalty


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("rig", [False, True])
def test_beam_size_one_is_greedy(seed, rig):
    model = eos_prone(seed) if rig else tiny(seed)
    src, mask = batch(seed)
    greedy = greedy_search(model, src, mask, **SPECIAL)
    for length_penalty in (0.0, 1.0):
        beam = beam_search(model, src, mask, beam_size=1, length_penalty=length_penalty, **SPECIAL)
        assert beam == greedy
    if rig:  # the rig does what it is for: some outputs end early with EOS
        assert any(len(h) < lim for h, lim in zip(greedy, max_lengths(src, mask, 1.5, 10)))


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_search_under_bf16_autocast(device):
    # Scores stay float32 whatever the model computes in; the properties hold on any device.
    model = Rigged(tiny(0, "sdpa").to(device), bias=-4.0, slope=0.6)
    src, mask = (x.to(device) for x in batch(0))
    with torch.autocast(device, dtype=torch.bfloat16):
        greedy = greedy_search(model, src, mask, **SPECIAL)
        # (cache vs. recompute is only compared in float32: bf16 rounding can break near-ties)
        assert beam_search(model, src, mask, beam_size=1, **SPECIAL) == greedy
        beam = beam_search(model, src, mask, beam_size=4, **SPECIAL)
    limits = max_lengths(src, mask, 1.5, 10)
    assert all(len(h) <= n and EOS not in h for h, n in zip(beam, limits))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("impl", ["manual", "sdpa"])
def test_greedy_cache_gives_the_same_tokens_as_recomputing(seed, impl):
    for model in (tiny(seed, impl), Rigged(tiny(seed, impl), bias=-4.0, slope=0.6)):
        src, mask = batch(seed)
        cached = greedy_search(model, src, mask, **SPECIAL)
        assert greedy_search(model, src, mask, use_cache=False, **SPECIAL) == cached


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_outputs_in_input_order_and_independent_of_the_batch(search):
    lengths = (7, 2, 5, 3, 6)
    for seed in range(2):
        model = eos_prone(seed)
        src, mask = batch(seed, lengths)

        def run(s, m, model=model):
            if search == "greedy":
                return greedy_search(model, s, m, **SPECIAL)
            return beam_search(model, s, m, beam_size=4, **SPECIAL)

        together = run(src, mask)
        alone = [run(src[i : i + 1, :n], None)[0] for i, n in enumerate(lengths)]
        assert together == alone
        perm = torch.tensor([3, 0, 4, 2, 1])
        assert run(src[perm], mask[perm]) == [together[i] for i in perm.tolist()]


@pytest.mark.parametrize("a, b", [(1.5, 3), (0.0, 4), (2.0, 0), (0.0, 0)])
def test_max_length_is_int_a_times_src_len_plus_b_without_eos(a, b):
    model = Rigged(tiny(0), bias=float("-inf"))  # never EOS: every output runs to its limit
    lengths = (5, 2, 7, 1)
    src, mask = batch(0, lengths)
    limits = [int(a * n + b) for n in lengths]
    assert max_lengths(src, mask, a, b) == limits
    for out in (
        greedy_search(model, src, mask, max_len_a=a, max_len_b=b, **SPECIAL),
        greedy_search(model, src, mask, max_len_a=a, max_len_b=b, use_cache=False, **SPECIAL),
        beam_search(model, src, mask, beam_size=3, max_len_a=a, max_len_b=b, **SPECIAL),
    ):
        assert [len(h) for h in out] == limits


def test_an_empty_batch_gives_no_outputs():
    src, mask = torch.zeros(0, 5, dtype=torch.long), torch.zeros(0, 5, dtype=torch.bool)
    assert greedy_search(tiny(0), src, mask, **SPECIAL) == []
    assert beam_search(tiny(0), src, mask, beam_size=3, **SPECIAL) == []


def test_a_model_that_always_prefers_eos_gives_empty_outputs():
    model = Rigged(tiny(1), bias=100.0)
    src, mask = batch(1)
    assert greedy_search(model, src, mask, **SPECIAL) == [[]] * 4
    assert beam_search(model, src, mask, beam_size=4, **SPECIAL) == [[]] * 4


def test_pad_and_bos_are_never_generated():
    model = Rigged(tiny(2), tokens=(PAD, BOS), bias=100.0)
    src, mask = batch(2)
    for out in (
        greedy_search(model, src, mask, **SPECIAL),
        beam_search(model, src, mask, beam_size=3, **SPECIAL),
    ):
        assert all(len(h) > 0 and PAD not in h and BOS not in h for h in out)


@pytest.mark.parametrize("seed", range(4))
def test_beam_finds_a_model_score_at_least_greedys(seed):
    # Not a theorem for beam search (the greedy path can fall off the beam), but on these
    # models a regression in scoring or beam bookkeeping would show up here.
    model = eos_prone(seed)
    src, mask = batch(seed)
    limits = max_lengths(src, mask, 1.5, 10)
    greedy = greedy_search(model, src, mask, **SPECIAL)
    beam = beam_search(model, src, mask, beam_size=5, length_penalty=0.0, **SPECIAL)
    for i, n in enumerate(limits):
        row, row_mask = src[i : i + 1], mask[i : i + 1]
        g = sequence_score(model, row, row_mask, greedy[i], n)
        b = sequence_score(model, row, row_mask, beam[i], n)
        assert b >= g - 1e-4, (i, beam[i], greedy[i])


@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_beam_scores_match_the_model_recomputed_without_cache(length_penalty):
    # The score the search keeps for its answer must be the model's: a beam whose cache rows
    # were not reordered with it would be scored against another beam's history.
    for seed in range(3):
        model = eos_prone(seed)
        src, mask = batch(seed)
        limits = max_lengths(src, mask, 1.5, 10)
        best = beam_search(
            model,
            src,
            mask,
            beam_size=4,
            length_penalty=length_penalty,
            max_len_a=1.5,
            max_len_b=10,
            with_scores=True,
            **SPECIAL,
        )
        for i, (score, hyp) in enumerate(best):
            row, row_mask = src[i : i + 1], mask[i : i + 1]
            expected = sequence_score(model, row, row_mask, hyp, limits[i], length_penalty)
            assert score == pytest.approx(expected, abs=1e-4), (seed, i)


def exhaustive_best(model, src, mask, vocab_size, limit, length_penalty):
    """Best of all outputs of at most ``limit`` tokens, scored by teacher-forced passes.

    ``src (1, S)``. Outputs shorter than ``limit`` end with EOS; the others stop at the limit.
    """
    real = [UNK, *range(4, vocab_size)]  # everything but PAD, BOS and EOS
    prefixes = torch.tensor([[BOS, *p] for p in itertools.product(real, repeat=limit - 1)])
    memory = model.encode(src, mask).expand(len(prefixes), -1, -1)  # (N, S, D)
    logits = model.decode(prefixes, memory, mask.expand(len(prefixes), -1))  # (N, limit, V)
    lprobs = torch.log_softmax(logits.float(), dim=-1)
    next_lprobs = {  # output prefix -> log-probs of the next token, (V,)
        tuple(row[1 : i + 1].tolist()): lprobs[r, i]
        for r, row in enumerate(prefixes)
        for i in range(limit)
    }

    def score(hyp):
        total = sum(next_lprobs[tuple(hyp[:i])][tok].item() for i, tok in enumerate(hyp))
        if len(hyp) < limit:
            total += next_lprobs[tuple(hyp)][EOS].item()
        return total / max(len(hyp) + (len(hyp) < limit), 1) ** length_penalty

    hyps = [list(h) for n in range(limit + 1) for h in itertools.product(real, repeat=n)]
    return max(hyps, key=score)


def test_a_beam_wide_enough_to_keep_everything_is_exhaustive_search():
    # 5 tokens (UNK too), outputs of at most 3: K = 5**3 + 5**2 keeps every live prefix and finishes
    # every EOS candidate, so beam search must return the exhaustive best under either
    # normalisation; three steps also make it depend on reordering the cache by beam.
    vocab, limit = 8, 3
    beat_greedy = 0
    for seed, bias, length_penalty in itertools.product(range(4), (1.0, 2.0), (0.0, 1.0)):
        torch.manual_seed(seed)
        model = Seq2SeqTransformer(vocab, d_model=16, num_heads=2, d_ff=32, dropout=0.0).eval()
        model = Rigged(model, bias=bias)  # EOS competitive, so short outputs can win
        src = torch.randint(4, vocab, (1, 4), generator=torch.Generator().manual_seed(seed))
        mask = torch.zeros_like(src, dtype=torch.bool)
        limits = dict(max_len_a=0.0, max_len_b=limit, **SPECIAL)
        best = exhaustive_best(model, src, mask, vocab, limit, length_penalty)
        found = beam_search(
            model, src, mask, beam_size=5**3 + 5**2, length_penalty=length_penalty, **limits
        )
        assert found == [best], (seed, bias, length_penalty)
        beat_greedy += [best] != greedy_search(model, src, mask, **limits)
    assert beat_greedy > 0  # the cases include some where greedy is not optimal


def as_batch(seed):
    """:func:`batch`'s sources as the Batch that generate takes (collate appends the EOS)."""
    src, mask = batch(seed)
    rows = [row[~pads].tolist() for row, pads in zip(src, mask)]
    return collate([(i, ids, []) for i, ids in enumerate(rows)])


def test_generate_runs_the_strategy_named_and_rejects_empty_beams():
    model = eos_prone(0)
    b = as_batch(0)
    settings = DecodeSettings(beam_size=3, length_penalty=1.0, max_len_a=1.5, max_len_b=10)
    limits = dict(max_len_a=1.5, max_len_b=10, **SPECIAL)
    beam = beam_search(model, b.src, b.src_padding_mask, beam_size=3, **limits)
    greedy = greedy_search(model, b.src, b.src_padding_mask, **limits)
    assert beam != greedy  # so that the dispatch can be told apart
    assert generate(model, b, settings) == beam
    assert generate(model, b, dataclasses.replace(settings, strategy="greedy")) == greedy
    assert generate(model, b, dataclasses.replace(settings, beam_size=1)) == greedy
    assert set(STRATEGIES) == {"beam", "greedy"}
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, b.src, b.src_padding_mask, beam_size=0, **SPECIAL)


def test_every_decode_setting_reaches_a_search_by_its_name():
    """generate hands each search the settings it has a parameter for (taken_by): a setting
    that no search takes (but strategy, which picks the search) would be silently ignored."""
    settings = DecodeSettings(beam_size=4, length_penalty=0.7, max_len_a=1.2, max_len_b=3)
    taken = {**taken_by(greedy_search, settings), **taken_by(beam_search, settings)}
    every = {f.name for f in dataclasses.fields(DecodeSettings)} - {"strategy"}
    assert set(taken) == every
    assert taken == {k: getattr(settings, k) for k in every}
