"""One joint SentencePiece model for both languages, with fixed special ids, cached on disk
under a key of the data source, its training text's fingerprint and the tokenizer settings,
never the model settings: the jobs of a sweep share one file. Checkpoints embed
:attr:`Tokenizer.model_proto`, so a saved model never depends on the cache.
:func:`encode_cached` caches a split's ids the same way.

A cache file that is damaged or not what it is named for is built again and written over, with
a warning, so one bad file never fails every later run. One process at a time builds a file
(:func:`_building`): the jobs of a sweep started together wait for the first one's build
instead of each training its own (minutes at IWSLT2017's size).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import io
import itertools
import json
import logging
import os
import re
import time
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np
import sentencepiece as spm

from translate.errors import UserError
from translate.io import write

T = TypeVar("T")
# Below this many texts, one call per text: SentencePiece's batch call starts a thread pool each
# time, ~60 us on the Xeon, 20x the encoding of one short sentence (a served request's cost).
POOLED = 64

log = logging.getLogger(__name__)


class Tokenizer:
    """A SentencePiece model with ``PAD, UNK, BOS, EOS = 0, 1, 2, 3``."""

    PAD, UNK, BOS, EOS = 0, 1, 2, 3

    def __init__(self, proto: bytes):
        self._proto = bytes(proto)
        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.LoadFromSerializedProto(self._proto)
        except RuntimeError as err:
            raise UserError(f"not a SentencePiece model ({err})") from err
        ids = (self._sp.pad_id(), self._sp.unk_id(), self._sp.bos_id(), self._sp.eos_id())
        if ids != (self.PAD, self.UNK, self.BOS, self.EOS):
            raise UserError(
                f"the SentencePiece model has pad/unk/bos/eos ids {ids}, expected (0, 1, 2, 3); "
                "train it with translate.data.tokenizer.train_or_load_tokenizer"
            )

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> Tokenizer:
        path = Path(path)
        try:
            proto = path.read_bytes()
        except OSError as err:
            raise UserError(
                f"{path} cannot be read ({err.strerror or err}); check the file"
            ) from None
        try:
            return cls(proto)
        except UserError as err:
            raise UserError(f"{path}: {err}") from None

    @property
    def model_proto(self) -> bytes:
        return self._proto

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        if len(texts) < POOLED:
            return [self._sp.encode(text, out_type=int) for text in texts]
        return self._sp.encode(list(texts), out_type=int, num_threads=_threads())

    def decode(self, ids: Iterable[Iterable[int]]) -> list[str]:
        """Text of each id sequence: cut at the first EOS, PAD and BOS dropped."""
        specials, kept = (self.PAD, self.BOS), []
        for seq in ids:
            out = []
            for i in map(int, seq):
                if i == self.EOS:
                    break
                if i not in specials:
                    out.append(i)
            kept.append(out)
        if len(kept) < POOLED:
            return [self._sp.decode(seq) for seq in kept]
        return self._sp.decode(kept, num_threads=_threads())

    def pieces(self, ids: Iterable[int]) -> list[str]:
        """One label per id (``<pad>``, ``▁Haus``), for attention heatmaps."""
        return [self._sp.id_to_piece(int(i)) for i in ids]


def _threads() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


def train_or_load_tokenizer(
    train_texts: Callable[[], Iterable[str]],
    *,
    cache_dir: str | os.PathLike,
    key_parts: Mapping[str, object],
    vocab_size: int,
    model_type: str = "unigram",
    character_coverage: float = 1.0,
    input_sentence_size: int = 0,
    seed: int = 0,
) -> tuple[Tokenizer, Path]:
    """The cached model for ``key_parts`` (what the data is) and the settings, or one trained on
    ``train_texts()``; and its path. ``input_sentence_size > 0``: a seeded sample."""
    if model_type not in ("unigram", "bpe"):
        raise UserError(f"data.tokenizer.model_type must be unigram or bpe, not {model_type!r}")
    settings = {
        "vocab_size": int(vocab_size),
        "model_type": model_type,
        "character_coverage": float(character_coverage),
        "input_sentence_size": int(input_sentence_size),
        "seed": int(seed),
    }
    blob = json.dumps({"data": dict(key_parts), "settings": settings}, sort_keys=True)
    key = hashlib.sha256(blob.encode()).hexdigest()
    name = str(key_parts.get("source", "data"))
    path = Path(cache_dir) / f"spm-{name}-{model_type}{vocab_size}-{key[:16]}.model"

    def train() -> Tokenizer:
        log.info(
            "tokenizer: training SentencePiece %s, vocab %d -> %s", model_type, vocab_size, path
        )
        proto = _train(train_texts(), settings)
        write(path, proto, "tokenizer cache", adopt=True)  # a path named by its key
        return Tokenizer(proto)

    load = functools.partial(_load_cached, path, settings["vocab_size"])
    unusable = "tokenizer: unusable cache file (%s); training it again"
    return _built_once(path, load, train, unusable), path


def _built_once(
    path: Path, load: Callable[[], tuple[T | None, str]], build: Callable[[], T], *warning
) -> T:
    """What ``load()`` (``(value, why not)``) finds cached at ``path``, else what ``build()``
    writes there; looked up again under the lock (another process may have built it), where an
    unusable file is logged (``warning``'s format and arguments, then why)."""
    found = load()[0] if path.is_file() else None
    if found is not None:
        return found
    with _building(path):
        found, why = load() if path.is_file() else (None, "")
        if found is None and why:
            log.warning(*warning, why)
        return build() if found is None else found


@contextlib.contextmanager
def _building(path: Path) -> Iterator[None]:
    """An exclusive lock on building ``path`` (``.<name>.lock``, removed on release). Where the
    file system has no locks (or is read-only) it builds without one: correct, if twice."""
    lock = path.with_name(f".{path.name}.lock")
    start, fd = time.perf_counter(), None
    try:
        fd = _lock(lock)
    except OSError as err:
        log.debug("tokenizer: building %s without a lock (%s)", path, err)
    if fd is None:
        yield
        return
    waited = time.perf_counter() - start
    if waited > 1:
        log.info("tokenizer: waited %.1f s for another process building %s", waited, path)
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)
        os.close(fd)  # closing releases the flock


