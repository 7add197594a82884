"""The tokenizer and encoding caches: a damaged or mismatched cache file is rebuilt, with a
warning naming it, never used and never a lasting error."""

from __future__ import annotations

import io
import shutil

import pytest
import sentencepiece as spm
from conftest import listing

from translate.data.sources import read_lines, sample_dir
from translate.data.tokenizer import (
    Tokenizer,
    encode_cached,
    text_fingerprint,
    train_or_load_tokenizer,
)
from translate.errors import UserError

LOGGER = "translate.data.tokenizer"


def columns(split: str) -> dict[str, list[str]]:
    return {lang: read_lines(sample_dir() / f"{split}.{lang}") for lang in ("de", "en")}


TEXTS = [s for lines in columns("validation").values() for s in lines]


def tokenizer(cache_dir, vocab_size=120) -> tuple[Tokenizer, object]:
    return train_or_load_tokenizer(
        lambda: iter(TEXTS),
        cache_dir=cache_dir,
        key_parts={"source": "sample", "fingerprint": "validation"},
        vocab_size=vocab_size,
    )


def _default_ids_model() -> bytes:
    """A valid SentencePiece model with SentencePiece's own ids (unk 0, bos 1, eos 2)."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(TEXTS), model_writer=model, vocab_size=120, minloglevel=2
    )
    return model.getvalue()


GARBLED = {
    "garbage": lambda proto, tmp: b"\x00garbled\xff" * 40,
    "truncated": lambda proto, tmp: proto[: len(proto) // 2],
    "empty": lambda proto, tmp: b"",
    "other special ids": lambda proto, tmp: _default_ids_model(),
    "other vocab size": lambda proto, tmp: tokenizer(tmp / "other", vocab_size=100)[0].model_proto,
}


@pytest.mark.parametrize("damage", GARBLED)
def test_a_garbled_tokenizer_cache_is_trained_again_with_a_warning(tmp_path, caplog, damage):
    first, path = tokenizer(tmp_path / "cache")
    path.write_bytes(GARBLED[damage](first.model_proto, tmp_path))
    with caplog.at_level("WARNING", logger=LOGGER):
        again, again_path = tokenizer(tmp_path / "cache")
    assert again_path == path
    assert str(path) in caplog.text and "training it again" in caplog.text
    assert again.model_proto == first.model_proto  # training is seeded: the same model
    assert path.read_bytes() == first.model_proto  # and the file is whole again
    assert Tokenizer.from_file(path).encode(TEXTS[:3]) == first.encode(TEXTS[:3])


def test_tokenizer_from_a_bad_file_names_the_file(tmp_path):
    path = tmp_path / "spm.model"
    path.write_bytes(b"garbled")
    with pytest.raises(UserError, match="not a SentencePiece model") as err:
        Tokenizer.from_file(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(UserError, match="cannot be read") as err:
        Tokenizer.from_file(tmp_path / "missing.model")
    assert str(tmp_path / "missing.model") in str(err.value)


def _encode(tok, split: str, cache_dir):
    cols = columns(split)
    return encode_cached(tok, cols, text_fingerprint(cols), cache_dir)


def test_an_encoded_split_replaced_by_another_splits_file_is_encoded_again(tmp_path, caplog):
    tok, _ = tokenizer(tmp_path / "spm")
    cache = tmp_path / "cache"
    _encode(tok, "validation", cache)
    (valid_file,) = (cache / name for name in listing(cache))
    _encode(tok, "test", cache)
    (test_file,) = {cache / name for name in listing(cache)} - {valid_file}
    shutil.copy(valid_file, test_file)  # same sentence counts (200), other sentences

    with caplog.at_level("WARNING", logger=LOGGER):
        ids = _encode(tok, "test", cache)
    assert str(test_file) in caplog.text and "encoding it again" in caplog.text
    for lang, texts in columns("test").items():
        assert [x.tolist() for x in ids[lang]] == tok.encode(texts)

    caplog.clear()
    with caplog.at_level("WARNING", logger=LOGGER):
        again = _encode(tok, "test", cache)  # the rewritten file is now used as it is
    assert not caplog.text
    assert [x.tolist() for x in again["en"]] == [x.tolist() for x in ids["en"]]
