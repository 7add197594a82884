"""The data pipeline on our own fixtures: readers, filters, caches, batches, errors, the CLI."""

from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from conftest import data_config, listing

from translate.data import iwslt, sources
from translate.data.batching import Batch, TokenBatchSampler, collate, make_loader
from translate.data.corpus import load_corpus, load_raw_split
from translate.data.tokenizer import Tokenizer
from translate.errors import UserError
from translate.settings import data_settings

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RELEASE = FIXTURES / "iwslt_release"
TEXT = FIXTURES / "text"
JSONL = FIXTURES / "jsonl"


def data_cfg(name: str, tmp_path: Path, *overrides: str):
    """``conf/data/<name>.yaml`` with a temporary cache, a tiny vocabulary and ``overrides``."""
    cfg = data_config(name)
    cfg.merge_with_dotlist([f"cache_dir={tmp_path / 'cache'}", "tokenizer.vocab_size=90"])
    cfg.merge_with_dotlist(list(overrides))
    return data_settings(cfg)


def text_cfg(tmp_path, *overrides):
    return data_cfg("multi30k", tmp_path, f"dir={TEXT}", "splits.test=test", *overrides)


def pairs(ds: datasets.Dataset, src="de", tgt="en") -> list[tuple[str, str]]:
    return [(r[src], r[tgt]) for r in ds["translation"]]


# ------------------------------------------------------------------ readers


def test_release_folder_counts_skip_tags_and_extract_segs():
    release = iwslt.IwsltRelease(RELEASE)
    train = pairs(release.split("train", ("de", "en")))
    assert len(train) == 6  # 13 lines, 7 of them <tags>
    assert not any(s.startswith("<") or t.startswith("<") for s, t in train)
    assert train[1][0] == "Es ist mir wirklich eine Ehre, zweimal auf dieser Bühne zu stehen."
    assert train[3] == ("(Lachen)", "(Laughter)")  # after a <talkid> line in the middle

    valid = pairs(release.split("validation", ("de", "en")))
    assert len(valid) == 3
    assert valid[0] == (
        "Letztes Jahr habe ich diese Folien gezeigt.",
        "Last year I showed these slides.",
    )
    assert valid[1][1] == 'Research & development is "important".'  # XML entities unescaped

    test = pairs(release.split("test", ("de", "en")))
    assert len(test) == 7  # tst2010 (2) + tst2011..tst2015 (1 each), in that order
    assert [t for _, t in test][::3] == [
        "Test twenty-ten one.",
        "Test twenty-twelve.",
        "Test twenty-fifteen.",
    ]
    assert pairs(release.split("tst2012", ("de", "en"))) == [test[3]]


def test_release_without_its_files_says_what_path_must_be(tmp_path):
    with pytest.raises(UserError, match=r"train\.tags\.de-en\.de not found.*de-en\.tgz"):
        iwslt.IwsltRelease(tmp_path).split("train", ("de", "en"))


def test_release_with_unaligned_segs_names_both_files(tmp_path):
    folder = tmp_path / "de-en"
    shutil.copytree(RELEASE / "de-en", folder)
    en = folder / "IWSLT17.TED.tst2013.de-en.en.xml"
    en.write_text(en.read_text().replace('<seg id="1">', '<sex id="1">'))
    with pytest.raises(UserError) as err:
        iwslt.IwsltRelease(tmp_path).split("test", ("de", "en"))
    message = str(err.value)
    assert f"{folder / 'IWSLT17.TED.tst2013.de-en.de.xml'} has 1 <seg> lines" in message
    assert f"{en} has 0" in message


def test_release_archive_reads_like_the_folder(tmp_path):
    archive = tmp_path / "de-en.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(RELEASE / "de-en", arcname="de-en")
    folder, packed = iwslt.IwsltRelease(RELEASE), iwslt.IwsltRelease(archive)
    for split in ("train", "validation", "test"):
        assert pairs(packed.split(split, ("de", "en"))) == pairs(folder.split(split, ("de", "en")))