def _lock(lock: Path) -> int:
    """A descriptor holding the flock on ``lock``. The holder removes the file on release, so
    a lock taken on a file that is no longer there is dropped and taken again on the new one
    (otherwise two processes could each hold a lock, one on the removed file)."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_ino == os.stat(lock).st_ino:
                return fd
        except FileNotFoundError:
            pass  # removed by its holder between our open and our check
        except OSError:
            os.close(fd)
            raise
        os.close(fd)


def _load_cached(path: Path, vocab_size: int) -> tuple[Tokenizer | None, str]:
    try:
        tokenizer = Tokenizer.from_file(path)
    except UserError as err:
        return None, str(err)
    if tokenizer.vocab_size != vocab_size:
        return None, f"{path} has vocab size {tokenizer.vocab_size}, expected {vocab_size}"
    log.info("tokenizer: reusing %s", path)
    return tokenizer, ""


def _train(texts: Iterable[str], settings: Mapping[str, object]) -> bytes:
    model = io.BytesIO()
    spm.set_random_generator_seed(int(settings["seed"]))
    size = int(settings["input_sentence_size"])
    sentences = (t for t in texts if t and not t.isspace())
    first = next(sentences, None)
    if first is None:  # SentencePiece would stop with an INTERNAL error
        raise UserError(
            "the training split has no text to train the tokenizer on (every line is empty or "
            "whitespace); check the training files or data.splits.train"
        )
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=itertools.chain([first], sentences),
            model_writer=model,
            vocab_size=int(settings["vocab_size"]),
            model_type=str(settings["model_type"]),
            character_coverage=float(settings["character_coverage"]),
            input_sentence_size=size,
            shuffle_input_sentence=size > 0,
            pad_id=Tokenizer.PAD,
            unk_id=Tokenizer.UNK,
            bos_id=Tokenizer.BOS,
            eos_id=Tokenizer.EOS,
            num_threads=_threads(),
            minloglevel=2,
        )
    except RuntimeError as err:
        too_high = re.search(r"size (?:is )?too high \((\d+)\).*?<= (\d+)", str(err))
        if too_high:
            raise UserError(
                f"data.tokenizer.vocab_size={too_high[1]} is too large for this training data; "
                f"set it to at most {too_high[2]}"
            ) from err
        too_low = re.search(r"smaller than required_chars\. (\d+) vs (\d+)", str(err))
        if too_low:
            raise UserError(
                f"data.tokenizer.vocab_size={too_low[1]} is too small for the characters of this "
                f"training data and the special pieces; set it to at least {too_low[2]} (or "
                "lower data.tokenizer.character_coverage)"
            ) from err
        msg = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        raise UserError(f"SentencePiece training failed: {msg} (see data.tokenizer.*)") from err
    return model.getvalue()


def text_fingerprint(columns: Mapping[str, Sequence[str]]) -> str:
    """sha256 of the text (languages sorted, so de->en and en->de share it)."""
    digest = hashlib.sha256()
    for lang in sorted(columns):
        digest.update(f"{lang}\0{len(columns[lang])}\0".encode())
        digest.update("\n".join(columns[lang]).encode())
    return digest.hexdigest()


def encode_cached(
    tokenizer: Tokenizer, columns: Mapping[str, list[str]], fingerprint: str, cache_dir: Path
) -> dict[str, list[np.ndarray]]:
    """Ids of every sentence, cached by tokenizer and text. The file holds its full key, checked on
    load: one copied over another split's name would otherwise train on the wrong pairs."""
    model_hash = hashlib.sha256(tokenizer.model_proto).hexdigest()
    key = hashlib.sha256(f"{model_hash}:{fingerprint}".encode()).hexdigest()
    path = cache_dir / f"encoded-{key[:24]}.npz"
    arrays = _built_once(
        path,
        functools.partial(_load_encoded, path, key, columns),
        functools.partial(_encode_all, tokenizer, columns, key, path),
        "tokenizer: cache file %s is unusable (%s); encoding it again",
        path,
    )
    return {
        lang: np.split(arrays[f"{lang}.ids"], arrays[f"{lang}.offsets"][1:-1]) for lang in columns
    }


