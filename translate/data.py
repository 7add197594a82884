"""The data pipeline: a configured source -> one joint tokenizer -> encoded, filtered splits ->
token-count batches.

:func:`load_corpus` is the only place that reads the ``data`` config. It returns a
:class:`Corpus` whose splits are keyed by role (``train``, ``valid``, ``test``). Ids are stored
without specials; the model sees the source with EOS appended and the target as
``tgt_in = [BOS] + tgt`` / ``tgt_out = tgt + [EOS]``, so every length used for filtering and
batching is ``len(ids) + 1`` (:attr:`EncodedSplit.src_lens`, :attr:`EncodedSplit.tgt_lens`).

Run ``python -m translate.data data=<source> [overrides]`` to check a corpus before training.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from translate import sources
from translate.errors import UserError, exit_on_user_error
from translate.tokenizer import Tokenizer, encode_cached, text_fingerprint, train_or_load_tokenizer

log = logging.getLogger(__name__)

ROLES = ("train", "valid", "test")
SOURCES = ("iwslt2017", "multi30k", "jsonl", "sample")


@dataclass
class EncodedSplit:
    """The kept pairs of one split, in their original order; ids without BOS/EOS."""

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
        """``(i, src_ids, tgt_ids)``: the example :func:`collate` takes (a map-style dataset)."""
        return i, self.src_ids[i], self.tgt_ids[i]

    @property
    def src_lens(self) -> np.ndarray:
        """Source lengths as the model sees them: subwords + EOS."""
        return np.fromiter((len(x) + 1 for x in self.src_ids), np.int64, len(self.src_ids))

    @property
    def tgt_lens(self) -> np.ndarray:
        """Target lengths as the model sees them: subwords + BOS (tgt_in) or + EOS (tgt_out)."""
        return np.fromiter((len(x) + 1 for x in self.tgt_ids), np.int64, len(self.tgt_ids))

    def batches(self, max_tokens: int) -> Iterator[Batch]:
        """Padded batches in the split's order (for loss on valid/test)."""
        return iter(make_loader(self, max_tokens, shuffle=False))


@dataclass
class Corpus:
    tokenizer: Tokenizer
    tokenizer_path: str
    splits: dict[str, EncodedSplit]  # keyed by role: "train", "valid", "test"
    src_lang: str
    tgt_lang: str
    max_tokens: int = 4096  # data.max_tokens: training batch size in (padded) tokens
    eval_max_tokens: int = 8192  # data.eval_max_tokens
    max_src_len: int | None = None  # data.filter.max_src_len (counts the EOS)
    max_tgt_len: int | None = None  # data.filter.max_tgt_len (counts the BOS/EOS)


# ------------------------------------------------------------------------ loading


def load_corpus(data_cfg: DictConfig | Mapping) -> Corpus:
    """Read, tokenize (training or reusing the cached SentencePiece model), encode (cached) and
    filter every split named in ``data_cfg.splits``; logs kept/dropped counts per split."""
    cfg, source, src_lang, tgt_lang, names = _settings(data_cfg)
    if "train" not in names:
        raise UserError("data.splits.train must name the training split")

    texts = _read_texts(cfg, source, names, (src_lang, tgt_lang))
    if not texts["train"][src_lang]:
        raise UserError(f"the training split {names['train']!r} of data={source} has no pairs")
    prints = {role: text_fingerprint(cols) for role, cols in texts.items()}

    cache_dir = Path(str(cfg.cache_dir))
    tok = cfg.tokenizer
    tokenizer, tok_path = train_or_load_tokenizer(
        lambda: (s for lang in sorted(texts["train"]) for s in texts["train"][lang]),
        cache_dir=cache_dir,
        key_parts={"source": source, "fingerprint": prints["train"]},
        vocab_size=int(tok.vocab_size),
        model_type=str(tok.model_type),
        character_coverage=float(tok.character_coverage),
        input_sentence_size=int(tok.input_sentence_size),
        seed=int(tok.seed),
    )

    limits = cfg.filter
    filter_roles = {str(r) for r in limits.roles}
    splits = {}
    for role, cols in texts.items():
        ids = encode_cached(tokenizer, cols, prints[role], cache_dir)
        src_ids, tgt_ids = ids[src_lang], ids[tgt_lang]
        keep, dropped = _filter(src_ids, tgt_ids, limits, apply=role in filter_roles)
        split = EncodedSplit(
            name=names[role],
            src_text=[t for t, k in zip(cols[src_lang], keep) if k],
            tgt_text=[t for t, k in zip(cols[tgt_lang], keep) if k],
            src_ids=[x for x, k in zip(src_ids, keep) if k],
            tgt_ids=[x for x, k in zip(tgt_ids, keep) if k],
            num_raw=len(src_ids),
            dropped=dropped,
            filtered=role in filter_roles,
        )
        why = ", ".join(f"{r} {n}" for r, n in dropped.items()) or "not filtered"
        log.info(
            "data %s (%s): %d pairs, kept %d, dropped %d (%s)",
            role,
            split.name,
            split.num_raw,
            len(split),
            split.num_raw - len(split),
            why,
        )
        splits[role] = split
    if not splits["train"].src_ids:
        raise UserError(
            f"data.filter dropped all {splits['train'].num_raw} training pairs "
            f"({splits['train'].dropped}); raise data.filter.max_src_len / max_tgt_len"
        )
    return Corpus(
        tokenizer,
        str(tok_path),
        splits,
        src_lang,
        tgt_lang,
        max_tokens=int(cfg.max_tokens),
        eval_max_tokens=int(cfg.eval_max_tokens),
        max_src_len=_optional_int(limits.max_src_len),
        max_tgt_len=_optional_int(limits.max_tgt_len),
    )


