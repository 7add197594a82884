"""The joint SentencePiece tokenizer: fixed special ids, decode rules, the on-disk cache."""

from __future__ import annotations

import io
import re

import pytest
import sentencepiece as spm
from conftest import listing

from translate.data.tokenizer import POOLED, Tokenizer, train_or_load_tokenizer
from translate.errors import UserError

TEXTS = [
    "Der Mann liest das Buch im Park.",
    "The man reads the book in the park.",
    "Die Frau trinkt heute Kaffee.",
    "The woman drinks coffee today.",
    "Ein Kind spielt mit dem Hund.",
    "A child plays with the dog.",
] * 5


def train(cache_dir, calls=None, **overrides):
    def texts():
        if calls is not None:
            calls.append(1)
        return iter(TEXTS)

    settings = {"vocab_size": 50, "model_type": "unigram", **overrides}
    key_parts = settings.pop("key_parts", {"source": "toy", "fingerprint": "abc"})
    return train_or_load_tokenizer(texts, cache_dir=cache_dir, key_parts=key_parts, **settings)


def test_fixed_special_ids_and_pieces(tmp_path):
    tok, _ = train(tmp_path)
    assert (tok.PAD, tok.UNK, tok.BOS, tok.EOS) == (0, 1, 2, 3)
    assert tok.pieces([0, 1, 2, 3]) == ["<pad>", "<unk>", "<s>", "</s>"]
    assert tok.vocab_size == 50


def test_encode_has_no_specials_and_decode_round_trips(tmp_path):
    tok, _ = train(tmp_path)
    ids = tok.encode(["Der Mann liest das Buch.", "The dog."])
    assert all(i not in (tok.PAD, tok.BOS, tok.EOS) for seq in ids for i in seq)
    assert tok.decode(ids) == ["Der Mann liest das Buch.", "The dog."]


def test_a_few_texts_encode_and_decode_as_a_pooled_batch_does(tmp_path):
    # Under POOLED texts go one call each (no thread pool for a served sentence): same ids.
    tok, _ = train(tmp_path)
    many = [f"{t} {n}" for n, t in enumerate(TEXTS * 3)] + [""]
    assert len(many) >= POOLED
    pooled = tok.encode(many)
    assert [tok.encode([t])[0] for t in many] == pooled
    hyps = [[tok.BOS, *ids, tok.EOS, 7] for ids in pooled]
    assert [tok.decode([h])[0] for h in hyps] == tok.decode(hyps)


def test_decode_stops_at_eos_and_drops_pad_and_bos(tmp_path):
    tok, _ = train(tmp_path)
    (ids,) = tok.encode(["Die Frau trinkt Kaffee."])
    other = tok.encode(["Der Hund."])[0]
    padded = [tok.BOS, *ids, tok.EOS, *other, tok.PAD, tok.PAD]
    assert tok.decode([padded]) == ["Die Frau trinkt Kaffee."]
    assert tok.decode([[tok.BOS, *ids[:2], tok.PAD, *ids[2:]]]) == ["Die Frau trinkt Kaffee."]


def test_model_proto_round_trip(tmp_path):
    tok, path = train(tmp_path)
    assert path.read_bytes() == tok.model_proto
    again = Tokenizer(tok.model_proto)
    assert again.encode(TEXTS[:2]) == tok.encode(TEXTS[:2])


def test_cache_is_reused_not_retrained(tmp_path, monkeypatch):
    calls: list[int] = []
    tok, path = train(tmp_path, calls)
    mtime = path.stat().st_mtime_ns

    def no_training(*args, **kwargs):
        raise AssertionError("retrained although the model is cached")

    monkeypatch.setattr(spm.SentencePieceTrainer, "train", no_training)
    tok2, path2 = train(tmp_path, calls)
    assert path2 == path and path.stat().st_mtime_ns == mtime
    assert calls == [1]  # the training text was read once
    assert tok2.model_proto == tok.model_proto
    assert listing(tmp_path) == [path.name]  # no temporary files left


def test_cache_key_covers_data_and_tokenizer_settings(tmp_path):
    _, base = train(tmp_path)
    _, other_vocab = train(tmp_path, vocab_size=45)
    _, other_type = train(tmp_path, model_type="bpe")
    _, other_data = train(tmp_path, key_parts={"source": "toy", "fingerprint": "xyz"})
    assert len({base, other_vocab, other_type, other_data}) == 4


def test_vocab_size_too_large_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match=r"data\.tokenizer\.vocab_size=5000 is too large.*at most"):
        train(tmp_path, vocab_size=5000)


def test_vocab_size_below_the_characters_is_a_user_error(tmp_path):
    """Before: SentencePiece's own INTERNAL check line, with its source file and C++ terms."""
    with pytest.raises(UserError) as err:
        train(tmp_path, vocab_size=5)
    minimum = int(re.search(r"set it to at least (\d+)", str(err.value))[1])
    assert str(err.value).startswith("data.tokenizer.vocab_size=5 is too small")
    assert "INTERNAL" not in str(err.value)
    train(tmp_path, vocab_size=minimum)  # the size it names is enough


def test_unknown_model_type_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="unigram or bpe"):
        train(tmp_path, model_type="word")


def test_model_with_other_special_ids_is_rejected():
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(TEXTS), model_writer=model, vocab_size=40, minloglevel=2
    )  # SentencePiece's defaults: unk 0, bos 1, eos 2, no pad
    with pytest.raises(UserError, match=r"expected \(0, 1, 2, 3\)"):
        Tokenizer(model.getvalue())
