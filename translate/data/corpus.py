"""The corpus: a configured source -> one joint tokenizer -> encoded, filtered splits, keyed by
role (``train``, ``valid``, ``test``). Ids are stored without specials; the model sees one more
token on each side (EOS, or BOS), so every length for filtering and batching is ``len + 1``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from translate.data.batching import Batch, sorted_batches
from translate.data.registry import source
from translate.data.tokenizer import (
    Tokenizer,
    encode_cached,
    text_fingerprint,
    train_or_load_tokenizer,
)
from translate.errors import UserError, counted
from translate.io import make_folder
from translate.schema import DataSettings, FilterSettings

log = logging.getLogger(__name__)


@dataclass
class EncodedSplit:
    """The kept pairs of one split, in their original order."""

    name: str  # the corpus's own split name, e.g. "val" or "test_2016_flickr"
    src_text: list[str]
    tgt_text: list[str]
    src_ids: list[np.ndarray]  # 1-D int32 arrays
    tgt_ids: list[np.ndarray]
    num_raw: int = 0  # pairs before filtering
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> pairs; {} if not filtered
    filtered: bool = True  # False for roles outside data.filter.roles (kept whole for scoring)

    def __len__(self) -> int:
        return len(self.src_ids)

    def __getitem__(self, i: int) -> tuple[int, np.ndarray, np.ndarray]:
        return i, self.src_ids[i], self.tgt_ids[i]

    @property
    def src_lens(self) -> np.ndarray:  # as the model sees them: + EOS
        return np.fromiter((len(x) + 1 for x in self.src_ids), np.int64, len(self.src_ids))

    @property
    def tgt_lens(self) -> np.ndarray:  # + BOS (tgt_in) or + EOS (tgt_out)
        return np.fromiter((len(x) + 1 for x in self.tgt_ids), np.int64, len(self.tgt_ids))

    def batches(self, max_tokens: int, max_len: int | None = None) -> Iterator[Batch]:
        """Length-sorted batches (the valid/test loss) of the pairs within ``max_len`` (None:
        all), so one long line cannot exhaust the memory."""
        src_lens, tgt_lens = self.src_lens, self.tgt_lens
        kept = np.arange(len(self))
        if max_len is not None:
            kept = np.flatnonzero((src_lens <= max_len) & (tgt_lens <= max_len))
        yield from sorted_batches([self[int(i)] for i in kept], max_tokens)


@dataclass
class Corpus:
    tokenizer: Tokenizer
    tokenizer_path: str
    splits: dict[str, EncodedSplit]  # keyed by role: "train", "valid", "test"
    src_lang: str
    tgt_lang: str
    max_tokens: int = 4096  # data.max_tokens: training batch size in (padded) tokens
    eval_max_tokens: int = 8192  # data.eval_max_tokens
    eval_max_len: int | None = None  # data.eval_max_len (counts the EOS/BOS)
    # role -> text_fingerprint, stored in checkpoints: data moved elsewhere is the same text.
    fingerprints: dict[str, str] = field(default_factory=dict)


def load_corpus(data: DataSettings) -> Corpus:
    """Read, tokenize, encode (both cached) and filter every split named in ``data.splits``."""
    names, langs = data.split_names, (data.src_lang, data.tgt_lang)
    cache_dir = make_folder(data.cache_dir, "data.cache_dir")  # a bad one fails before reading
    texts = _read_texts(data, names, langs)
    if not texts["train"][data.src_lang]:
        raise UserError(f"the training split {names['train']!r} of data={data.source} has no pairs")
    prints = {role: text_fingerprint(cols) for role, cols in texts.items()}
    tok = data.tokenizer
    tokenizer, tok_path = train_or_load_tokenizer(
        lambda: (s for lang in sorted(texts["train"]) for s in texts["train"][lang]),
        cache_dir=cache_dir,
        key_parts={"source": data.source, "fingerprint": prints["train"]},
        vocab_size=tok.vocab_size,
        model_type=tok.model_type,
        character_coverage=tok.character_coverage,
        input_sentence_size=tok.input_sentence_size,
        seed=tok.seed,
    )
    splits = {}
    for role, cols in texts.items():
        ids = encode_cached(tokenizer, cols, prints[role], cache_dir)
        split = splits[role] = _kept(names[role], cols, ids, data, role in data.filter.roles)
        why = ", ".join(f"{r} {n}" for r, n in split.dropped.items()) or "not filtered"
        log.info(
            "data %s (%s): %d pairs, kept %d, dropped %d (%s)",
            role,
            split.name,
            split.num_raw,
            len(split),
            split.num_raw - len(split),
            why,
        )
        if role != "train":
            _warn_over_long(role, split, data.eval_cap)
    if not splits["train"].src_ids:
        raise UserError(
            f"data.filter dropped all {splits['train'].num_raw} training pairs "
            f"({splits['train'].dropped}); raise data.filter.max_src_len / max_tgt_len"
        )
    return Corpus(
        tokenizer,
        str(tok_path),
        splits,
        data.src_lang,
        data.tgt_lang,
        max_tokens=data.max_tokens,
        eval_max_tokens=data.eval_max_tokens,
        fingerprints=prints,
        eval_max_len=data.eval_cap,
    )


def _warn_over_long(role: str, split: EncodedSplit, cap: int | None) -> None:
    if cap is None:
        return
    over = int(((split.src_lens > cap) | (split.tgt_lens > cap)).sum())
    if over:
        log.warning(
            "data %s (%s): %d of %d pairs are longer than data.eval_max_len=%d tokens: "
            "decoding reads the first %d subwords of their sources, the dev loss leaves them out",
            role,
            split.name,
            over,
            len(split),
            cap,
            cap - 1,
        )


def _kept(name: str, cols, ids, data: DataSettings, apply_filter: bool) -> EncodedSplit:
    src_ids, tgt_ids = ids[data.src_lang], ids[data.tgt_lang]
    keep, dropped = _filter(src_ids, tgt_ids, data.filter, apply_filter)
    return EncodedSplit(
        name=name,
        src_text=[t for t, k in zip(cols[data.src_lang], keep) if k],
        tgt_text=[t for t, k in zip(cols[data.tgt_lang], keep) if k],
        src_ids=[x for x, k in zip(src_ids, keep) if k],
        tgt_ids=[x for x, k in zip(tgt_ids, keep) if k],
        num_raw=len(src_ids),
        dropped=dropped,
        filtered=apply_filter,
    )


def split_fingerprints(data: DataSettings) -> dict[str, str]:
    """``{role: text_fingerprint}`` as :func:`load_corpus` computes them, without tokenizing."""
    texts = _read_texts(data, data.split_names, (data.src_lang, data.tgt_lang))
    return {role: text_fingerprint(cols) for role, cols in texts.items()}


def load_raw_split(data: DataSettings, role: str) -> tuple[str, list[str], list[str]]:
    name = data.split_names.get(role)
    if name is None:
        raise UserError(f"data.splits.{role} is null: name the split to use")
    texts = _read_texts(data, {role: name}, (data.src_lang, data.tgt_lang))[role]
    return name, texts[data.src_lang], texts[data.tgt_lang]


def _read_texts(
    data: DataSettings, names: dict[str, str], langs: tuple[str, str]
) -> dict[str, dict[str, list[str]]]:
    unique = list(dict.fromkeys(names.values()))
    by_name = source(data.source).read(data, unique, langs)
    columns = {n: _columns(ds, langs) for n, ds in by_name.items()}
    if "train" in names:
        _check_has_text(data, names["train"], columns[names["train"]])
    for role in ("valid", "test"):
        if role in names:
            _check_has_pairs(data, role, names[role], columns[names[role]])
    return {role: columns[name] for role, name in names.items()}


def _check_has_text(data: DataSettings, name: str, columns: dict[str, list[str]]) -> None:
    for lang, lines in columns.items():  # an empty split is left to load_corpus's "no pairs"
        if lines and not any(lines):
            raise UserError(
                f"the training split {name!r} ({_where(data, name, lang)}) has no {lang} text: "
                f"all {len(lines)} lines are empty or whitespace; fill it or set "
                "data.splits.train to another split"
            )


def _check_has_pairs(data: DataSettings, role: str, name: str, columns) -> None:
    """A dev or test split with no pair to score is refused before training, not after it."""
    src, tgt = columns[data.src_lang], columns[data.tgt_lang]
    if any(s and t for s, t in zip(src, tgt)):
        return
    files = ", ".join(dict.fromkeys(_where(data, name, lang) for lang in columns))
    lines = counted(len(src), "line")
    raise UserError(
        f"the {role} split {name!r} ({files}) has no pair with text on both sides ({lines}); "
        f"fill it, or set data.splits.{role} to another split"
    )


def _where(data: DataSettings, name: str, lang: str) -> str:
    return source(data.source).describe(data, name, lang)


def _columns(ds, langs: tuple[str, str]) -> dict[str, list[str]]:
    table = ds.flatten().data
    return {
        lang: [(s or "").strip() for s in table.column(f"translation.{lang}").to_pylist()]
        for lang in langs
    }


def _filter(
    src_ids: list[np.ndarray], tgt_ids: list[np.ndarray], limits: FilterSettings, apply: bool
) -> tuple[np.ndarray, dict[str, int]]:
    """Keep mask and ``{reason: dropped}``."""
    n = len(src_ids)
    if not apply:
        return np.ones(n, bool), {}
    s = np.fromiter(map(len, src_ids), np.int64, n)
    t = np.fromiter(map(len, tgt_ids), np.int64, n)
    empty = (s == 0) | (t == 0)
    too_long = np.zeros(n, bool)
    if limits.max_src_len is not None:
        too_long |= s + 1 > limits.max_src_len
    if limits.max_tgt_len is not None:
        too_long |= t + 1 > limits.max_tgt_len
    too_long &= ~empty
    ratio = np.zeros(n, bool)
    if limits.max_len_ratio is not None:
        ratio = np.maximum(s, t) > limits.max_len_ratio * np.minimum(s, t)
        ratio &= ~empty & ~too_long
    dropped = {"empty": empty, "too_long": too_long, "ratio": ratio}
    return ~(empty | too_long | ratio), {why: int(mask.sum()) for why, mask in dropped.items()}