def _optional_int(value) -> int | None:
    return None if value is None else int(value)


def load_raw_test(data_cfg: DictConfig | Mapping) -> tuple[str, list[str], list[str]]:
    """The test split's name, sources and references as read (unfiltered, no tokenizer)."""
    cfg, source, src_lang, tgt_lang, names = _settings(data_cfg)
    if "test" not in names:
        raise UserError("data.splits.test is null: name the split to score")
    texts = _read_texts(cfg, source, {"test": names["test"]}, (src_lang, tgt_lang))["test"]
    return names["test"], texts[src_lang], texts[tgt_lang]


def _settings(data_cfg: DictConfig | Mapping):
    """The config, source, languages and ``{role: split name}``, checked."""
    cfg = data_cfg if isinstance(data_cfg, DictConfig) else OmegaConf.create(dict(data_cfg))
    source, src_lang, tgt_lang = str(cfg.source), str(cfg.src_lang), str(cfg.tgt_lang)
    if source not in SOURCES:
        raise UserError(f"data.source={source!r} is not one of {', '.join(SOURCES)}")
    if src_lang == tgt_lang:
        raise UserError(f"data.src_lang and data.tgt_lang are both {src_lang!r}")
    names = {str(role): str(name) for role, name in cfg.splits.items() if name is not None}
    unknown = sorted(set(names) - set(ROLES))
    if unknown:
        raise UserError(f"data.splits has unknown roles {unknown}; use {', '.join(ROLES)}")
    _check_batch_sizes(cfg)
    return cfg, source, src_lang, tgt_lang, names


def _check_batch_sizes(cfg: DictConfig) -> None:
    """Every allowed training pair must fit in one batch; say so before any data is read."""
    for key in ("max_tokens", "eval_max_tokens"):
        if int(cfg[key]) < 1:
            raise UserError(f"data.{key}={cfg[key]} must be > 0")
    for side in ("max_src_len", "max_tgt_len"):
        limit = cfg.filter.get(side)
        if limit is not None and int(cfg.max_tokens) < int(limit):
            raise UserError(
                f"data.max_tokens={cfg.max_tokens} is smaller than the longest allowed sentence "
                f"(data.filter.{side}={limit}); raise data.max_tokens or lower data.filter.{side}"
            )


def _read_texts(
    cfg: DictConfig, source: str, names: dict[str, str], langs: tuple[str, str]
) -> dict[str, dict[str, list[str]]]:
    """``{role: {lang: sentences}}``, each distinct split read once."""
    unique = list(dict.fromkeys(names.values()))
    if source == "iwslt2017" and cfg.get("path") is None:
        hub = cfg.hub
        base = f"hf://datasets/{hub.repo}@{hub.revision}/{hub.config}"
        by_name = sources.load_iwslt_hub({n: f"{base}/{n}/{hub.file}" for n in unique}, langs)
    elif source == "iwslt2017":
        release = sources.IwsltRelease(_path(cfg, "path"), pair=str(cfg.pair))
        by_name = {n: release.split(n, langs) for n in unique}
    else:
        if source == "sample" and cfg.get("dir") is None:
            folder = sources.sample_dir()
        else:
            folder = _path(cfg, "dir")
        read = sources.read_jsonl if source == "jsonl" else sources.read_text_pair
        by_name = {n: read(folder, n, langs) for n in unique}
    columns = {n: _columns(ds, langs) for n, ds in by_name.items()}
    return {role: columns[name] for role, name in names.items()}


def _path(cfg: DictConfig, key: str) -> Path:
    if OmegaConf.is_missing(cfg, key) or cfg.get(key) is None:
        raise UserError(f"data.{key} is not set: add data.{key}=<path> to the command")
    return Path(os.path.expanduser(str(cfg[key])))


