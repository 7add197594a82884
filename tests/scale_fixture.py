"""A small stand-in corpus in the IWSLT 2017 release layout, made by
``python -m translate.bench.scale_corpus`` from the built-in sample corpus's captions and a
synthetic dev set with a long-tailed length distribution, so tests of the scale tooling need no
``../shared/data``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from translate.bench import scale_corpus
from translate.data.sources import read_lines, sample_dir

ROOT = Path(__file__).resolve().parents[1]


def synthetic_dev(path: Path, sentences: int = 400, seed: int = 0) -> Path:
    """JSON lines ``{"translation": {"de", "en"}}`` of sample-corpus words, lengths log-normal
    (median about 15 words, a tail past 60): longer than the captions, like TED's."""
    rng = np.random.default_rng(seed)
    words = {
        lang: " ".join(read_lines(sample_dir() / f"train.{lang}")).split() for lang in ("de", "en")
    }
    lengths = np.clip(np.round(rng.lognormal(2.7, 0.6, sentences)), 1, 90).astype(int)
    with path.open("w", encoding="utf-8") as f:
        for n in lengths:
            pair = {lang: " ".join(rng.choice(words[lang], n)) for lang in words}
            f.write(json.dumps({"translation": pair}, ensure_ascii=False) + "\n")
    return path


def make_corpus(out: Path, pairs: int, test_pairs: int = 60, seed: int = 0) -> Path:
    """``python -m translate.bench.scale_corpus --out out --pairs pairs ...`` on the sample
    captions; ``out``."""
    dev = synthetic_dev(out.parent / f"{out.name}-dev.jsonl")
    script = scale_corpus
    argv = ["--out", str(out), "--pairs", str(pairs), "--test-pairs", str(test_pairs)]
    argv += ["--seed", str(seed), "--multi30k", str(sample_dir()), "--dev", str(dev)]
    script.make(script.parse_args(argv))
    return out
