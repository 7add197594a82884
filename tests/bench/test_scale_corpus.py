"""``python -m translate.bench.scale_corpus``: deterministic, on its length target, prefix-stable,
read by the iwslt2017 recipe as a release folder; and the recipe's data stages (tokenizer, encoding,
batches) on a few thousand generated pairs. The real Multi30k and IWSLT dev set only in the
integration test, skipped without ../shared/data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import compose_config
from scale_fixture import ROOT, make_corpus, synthetic_dev

from translate.bench import scale_corpus
from translate.data.corpus import load_corpus, load_raw_split
from translate.data.iwslt import IwsltRelease
from translate.data.sources import sample_dir
from translate.settings import data_settings
from translate.training.batch_order import TrainBatches

SHARED = ROOT.parent / "shared" / "data"


@pytest.fixture(scope="module")
def script():
    return scale_corpus


def files(folder: Path) -> dict[str, bytes]:
    paths = sorted(p for p in folder.rglob("*") if p.is_file())
    return {str(p.relative_to(folder)): p.read_bytes() for p in paths}


def recipe_data(folder: Path, cache: Path, *overrides: str):
    cfg = compose_config(
        "train",
        ["experiment=iwslt2017", f"data.path={folder}", f"data.cache_dir={cache}", *overrides],
    )
    return data_settings(cfg.data)


def assert_on_target(made: np.ndarray, target: np.ndarray) -> None:
    """The tolerance the script's docstring states, German words per line."""
    p = lambda x, q: float(np.percentile(x, q))  # noqa: E731
    assert made.mean() == pytest.approx(target.mean(), rel=0.03)
    assert abs(p(made, 50) - p(target, 50)) <= 1
    assert p(made, 95) == pytest.approx(p(target, 95), rel=0.05)
    assert p(made, 99) == pytest.approx(p(target, 99), rel=0.05)
    assert made.max() <= target.max()


def test_the_same_seed_writes_the_same_bytes_another_seed_other_lines(tmp_path):
    a = files(make_corpus(tmp_path / "a", pairs=800))
    b = files(make_corpus(tmp_path / "b", pairs=800))
    c = files(make_corpus(tmp_path / "c", pairs=800, seed=1))
    assert a == b
    train = "de-en/train.tags.de-en.de"
    assert c[train] != a[train]
    dev = "de-en/IWSLT17.TED.dev2010.de-en.de.xml"
    assert c[dev] == a[dev]  # the dev set is copied, whatever the seed


def test_lines_match_the_target_length_distribution(script, tmp_path):
    captions = script.read_captions(sample_dir())
    dev = script.read_dev(synthetic_dev(tmp_path / "dev.jsonl", sentences=2000))
    splits = script.build_splits(captions, dev, pairs=20000, test_pairs=8079, seed=0)
    target = script.word_counts(dev["de"])
    caption_words = script.word_counts(captions["de"])
    assert np.median(target) > 1.5 * np.median(caption_words)  # lines must join captions
    for role in ("train", "test"):
        assert_on_target(script.word_counts(splits[role]["de"]), target)
    # Every line is consecutive captions joined, on both sides alike.
    first = splits["train"]["de"][0]
    k = next(k for k in range(1, 20) if " ".join(captions["de"][:k]) == first)
    assert splits["train"]["en"][0] == " ".join(captions["en"][:k])


def test_smaller_corpora_are_prefixes_of_larger_ones(tmp_path):
    small = IwsltRelease(make_corpus(tmp_path / "small", pairs=300))
    large = IwsltRelease(make_corpus(tmp_path / "large", pairs=1200))
    langs = ("de", "en")
    head = large.split("train", langs)["translation"][:300]
    assert small.split("train", langs)["translation"] == head
    assert small.split("test", langs)["translation"] == large.split("test", langs)["translation"]