def _columns(ds, langs: tuple[str, str]) -> dict[str, list[str]]:
    table = ds.flatten().data
    return {
        lang: [(s or "").strip() for s in table.column(f"translation.{lang}").to_pylist()]
        for lang in langs
    }


def _filter(
    src_ids: list[np.ndarray], tgt_ids: list[np.ndarray], limits: DictConfig, apply: bool
) -> tuple[np.ndarray, dict[str, int]]:
    """Keep mask and ``{reason: dropped}``: empty side, too long (with EOS/BOS), length ratio."""
    n = len(src_ids)
    if not apply:
        return np.ones(n, bool), {}
    s = np.fromiter(map(len, src_ids), np.int64, n)
    t = np.fromiter(map(len, tgt_ids), np.int64, n)
    empty = (s == 0) | (t == 0)
    too_long = np.zeros(n, bool)
    if limits.max_src_len is not None:
        too_long |= s + 1 > int(limits.max_src_len)
    if limits.max_tgt_len is not None:
        too_long |= t + 1 > int(limits.max_tgt_len)
    too_long &= ~empty
    ratio = np.zeros(n, bool)
    if limits.max_len_ratio is not None:
        ratio = np.maximum(s, t) > float(limits.max_len_ratio) * np.minimum(s, t)
        ratio &= ~empty & ~too_long
    dropped = {
        "empty": int(empty.sum()),
        "too_long": int(too_long.sum()),
        "ratio": int(ratio.sum()),
    }
    return ~(empty | too_long | ratio), dropped


# ------------------------------------------------------------------------ batching


class TokenBatchSampler(torch.utils.data.Sampler[list[int]]):
    """Batches of indices whose padded size, ``len(batch) * max(len)``, stays within
    ``max_tokens`` for source and target alike.

    ``shuffle=True``: indices sorted by length (target, then source) with ties broken at random,
    cut into batches, and the batches shuffled, all from ``(seed, epoch)``; call
    :meth:`set_epoch` each epoch. ``shuffle=False``: consecutive batches in the original order.
    Lengths are as the model sees them (:attr:`EncodedSplit.src_lens`).
    """

    def __init__(self, src_lens, tgt_lens, max_tokens: int, shuffle: bool, seed: int = 0):
        self.src_lens = np.asarray(src_lens, dtype=np.int64)
        self.tgt_lens = np.asarray(tgt_lens, dtype=np.int64)
        if self.src_lens.shape != self.tgt_lens.shape:
            raise ValueError("src_lens and tgt_lens differ in length")
        self.max_tokens, self.shuffle, self.seed = int(max_tokens), shuffle, int(seed)
        self.epoch = 0
        longest = np.maximum(self.src_lens, self.tgt_lens)
        if len(longest) and longest.max() > self.max_tokens:
            i = int(longest.argmax())
            raise UserError(
                f"pair {i} is {longest[i]} tokens long, more than max_tokens={self.max_tokens}; "
                "raise data.max_tokens / data.eval_max_tokens or lower data.filter.max_*_len"
            )
        self._cached: tuple[int, list[list[int]]] | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def _batches(self) -> list[list[int]]:
        if self._cached is not None and self._cached[0] == self.epoch:
            return self._cached[1]
        if self.shuffle:
            rng = np.random.default_rng([self.seed, self.epoch])
            perm = rng.permutation(len(self.src_lens))
            order = perm[np.lexsort((self.src_lens[perm], self.tgt_lens[perm]))]
        else:
            order = np.arange(len(self.src_lens))
        batches, batch, max_src, max_tgt = [], [], 0, 0
        for i in order.tolist():
            s, t = max(max_src, self.src_lens[i]), max(max_tgt, self.tgt_lens[i])
            if batch and (len(batch) + 1) * max(s, t) > self.max_tokens:
                batches.append(batch)
                batch, s, t = [], self.src_lens[i], self.tgt_lens[i]
            batch.append(i)
            max_src, max_tgt = s, t
        if batch:
            batches.append(batch)
        if self.shuffle:
            rng.shuffle(batches)
        self._cached = (self.epoch, batches)
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self._batches())

    def __len__(self) -> int:
        return len(self._batches())


@dataclass
class Batch:
    src: torch.Tensor  # (B, S) long: subwords + EOS, PAD after
    src_padding_mask: torch.Tensor  # (B, S) bool, True at PAD
    tgt_in: torch.Tensor  # (B, T) long: BOS + subwords, PAD after
    tgt_out: torch.Tensor  # (B, T) long: subwords + EOS, PAD after
    indices: list[int]  # positions in the split, to restore its order
    num_src_tokens: int  # non-PAD tokens in src
    num_tgt_tokens: int  # non-PAD tokens in tgt_out (what the loss counts)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        move = {"device": device, "non_blocking": non_blocking}
        return Batch(
            self.src.to(**move),
            self.src_padding_mask.to(**move),
            self.tgt_in.to(**move),
            self.tgt_out.to(**move),
            self.indices,
            self.num_src_tokens,
            self.num_tgt_tokens,
        )


