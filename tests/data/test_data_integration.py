"""The real corpora in ../shared/data through load_corpus, as users load them; skipped if absent."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import data_config

from translate.data.corpus import load_corpus
from translate.settings import data_settings

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not SHARED.is_dir(), reason=f"{SHARED} is absent"),
]


def data_cfg(name: str, tmp_path: Path, *overrides: str):
    cfg = data_config(name)
    cfg.merge_with_dotlist([f"cache_dir={tmp_path}", *overrides])
    return data_settings(cfg)


def test_multi30k(tmp_path):
    corpus = load_corpus(data_cfg("multi30k", tmp_path, f"dir={SHARED / 'multi30k'}"))
    found = {role: (split.name, split.num_raw) for role, split in corpus.splits.items()}
    assert found == {
        "train": ("train", 29000),
        "valid": ("val", 1014),
        "test": ("test_2016_flickr", 1000),
    }
    assert len(corpus.splits["valid"]) == 1014 and len(corpus.splits["test"]) == 1000
    assert corpus.splits["train"].src_text[0].startswith("Zwei junge weiße Männer")
    assert corpus.tokenizer.vocab_size == 8000


def test_iwslt2017_validation_jsonl(tmp_path):
    overrides = [
        f"dir={SHARED / 'iwslt2017-de-en'}",
        "splits.train=validation",  # the only split there; it also trains the tokenizer
        "splits.valid=validation",
        "splits.test=null",
        "tokenizer.vocab_size=2000",
    ]
    corpus = load_corpus(data_cfg("jsonl", tmp_path, *overrides))
    valid = corpus.splits["valid"]
    assert (valid.name, valid.num_raw, len(valid)) == ("validation", 888, 888)
    assert valid.src_text[0].startswith("Letztes Jahr habe ich diese beiden Folien gezeigt")
    assert valid.tgt_text[0].startswith("Last year I showed these two slides")