def test_the_recipe_reads_the_folder_with_only_data_path(tmp_path):
    folder = make_corpus(tmp_path / "corpus", pairs=500, test_pairs=61)
    data = recipe_data(folder, tmp_path / "cache")
    lines = (tmp_path / "corpus-dev.jsonl").read_text(encoding="utf-8").splitlines()
    dev = [json.loads(line)["translation"] for line in lines]
    counts = {role: len(load_raw_split(data, role)[1]) for role in ("train", "valid", "test")}
    assert counts == {"train": 500, "valid": len(dev), "test": 61}
    name, src, tgt = load_raw_split(data, "valid")
    assert name == "validation"
    assert (src, tgt) == ([d["de"] for d in dev], [d["en"] for d in dev])  # copied as it is


def test_the_recipe_data_stages_run_on_a_few_thousand_pairs(tmp_path):
    folder = make_corpus(tmp_path / "corpus", pairs=3000, test_pairs=200)
    data = recipe_data(folder, tmp_path / "cache", "data.tokenizer.vocab_size=800")
    corpus = load_corpus(data)
    assert corpus.tokenizer.vocab_size == 800
    train = corpus.splits["train"]
    assert train.num_raw == 3000 and len(train) > 2900  # the filter drops the odd pair
    assert len(corpus.splits["valid"]) == corpus.splits["valid"].num_raw  # kept whole
    batches = TrainBatches(train, corpus.max_tokens, seed=1)
    epoch = [idx for idx in batches.sampler]
    assert sorted(i for idx in epoch for i in idx) == list(range(len(train)))
    src, tgt = train.src_lens, train.tgt_lens
    assert max(len(idx) * max(src[idx].max(), tgt[idx].max()) for idx in epoch) <= 8192
    assert len(epoch) < len(train) / 50  # batches of the recipe's size, not of a few pairs


def test_the_command_prints_the_length_table_and_errors_in_one_line(tmp_path):
    dev = synthetic_dev(tmp_path / "dev.jsonl")
    cmd = [sys.executable, "-m", "translate.bench.scale_corpus", "--pairs", "200"]
    cmd += ["--test-pairs", "12", "--dev", str(dev)]
    ok = subprocess.run(
        cmd + ["--out", str(tmp_path / "out"), "--multi30k", str(sample_dir())],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr
    for stat in ("mean", "median", "p95", "p99", "max"):
        assert any(line.split()[:1] == [stat] for line in ok.stdout.splitlines()), stat
    missing = subprocess.run(
        cmd + ["--out", str(tmp_path / "out2"), "--multi30k", str(tmp_path / "nowhere")],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2
    assert missing.stderr.startswith("error: ") and "nowhere" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1 and "Traceback" not in missing.stderr


@pytest.mark.parametrize("name", ["t3.de", "t3.jsonl"])
def test_a_bad_dev_file_is_named_as_given(script, tmp_path, capsys, name):
    """Before: --dev t3.de said "t3.de.jsonl not found", a file the user never named."""
    (tmp_path / "t3.de").write_text("Ein Hund.\n", encoding="utf-8")  # there, but not JSON lines
    dev = tmp_path / name
    argv = ["--out", str(tmp_path / "out"), "--multi30k", str(sample_dir()), "--dev", str(dev)]
    assert script.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --dev {dev}") and len(err.splitlines()) == 1
    assert f"{name}.jsonl" not in err and not (tmp_path / "out").exists()


@pytest.mark.integration
@pytest.mark.skipif(not SHARED.is_dir(), reason=f"{SHARED} is absent")
def test_multi30k_lines_match_the_real_iwslt_dev_set(script):
    captions = script.read_captions(SHARED / "multi30k")
    dev = script.read_dev(SHARED / "iwslt2017-de-en" / "validation.jsonl")
    assert len(dev["de"]) == 888
    splits = script.build_splits(captions, dev, pairs=50000, test_pairs=8079, seed=0)
    target = script.word_counts(dev["de"])
    for role in ("train", "test"):
        assert_on_target(script.word_counts(splits[role]["de"]), target)
