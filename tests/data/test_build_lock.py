"""The tokenizer and encoding caches are built once when several processes (the jobs of a sweep
started together) load the same corpus into a cold cache: the second waits for the first's
build and reads it, instead of building its own. Here the two loaders are threads: the lock is
an flock on a file opened by each, and two opens exclude each other even within one process.
The first holds the lock until the second has asked for it, so no timing decides the order."""

from __future__ import annotations

import fcntl
import logging
import threading
import time

from conftest import listing

from translate.data.sources import read_lines, sample_dir
from translate.data.tokenizer import (
    Tokenizer,
    encode_cached,
    text_fingerprint,
    train_or_load_tokenizer,
)

TEXTS = read_lines(sample_dir() / "train.de")[:1500] + read_lines(sample_dir() / "train.en")[:1500]


def _second_asks(monkeypatch) -> threading.Event:
    """Set once the main thread (the second loader) asks for a lock: from then on it waits for
    the first, however loaded the machine. (Before, the first slept 1.5 s and a slow second
    could come after the build, finding the file without waiting.)"""
    asked, flock = threading.Event(), fcntl.flock

    def watched(fd, operation):
        if threading.current_thread() is threading.main_thread():
            asked.set()
        return flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", watched)
    return asked


def _train(cache_dir, started: threading.Event | None, calls: list, results: list, asked=None):
    def texts():
        calls.append(1)
        if started is not None:  # the first builder: keep the lock until the second waits
            started.set()
            assert asked.wait(60), "the second loader never asked for the lock"
            time.sleep(1.1)  # the log names a wait of over a second
        return iter(TEXTS)

    results.append(
        train_or_load_tokenizer(
            texts, cache_dir=cache_dir, key_parts={"source": "t"}, vocab_size=300
        )
    )


def test_a_second_process_waits_for_the_first_tokenizer_build_and_reads_it(
    tmp_path, caplog, monkeypatch
):
    started, calls, results = threading.Event(), [], []
    asked = _second_asks(monkeypatch)
    first = threading.Thread(target=_train, args=(tmp_path, started, calls, results, asked))
    with caplog.at_level(logging.INFO, logger="translate.data.tokenizer"):
        first.start()
        assert started.wait(30)  # the first is training, holding the lock
        _train(tmp_path, None, calls, results)  # the second: would train too without it
        first.join()
    assert calls == [1]  # the training text was read (the model trained) once
    (a, path_a), (b, path_b) = results
    assert path_a == path_b and a.model_proto == b.model_proto
    assert "waited" in caplog.text and str(path_a) in caplog.text
    assert listing(tmp_path) == [path_a.name]  # no lock file left behind


def test_a_second_process_waits_for_the_first_encoding_and_reads_it(tmp_path, monkeypatch):
    tokenizer, _ = train_or_load_tokenizer(
        lambda: iter(TEXTS), cache_dir=tmp_path / "spm", key_parts={"source": "t"}, vocab_size=300
    )
    columns = {"de": TEXTS[:1500], "en": TEXTS[1500:]}
    encoded, started = [], threading.Event()
    slow_encode = Tokenizer.encode

    def encode(self, texts):
        encoded.append(len(texts))
        if threading.current_thread() is not threading.main_thread():
            started.set()
            asked.wait(60)  # not asserted: without a lock the second encodes, failing below
        return slow_encode(self, texts)

    monkeypatch.setattr(Tokenizer, "encode", encode)
    asked, results = _second_asks(monkeypatch), []

    def load():
        results.append(encode_cached(tokenizer, columns, text_fingerprint(columns), tmp_path))

    first = threading.Thread(target=load)
    first.start()
    assert started.wait(30)
    load()
    first.join()
    assert encoded == [1500, 1500]  # each language encoded once, by the first
    a, b = results
    assert all([x.tolist() for x in a[k]] == [x.tolist() for x in b[k]] for k in columns)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == [
        p.name for p in tmp_path.glob("encoded-*.npz")
    ]