def _encode_all(
    tokenizer: Tokenizer, columns: Mapping[str, list[str]], key: str, path: Path
) -> dict[str, np.ndarray]:
    pairs = len(next(iter(columns.values()), []))
    log.info("tokenizer: encoding %s sentence pairs -> %s", f"{pairs:,}", path)
    arrays = {"key": np.array(key)}
    for lang, texts in columns.items():
        ids = tokenizer.encode(texts)
        arrays[f"{lang}.offsets"] = np.cumsum([0] + [len(x) for x in ids], dtype=np.int64)
        arrays[f"{lang}.ids"] = np.fromiter(itertools.chain.from_iterable(ids), np.int32)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    write(path, buffer.getvalue(), "encoded cache", adopt=True)  # named by its key
    return arrays


def _load_encoded(
    path: Path, key: str, columns: Mapping[str, list[str]]
) -> tuple[dict[str, np.ndarray] | None, str]:
    """``(arrays, "")`` if ``path`` holds ``columns``' ids for ``key``, else ``(None, why)``."""
    try:
        with np.load(path) as stored:
            arrays = {name: stored[name] for name in stored.files}
    except (OSError, EOFError, ValueError, zipfile.BadZipFile) as err:
        return None, f"unreadable: {type(err).__name__}: {err}"
    if "key" not in arrays or str(arrays["key"]) != key:
        return None, "it was made from other text or with another tokenizer"
    for lang, texts in columns.items():
        offsets, ids = arrays.get(f"{lang}.offsets"), arrays.get(f"{lang}.ids")
        if offsets is None or ids is None or len(offsets) != len(texts) + 1:
            return None, f"it does not hold the ids of the {len(texts)} {lang} sentences"
        if offsets[0] != 0 or offsets[-1] != len(ids):
            return None, f"its {lang} offsets do not span its {len(ids)} ids"
    return arrays, ""
