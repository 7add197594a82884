"""The built-in sample corpus (``data=sample``) is what ``python scripts/make_sample_corpus.py``
writes with its defaults, byte for byte: the generator, outside the package, is its source."""

from __future__ import annotations

import importlib
import sys

from conftest import ROOT, listing

from translate.data.sources import sample_dir

sys.path.insert(0, str(ROOT / "scripts"))  # a script beside its lexicon, not a package
make_sample_corpus = importlib.import_module("make_sample_corpus")


def test_the_generator_rewrites_the_committed_sample_corpus(tmp_path, capsys):
    make_sample_corpus.main(["--out", str(tmp_path)])
    written = listing(tmp_path)
    assert written == [
        f"{s}.{lang}" for s in ("test", "train", "validation") for lang in ("de", "en")
    ]
    for name in written:
        assert (tmp_path / name).read_bytes() == (sample_dir() / name).read_bytes(), name
    assert "train: 3000 pairs" in capsys.readouterr().out
