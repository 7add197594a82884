"""docs/extending.md, "A decoding strategy": sampling, registered in STRATEGIES and run through
the settings reader and :func:`generate`, on a tiny random model."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import compose_config

from translate.data.batching import Batch, collate
from translate.data.tokenizer import Tokenizer
from translate.decoding.generate import SPECIAL_IDS, STRATEGIES, generate
from translate.decoding.search import greedy_search, max_lengths
from translate.nn.model import Seq2SeqTransformer
from translate.schema import DecodeSettings
from translate.settings import decode_settings

V = 30


# recipe: start sample
# translate/decoding/generate.py (which then imports torch)
def _draw(lprobs: torch.Tensor) -> torch.Tensor:
    """One token per row, drawn from the model's distribution: log-probs (n, V) -> ids (n,)."""
    return torch.multinomial(lprobs.exp(), 1).squeeze(-1)


def _sample(model, batch: Batch, settings: DecodeSettings) -> list[list[int]]:
    return greedy_search(
        model,
        batch.src,
        batch.src_padding_mask,
        max_len_a=settings.max_len_a,
        max_len_b=settings.max_len_b,
        pick=_draw,
        **SPECIAL_IDS,
    )
# recipe: end sample


ADDED = {
    # recipe: start entry
    # ... and one more entry in STRATEGIES
    "sample": _sample,
    # recipe: end entry
}


@pytest.fixture
def sampling(monkeypatch) -> DecodeSettings:
    """The strategy registered for one test, and decode settings naming it, read as a command's
    are (``decode.strategy=sample``, checked against STRATEGIES)."""
    for name, strategy in ADDED.items():
        monkeypatch.setitem(STRATEGIES, name, strategy)
    cfg = compose_config("train", ["experiment=quickstart", "decode.strategy=sample"])
    return decode_settings(cfg.decode)


def tiny_model() -> Seq2SeqTransformer:
    torch.manual_seed(0)
    model = Seq2SeqTransformer(vocab_size=V, d_model=16, num_heads=2, d_ff=32, dropout=0.0)
    return model.eval()


def sources(*rows: list[int]) -> Batch:
    """A batch of the source ids ``rows`` (no targets)."""
    return collate([(i, row, []) for i, row in enumerate(rows)])


def random_sources(lengths=(7, 5, 3, 6)) -> Batch:
    g = torch.Generator().manual_seed(1)
    return sources(*(torch.randint(4, V, (n,), generator=g).tolist() for n in lengths))


def test_sampling_draws_whole_outputs_reproducibly_within_the_limits(sampling):
    model, batch = tiny_model(), random_sources()
    torch.manual_seed(5)
    first = generate(model, batch, sampling)
    torch.manual_seed(5)
    assert generate(model, batch, sampling) == first
    limits = max_lengths(batch.src, batch.src_padding_mask, sampling.max_len_a, sampling.max_len_b)
    assert all(len(hyp) <= n for hyp, n in zip(first, limits))
    specials = {Tokenizer.PAD, Tokenizer.BOS, Tokenizer.EOS}
    assert not specials & {token for hyp in first for token in hyp}
    greedy = generate(model, batch, dataclasses.replace(sampling, strategy="greedy"))
    assert first != greedy  # a random model's distribution is flat: a draw is not the argmax


def test_the_first_tokens_drawn_follow_the_models_distribution(sampling):
    """4,000 draws of one sentence's first token against the model's probabilities (EOS drawn
    is an empty output); PAD and BOS are never drawn."""
    model, n = tiny_model(), 4000
    batch = sources(*[[5, 9, 4, 17, 8]] * n)
    one_token = dataclasses.replace(sampling, max_len_a=0.0, max_len_b=1)
    torch.manual_seed(0)
    drawn = [hyp[0] if hyp else Tokenizer.EOS for hyp in generate(model, batch, one_token)]
    counts = torch.bincount(torch.tensor(drawn), minlength=V) / n
    bos = torch.full((1, 1), Tokenizer.BOS)
    logits = model.decode(bos, model.encode(batch.src[:1]))[0, -1]
    logits[[Tokenizer.PAD, Tokenizer.BOS]] = float("-inf")
    probs = torch.softmax(logits.float(), dim=-1)
    assert counts[Tokenizer.PAD] == counts[Tokenizer.BOS] == 0
    assert (counts - probs).abs().sum() / 2 < 0.06  # total variation; about 0.03 expected