def test_text_folder_reads_plain_and_gzipped_files():
    assert len(sources.read_text_pair(TEXT, "train", ("de", "en"))) == 12
    val = pairs(sources.read_text_pair(TEXT, "val", ("de", "en")))  # val.de.gz / val.en.gz
    assert val[0] == ("Ein Hund spielt mit einem Ball.", "A dog plays with a ball.")


def test_jsonl_counts():
    counts = [
        len(sources.read_jsonl(JSONL, s, ("de", "en"))) for s in ("train", "validation", "test")
    ]
    assert counts == [9, 3, 2]


def test_sample_corpus_loads_and_test_is_unseen(tmp_path):
    corpus = load_corpus(data_cfg("sample", tmp_path, "tokenizer.vocab_size=800"))
    sizes = {role: (s.name, s.num_raw) for role, s in corpus.splits.items()}
    assert sizes == {"train": ("train", 3000), "valid": ("validation", 200), "test": ("test", 200)}
    train = corpus.splits["train"]
    for role in ("valid", "test"):
        split = corpus.splits[role]
        assert not set(split.src_text) & set(train.src_text)
        assert not set(split.tgt_text) & set(train.tgt_text)


# ------------------------------------------------------------------ load_corpus


def test_load_corpus_counts_filters_and_keeps_order(tmp_path):
    cfg = text_cfg(tmp_path, "filter.max_src_len=60", "filter.max_tgt_len=60")
    corpus = load_corpus(cfg)
    train, valid = corpus.splits["train"], corpus.splits["valid"]
    assert (corpus.src_lang, corpus.tgt_lang) == ("de", "en")
    assert (train.name, train.num_raw, len(train)) == ("train", 12, 9)
    assert train.dropped == {"empty": 1, "too_long": 1, "ratio": 1}
    raw = pairs(sources.read_text_pair(TEXT, "train", ("de", "en")))
    kept = [p for p in raw if p[1] and not p[0].startswith(("Ja.", "Eine Gruppe"))]
    assert list(zip(train.src_text, train.tgt_text)) == kept
    assert (valid.name, valid.num_raw, len(valid), valid.filtered) == ("val", 3, 3, False)
    assert len(corpus.splits["test"]) == 2
    assert corpus.tokenizer.decode(train.src_ids[:2]) == train.src_text[:2]
    assert np.array_equal(train.src_lens, [len(x) + 1 for x in train.src_ids])
    assert corpus.max_tokens == 4096


def test_languages_are_reversible_and_share_the_tokenizer(tmp_path):
    forward = load_corpus(text_cfg(tmp_path))
    backward = load_corpus(text_cfg(tmp_path, "src_lang=en", "tgt_lang=de"))
    assert backward.tokenizer_path == forward.tokenizer_path
    for role in ("valid", "test"):
        f, b = forward.splits[role], backward.splits[role]
        assert (b.src_text, b.tgt_text) == (f.tgt_text, f.src_text)
    assert backward.splits["train"].src_text[0] == "A man reads a book in the park."


def test_jsonl_and_release_through_load_corpus(tmp_path):
    jsonl = load_corpus(data_cfg("jsonl", tmp_path, f"dir={JSONL}"))
    assert [s.num_raw for s in jsonl.splits.values()] == [9, 3, 2]
    release = load_corpus(data_cfg("iwslt2017", tmp_path, f"path={RELEASE}"))
    assert [s.num_raw for s in release.splits.values()] == [6, 3, 7]


def test_load_raw_split_reads_the_test_split_only(tmp_path):
    name, srcs, refs = load_raw_split(text_cfg(tmp_path, "src_lang=en", "tgt_lang=de"), "test")
    assert name == "test"
    assert srcs == ["A child drinks milk.", "The man takes the bus."]
    assert refs == ["Ein Kind trinkt Milch.", "Der Mann fährt mit dem Bus."]
    assert not (tmp_path / "cache").exists()  # no tokenizer trained


