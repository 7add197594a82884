"""The ``data`` group: where the text comes from, its tokenizer, its filter and its batches
(the sources are :mod:`translate.data.registry`'s, checked by :mod:`translate.settings`)."""

from __future__ import annotations

from dataclasses import dataclass

from translate.errors import UserError, choice
from translate.nn.config import doc, non_negative, positive

ROLES = ("train", "valid", "test")


@dataclass(frozen=True)
class TokenizerSettings:
    vocab_size: int = doc(
        "size of the joint SentencePiece vocabulary of both languages", "subwords", check=positive
    )
    model_type: str = doc("the SentencePiece model", "name", "unigram | bpe")
    character_coverage: float = doc(
        "share of the training text's characters the vocabulary covers (the rarest others "
        "become <unk>)",
        "fraction",
        "(0, 1]",
    )
    input_sentence_size: int = doc(
        "train the tokenizer on a seeded sample of this many sentences",
        "sentences",
        "; 0 = all",
        check=non_negative,
    )
    seed: int = doc("seed of that sample", "seed", "any integer")

    def validate(self) -> None:
        choice("data.tokenizer.model_type", self.model_type, ("unigram", "bpe"))


@dataclass(frozen=True)
class FilterSettings:
    max_src_len: int | None = doc(
        "drop pairs whose source is longer (with its EOS)",
        "tokens",
        "; null = no limit",
        check=positive,
    )
    max_tgt_len: int | None = doc(
        "drop pairs whose target is longer (with its BOS or EOS)",
        "tokens",
        "; null = no limit",
        check=positive,
    )
    max_len_ratio: float | None = doc(
        "drop pairs where one side has more than this many times the other's subwords",
        "ratio",
        "; null = no limit",
        check=positive,
    )
    roles: list = doc(
        "the roles filtered; the others are kept whole so that BLEU covers every sentence",
        "roles",
        "a list of train, valid, test",
    )


@dataclass(frozen=True)
class HubSettings:
    repo: str = doc("the Hugging Face dataset repository", "name", "owner/name")
    revision: str = doc(
        "revision of the Parquet export: hf://datasets/{repo}@{revision}/{config}/{split}/{file}",
        "git revision",
        "a branch, tag or commit",
    )
    config: str = doc("the dataset config of the Parquet export", "name", "a folder of it")
    file: str = doc("the Parquet file of each split", "file name", "a file in each split's folder")
    archive: str | None = doc(
        "the release archive in the same repository, read when the Parquet export is missing "
        "or incomplete",
        "path in the repository",
        "null = no fallback",
    )
    archive_revision: str | None = doc(
        "revision of that archive", "git revision", "a branch, tag or commit"
    )


@dataclass(frozen=True)
class DataSettings:
    source: str = doc(
        "where the text comes from (data=<source> picks its config)",
        "name",
        "a source of translate/data/registry.py",
    )
    src_lang: str = doc("the language translated from", "language code", "e.g. de")
    tgt_lang: str = doc("the language translated into", "language code", "not src_lang")
    splits: dict = doc(
        "the split each role reads",
        "split names",
        "train, valid, test -> a name; null leaves a role out",
    )
    cache_dir: str = doc(
        "where tokenizers and encoded splits are cached", "folder", "a path", mechanics=True
    )
    tokenizer: TokenizerSettings = doc("the joint SentencePiece tokenizer")
    filter: FilterSettings = doc("which training pairs are dropped, in subword tokens")
    max_tokens: int = doc(
        "training batch size, padded tokens per side",
        "tokens",
        ", >= data.filter.max_src_len and max_tgt_len",
        check=positive,
    )
    eval_max_tokens: int = doc(
        "batch size of validation, test and decoding, padded tokens per side",
        "tokens",
        ", >= data.eval_max_len",
        check=positive,
    )
    dir: str | None = doc(
        "multi30k, jsonl, sample: the folder of split files",
        "folder",
        "a path; null (sample only) = the corpus in the package",
        default=None,
    )
    path: str | None = doc(
        "iwslt2017: the release archive (.tgz or .zip) or the folder it extracts to",
        "path",
        "null = the Hugging Face hub (data.hub)",
        default=None,
    )
    pair: str = doc(
        "iwslt2017: the language pair in the release's file names",
        "pair",
        "e.g. de-en",
        default="de-en",
    )
    hub: HubSettings | None = doc("iwslt2017: where the hub keeps the corpus", default=None)
    # None only in the data config of a checkpoint written before the key existed.
    eval_max_len: int | None = doc(
        "the longest sentence validation, test, evaluate and translate feed the model: longer "
        "sources are cut, longer pairs left out of the dev loss",
        "tokens (with EOS or BOS)",
        check=positive,
        default=None,
    )

    @property
    def eval_cap(self) -> int | None:
        """``eval_max_len``, or for an older checkpoint's config the training filter's
        ``max_src_len`` it was evaluated with then."""
        return self.filter.max_src_len if self.eval_max_len is None else self.eval_max_len

    def validate(self) -> None:
        if self.src_lang == self.tgt_lang:
            raise UserError(f"data.src_lang and data.tgt_lang are both {self.src_lang!r}")
        unknown = sorted(set(self.splits) - set(ROLES))
        if unknown:
            raise UserError(f"data.splits has unknown roles {unknown}; use {', '.join(ROLES)}")
        if self.splits.get("train") is None:
            raise UserError("data.splits.train must name the training split")
        if self.eval_max_len is not None and self.eval_max_tokens < self.eval_max_len:
            raise UserError(
                f"data.eval_max_tokens={self.eval_max_tokens} is smaller than the longest "
                f"sentence evaluation feeds the model (data.eval_max_len={self.eval_max_len}); "
                "raise data.eval_max_tokens or lower data.eval_max_len"
            )
        for side in ("max_src_len", "max_tgt_len"):
            limit = getattr(self.filter, side)
            if limit is not None and self.max_tokens < limit:
                raise UserError(
                    f"data.max_tokens={self.max_tokens} is smaller than the longest allowed "
                    f"sentence (data.filter.{side}={limit}); raise data.max_tokens or lower "
                    f"data.filter.{side}"
                )

    @property
    def split_names(self) -> dict[str, str]:
        """``{role: split name}`` of the roles in use."""
        return {str(r): str(n) for r, n in self.splits.items() if n is not None}
