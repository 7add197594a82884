"""The built-in sample corpus (``data=sample``) is what ``python -m translate.data.sample_corpus``
writes with its defaults, byte for byte: the generator in the package is its source."""

from __future__ import annotations

from conftest import listing

from translate.data import sample_corpus
from translate.data.sources import sample_dir


def test_the_generator_rewrites_the_committed_sample_corpus(tmp_path, capsys):
    sample_corpus.main(["--out", str(tmp_path)])
    written = listing(tmp_path)
    assert written == [
        f"{s}.{lang}" for s in ("test", "train", "validation") for lang in ("de", "en")
    ]
    for name in written:
        assert (tmp_path / name).read_bytes() == (sample_dir() / name).read_bytes(), name
    assert "train: 3000 pairs" in capsys.readouterr().out
