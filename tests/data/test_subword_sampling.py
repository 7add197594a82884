"""Subword sampling (``data.tokenizer.sampling_alpha``): each epoch trains on a new
segmentation of the same text, fixed by ``(seed, epoch)``, within the filter's lengths, cut
into batches by its own lengths; validation and test keep the best segmentation."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import data_config

from translate.data.corpus import load_corpus
from translate.errors import UserError
from translate.settings import data_settings
from translate.training.batch_order import TrainBatches


def corpus(tmp_path, *overrides: str):
    """The embedded sample corpus with a 400-piece unigram model (room to segment anew)."""
    cfg = data_config("sample")
    cfg.merge_with_dotlist([f"cache_dir={tmp_path / 'cache'}", "tokenizer.vocab_size=400"])
    cfg.merge_with_dotlist(list(overrides))
    return load_corpus(data_settings(cfg))


@pytest.fixture(scope="module")
def sampled(tmp_path_factory):
    return corpus(tmp_path_factory.mktemp("sampling"), "tokenizer.sampling_alpha=0.2")


def test_a_drawn_segmentation_spells_the_same_text(sampled):
    epoch = sampled.train_split(seed=1, epoch=0)
    best = sampled.splits["train"]
    assert epoch.src_text == best.src_text and epoch.tgt_text == best.tgt_text
    assert sampled.tokenizer.decode(epoch.src_ids) == sampled.tokenizer.decode(best.src_ids)
    assert sampled.tokenizer.decode(epoch.tgt_ids) == sampled.tokenizer.decode(best.tgt_ids)
    changed = sum(not np.array_equal(a, b) for a, b in zip(epoch.src_ids, best.src_ids))
    assert changed > len(best) // 2  # most sentences are segmented otherwise than the best way


def test_the_draw_is_fixed_by_seed_and_epoch(sampled):
    def ids(seed, epoch):
        return [x.tolist() for x in sampled.train_split(seed, epoch).tgt_ids]

    assert ids(1, 0) == ids(1, 0)
    assert ids(1, 0) != ids(1, 1) and ids(1, 0) != ids(2, 0)


def test_drawn_pairs_stay_within_the_filter(tmp_path):
    limited = corpus(tmp_path, "tokenizer.sampling_alpha=0.05", "filter.max_src_len=12")
    best = limited.splits["train"]
    epoch = limited.train_split(seed=1, epoch=0)
    assert epoch.src_lens.max() <= 12
    # The same draw, redone: the pairs whose drawn source was too long keep their best
    # segmentation on both sides, the others are trained on as drawn.
    draw = int(np.random.SeedSequence([1, 0]).generate_state(1)[0])
    drawn = limited.tokenizer.sample(best.src_text + best.tgt_text, 0.05, draw)
    too_long = [len(src) + 1 > 12 for src in drawn[: len(best)]]
    assert any(too_long) and not all(too_long)
    for i, long in enumerate(too_long):
        src, tgt = (best.src_ids[i], best.tgt_ids[i]) if long else (drawn[i], drawn[len(best) + i])
        assert epoch.src_ids[i].tolist() == list(src) and epoch.tgt_ids[i].tolist() == list(tgt)


def test_without_sampling_every_epoch_is_the_encoded_split(tmp_path):
    plain = corpus(tmp_path)
    assert plain.sampling_alpha is None
    assert plain.train_split(seed=1, epoch=3) is plain.splits["train"]


def test_batches_follow_each_epochs_lengths_and_a_skip_resumes_the_same_epoch(sampled):
    def batches(skip: int = 0) -> list[list[int]]:
        train = TrainBatches(
            sampled.splits["train"], 256, 1, resample=lambda e: sampled.train_split(1, e)
        )
        return [b.indices for [b] in train.epoch(epoch=2, skip=skip, accumulate=1)]

    whole = batches()
    assert batches(skip=3) == whole[3:]
    epoch = sampled.train_split(1, 2)
    for indices in whole:  # padded size within max_tokens by the drawn lengths
        assert (
            len(indices) * max(epoch.src_lens[indices].max(), epoch.tgt_lens[indices].max()) <= 256
        )


@pytest.mark.parametrize(
    "override,message",
    [
        ("tokenizer.sampling_alpha=0", "data.tokenizer.sampling_alpha=0.0 must be > 0"),
        (
            "tokenizer.model_type=bpe tokenizer.sampling_alpha=1.5",
            "data.tokenizer.sampling_alpha=1.5 is a BPE-dropout probability",
        ),
    ],
)
def test_a_bad_alpha_is_one_line(override, message):
    cfg = data_config("sample")
    cfg.merge_with_dotlist(override.split())
    with pytest.raises(UserError) as err:
        data_settings(cfg)
    assert message in str(err.value) and "\n" not in str(err.value)