def test_second_load_reuses_tokenizer_and_encodings(tmp_path, monkeypatch):
    first = load_corpus(text_cfg(tmp_path))
    mtime = Path(first.tokenizer_path).stat().st_mtime_ns
    cached = listing(tmp_path / "cache")
    assert sum(name.startswith("encoded-") for name in cached) == 3

    def fail(*args, **kwargs):
        raise AssertionError("encoded again although cached")

    monkeypatch.setattr(Tokenizer, "encode", fail)
    second = load_corpus(text_cfg(tmp_path))
    assert Path(second.tokenizer_path).stat().st_mtime_ns == mtime
    assert listing(tmp_path / "cache") == cached
    for role, split in first.splits.items():
        assert [x.tolist() for x in second.splits[role].tgt_ids] == [
            x.tolist() for x in split.tgt_ids
        ]


# ------------------------------------------------------------------ batching


def lengths(n=500, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(2, 60, n), rng.integers(2, 60, n)


def test_batches_stay_within_max_tokens_and_cover_every_index():
    src, tgt = lengths()
    for shuffle in (True, False):
        sampler = TokenBatchSampler(src, tgt, max_tokens=400, shuffle=shuffle, seed=3)
        batches = list(sampler)
        assert len(batches) == len(sampler)
        assert sorted(i for b in batches for i in b) == list(range(len(src)))
        for b in batches:
            assert len(b) * src[b].max() <= 400 and len(b) * tgt[b].max() <= 400


def test_shuffling_is_deterministic_per_seed_and_epoch():
    src, tgt = lengths()

    def epoch(seed, e):
        sampler = TokenBatchSampler(src, tgt, max_tokens=400, shuffle=True, seed=seed)
        sampler.set_epoch(e)
        return list(sampler)

    assert epoch(1, 0) == epoch(1, 0)
    assert epoch(1, 0) != epoch(1, 1)
    assert epoch(1, 0) != epoch(2, 0)
    spread = [np.ptp(tgt[b]) for b in epoch(1, 0)]
    assert np.mean(spread) < 5  # similar target lengths share a batch


def test_unshuffled_batches_keep_the_original_order():
    src, tgt = lengths()
    batches = list(TokenBatchSampler(src, tgt, max_tokens=400, shuffle=False))
    assert [i for b in batches for i in b] == list(range(len(src)))


def test_a_pair_longer_than_max_tokens_is_a_user_error():
    with pytest.raises(UserError, match="max_tokens=50"):
        TokenBatchSampler([10, 60], [10, 10], max_tokens=50, shuffle=False)


def test_collate_pads_and_adds_bos_eos():
    batch = collate([(7, [10, 11, 12], [20]), (2, [13], [21, 22, 23])])
    assert batch.src.tolist() == [[10, 11, 12, 3], [13, 3, 0, 0]]
    assert batch.src_padding_mask.tolist() == [[False] * 4, [False, False, True, True]]
    assert batch.tgt_in.tolist() == [[2, 20, 0, 0], [2, 21, 22, 23]]
    assert batch.tgt_out.tolist() == [[20, 3, 0, 0], [21, 22, 23, 3]]
    assert batch.indices == [7, 2]
    assert (batch.num_src_tokens, batch.num_tgt_tokens) == (6, 6)
    moved = batch.to("cpu")
    assert isinstance(moved, Batch) and moved.src.dtype == torch.long


def test_make_loader_yields_batches_of_the_split(tmp_path):
    valid = load_corpus(text_cfg(tmp_path)).splits["valid"]
    batches = list(make_loader(valid, max_tokens=64, shuffle=False))
    assert [i for b in batches for i in b.indices] == list(range(len(valid)))
    first = batches[0]
    row = first.tgt_out[0][first.tgt_out[0] != 0].tolist()
    assert row == [*valid.tgt_ids[0].tolist(), 3]
    # Evaluation batches are length-sorted: every example exactly once, in any order.
    assert sorted(i for b in valid.batches(64) for i in b.indices) == list(range(len(valid)))


def test_evaluation_batches_put_an_over_long_pair_alone():
    """A validation pair longer than the token budget is batched alone, never an error."""
    from translate.data.corpus import EncodedSplit

    ids = [np.arange(4, 4 + n, dtype=np.int32) for n in (3, 40, 5)]
    split = EncodedSplit("val", ["a"] * 3, ["b"] * 3, ids, ids)
    batches = list(split.batches(max_tokens=16))
    assert sorted(i for b in batches for i in b.indices) == [0, 1, 2]
    assert [b.indices for b in batches if 1 in b.indices] == [[1]]


def test_evaluation_batches_without_over_long_pairs_keep_the_split_indices():
    """``max_len`` leaves a pair out; the others keep their places in the split, sorted by
    length (target, then source), as the dev loss sees them."""
    from translate.data.corpus import EncodedSplit

    ids = [np.arange(4, 4 + n, dtype=np.int32) for n in (6, 40, 2, 6)]
    split = EncodedSplit("val", ["a"] * 4, ["b"] * 4, ids, ids)
    batches = list(split.batches(max_tokens=16, max_len=8))
    assert [b.indices for b in batches] == [[2, 0], [3]]
    assert batches[0].tgt_out[1].tolist() == [*ids[0].tolist(), 3]


# ------------------------------------------------------------------ errors


def copy_text(tmp_path, **changes: bytes) -> Path:
    """A copy of the text fixture's train/test files with some files replaced."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    for name in ("train.de", "train.en", "test.de", "test.en"):
        (folder / name).write_bytes(changes.get(name.replace(".", "_"), (TEXT / name).read_bytes()))
    return folder


def corpus_error(tmp_path, *overrides) -> str:
    with pytest.raises(UserError) as err:
        load_corpus(
            data_cfg("multi30k", tmp_path, "splits.valid=null", "splits.test=test", *overrides)
        )
    message = str(err.value)
    assert "\n" not in message
    return message


def test_missing_folder_and_file(tmp_path):
    assert "does not exist" in corpus_error(tmp_path, f"dir={tmp_path / 'nope'}")
    folder = copy_text(tmp_path)
    (folder / "test.en").unlink()
    message = corpus_error(tmp_path, f"dir={folder}")
    assert "test.en not found" in message and "test.de" in message


def test_unset_dir(tmp_path):
    assert "data.dir is not set" in corpus_error(tmp_path)


def test_line_count_mismatch_names_both_files_and_counts(tmp_path):
    folder = copy_text(tmp_path, train_en=b"one\ntwo\n")
    message = corpus_error(tmp_path, f"dir={folder}")
    assert str(folder / "train.de") in message and "12 lines" in message
    assert str(folder / "train.en") in message and "has 2" in message


def test_non_utf8_names_file_and_line(tmp_path):
    lines = (TEXT / "train.de").read_bytes().split(b"\n")
    lines[4] = "Größe".encode("latin-1")
    folder = copy_text(tmp_path, train_de=b"\n".join(lines))
    message = corpus_error(tmp_path, f"dir={folder}")
    assert str(folder / "train.de") in message and "line 5" in message and "UTF-8" in message


def test_non_utf8_in_gzip_names_file_and_line(tmp_path):
    folder = copy_text(tmp_path)
    (folder / "train.de").unlink()
    (folder / "train.de.gz").write_bytes(gzip.compress(b"ok\nok\n\xff\n"))
    assert "train.de.gz, line 3" in corpus_error(tmp_path, f"dir={folder}")


def test_empty_training_split(tmp_path):
    folder = copy_text(tmp_path, train_de=b"", train_en=b"")
    message = corpus_error(tmp_path, f"dir={folder}")
    assert "training split 'train'" in message and "has no pairs" in message


def test_everything_filtered_out(tmp_path):
    message = corpus_error(tmp_path, f"dir={TEXT}", "filter.max_src_len=2")
    assert "dropped all 12 training pairs" in message


def test_bad_jsonl_line(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "train.jsonl").write_text('{"translation": {"de": "a", "en": "b"}}\n{"de": "x"}\n')
    with pytest.raises(UserError, match=r"train\.jsonl, line 2: expected a record like"):
        load_corpus(
            data_cfg("jsonl", tmp_path, f"dir={bad}", "splits.valid=null", "splits.test=null")
        )


def test_hub_offline_names_the_local_alternatives(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(UserError) as err:
        load_corpus(data_cfg("iwslt2017", tmp_path))
    message = str(err.value)
    assert "cannot reach the Hugging Face hub" in message and "HF_DATASETS_OFFLINE=1" in message
    for alternative in ("data=iwslt2017 data.path=", "data=jsonl", "data=multi30k"):
        assert alternative in message


def test_hub_connection_error_names_the_local_alternatives(tmp_path, monkeypatch):
    for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)

    class ConnectError(Exception):  # what httpx raises when DNS fails
        pass

    seen = {}

    def unreachable(builder, data_files):
        seen.update(data_files)
        raise ConnectError("[Errno -2] Name or service not known")

    monkeypatch.setattr(datasets, "load_dataset", unreachable)
    with pytest.raises(UserError, match="cannot reach the Hugging Face hub.*data=multi30k"):
        load_corpus(data_cfg("iwslt2017", tmp_path))
    assert seen["validation"] == (
        "hf://datasets/IWSLT/iwslt2017@refs%2Fconvert%2Fparquet/iwslt2017-de-en/validation/0000.parquet"
    )


def test_hub_parquet_is_used_when_reachable(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    release = iwslt.IwsltRelease(RELEASE)

    def from_release(builder, data_files):
        assert builder == "parquet"
        return datasets.DatasetDict({n: release.split(n, ("de", "en")) for n in data_files})

    monkeypatch.setattr(datasets, "load_dataset", from_release)
    corpus = load_corpus(data_cfg("iwslt2017", tmp_path))
    assert [s.num_raw for s in corpus.splits.values()] == [6, 3, 7]


# ------------------------------------------------------------------ the inspection command


def inspect(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "translate.data", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_cli_reports_counts(tmp_path):
    done = inspect(
        "data=multi30k", f"data.dir={TEXT}", "data.splits.test=test", f"data.cache_dir={tmp_path}",
        "data.tokenizer.vocab_size=90", "data.filter.max_src_len=60", "data.filter.max_tgt_len=60",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split()[1:5] for line in done.stdout.splitlines() if line}
    assert rows["train"] == ["train", "12", "9", "3"]
    assert rows["valid"] == ["val", "3", "3", "0"]
    assert rows["test"] == ["test", "2", "2", "0"]
    assert "dropped: empty 1, too_long 1, ratio 1" in done.stdout
    assert f"tokenizer: {tmp_path}" in done.stdout


def test_cli_missing_dir_exits_2_with_one_line(tmp_path):
    done = inspect(
        "data=multi30k", f"data.dir={tmp_path / 'missing'}", f"data.cache_dir={tmp_path}"
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert done.stderr.startswith("error: data folder") and "missing does not exist" in done.stderr


def test_a_missing_multi30k_folder_says_what_it_must_hold_and_where_multi30k_comes_from(tmp_path):
    data = data_cfg("multi30k", tmp_path, f"dir={tmp_path / 'missing'}")
    with pytest.raises(UserError) as err:
        load_corpus(data)
    message = str(err.value)
    for split in data.split_names.values():  # every file conf/data/multi30k.yaml reads
        for lang in (data.src_lang, data.tgt_lang):
            assert f"{split}.{lang}" in message
    assert "https://github.com/multi30k/dataset" in message and "\n" not in message
    # Those files, and nothing else, are a folder the source reads.
    folder = tmp_path / "m30k"
    folder.mkdir()
    for split in data.split_names.values():
        for lang in (data.src_lang, data.tgt_lang):
            (folder / f"{split}.{lang}").write_text(f"a {split} sentence\n", encoding="utf-8")
    texts = load_raw_split(data_cfg("multi30k", tmp_path, f"dir={folder}"), "valid")
    assert texts[1] == ["a val sentence"]