def collate(
    examples: Sequence[tuple[int, Sequence[int], Sequence[int]]],
    pad_id: int = Tokenizer.PAD,
    bos_id: int = Tokenizer.BOS,
    eos_id: int = Tokenizer.EOS,
) -> Batch:
    """``[(index, src_ids, tgt_ids), ...]`` (ids without specials) -> a padded :class:`Batch`."""
    B = len(examples)
    S = max(len(src) for _, src, _ in examples) + 1
    T = max(len(tgt) for _, _, tgt in examples) + 1
    src = torch.full((B, S), pad_id, dtype=torch.long)
    tgt_in = torch.full((B, T), pad_id, dtype=torch.long)
    tgt_out = torch.full((B, T), pad_id, dtype=torch.long)
    for row, (_, s, t) in enumerate(examples):
        s, t = torch.as_tensor(np.asarray(s, np.int64)), torch.as_tensor(np.asarray(t, np.int64))
        src[row, : len(s)], src[row, len(s)] = s, eos_id
        tgt_in[row, 0], tgt_in[row, 1 : len(t) + 1] = bos_id, t
        tgt_out[row, : len(t)], tgt_out[row, len(t)] = t, eos_id
    mask = src == pad_id
    return Batch(
        src=src,
        src_padding_mask=mask,
        tgt_in=tgt_in,
        tgt_out=tgt_out,
        indices=[int(i) for i, _, _ in examples],
        num_src_tokens=int((~mask).sum()),
        num_tgt_tokens=int((tgt_out != pad_id).sum()),
    )


def make_loader(
    split: EncodedSplit, max_tokens: int, shuffle: bool, seed: int = 0, num_workers: int = 0
) -> torch.utils.data.DataLoader:
    """A DataLoader of :class:`Batch`; call ``loader.batch_sampler.set_epoch(e)`` per epoch."""
    sampler = TokenBatchSampler(split.src_lens, split.tgt_lens, max_tokens, shuffle, seed)
    return torch.utils.data.DataLoader(
        split, batch_sampler=sampler, collate_fn=collate, num_workers=num_workers
    )


# ------------------------------------------------------------------------ inspection


def describe(corpus: Corpus, data_cfg: DictConfig, seconds: float | None = None) -> str:
    """The report of ``python -m translate.data``: pairs, kept, dropped and length statistics."""
    tok = corpus.tokenizer
    lines = [
        f"data={data_cfg.source}  {corpus.src_lang} -> {corpus.tgt_lang}"
        + (f"  (loaded in {seconds:.1f}s)" if seconds is not None else ""),
        f"tokenizer: {corpus.tokenizer_path}  ({data_cfg.tokenizer.model_type}, "
        f"{tok.vocab_size} pieces)",
        "lengths: subword tokens of the kept pairs, without EOS/BOS: mean / p50 / p95 / max",
        f"{'role':<6} {'split':<18} {'pairs':>8} {'kept':>8} {'dropped':>8}  "
        f"{'src length':<24} {'tgt length':<24}",
    ]
    for role, split in corpus.splits.items():
        lines.append(
            f"{role:<6} {split.name:<18} {split.num_raw:>8} {len(split):>8} "
            f"{split.num_raw - len(split):>8}  {_stats(split.src_lens - 1):<24} "
            f"{_stats(split.tgt_lens - 1):<24}"
        )
        if split.filtered:
            why = ", ".join(f"{reason} {n}" for reason, n in split.dropped.items())
            lines.append(f"{'':<6} dropped: {why}")
        else:
            limits = data_cfg.filter
            over = int(
                (split.src_lens > (limits.max_src_len or np.inf)).sum()
                + (split.tgt_lens > (limits.max_tgt_len or np.inf)).sum()
            )
            lines.append(f"{'':<6} not filtered (data.filter.roles); sides over max_*_len: {over}")
    return "\n".join(lines)


def _stats(lengths: np.ndarray) -> str:
    if len(lengths) == 0:
        return "-"
    p50, p95 = np.percentile(lengths, [50, 95], method="higher")
    return f"{lengths.mean():.1f} / {p50} / {p95} / {lengths.max()}"


def _main(cfg: DictConfig) -> None:
    start = time.perf_counter()
    corpus = load_corpus(cfg.data)
    print(describe(corpus, cfg.data, time.perf_counter() - start))


if __name__ == "__main__":
    import hydra

    hydra.main(version_base="1.3", config_path="../conf", config_name="inspect_data")(
        exit_on_user_error(_main)
    )()
