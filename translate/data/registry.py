"""The data sources by name (``data=<name>``), in one table: a new source is one reader, one
entry in :data:`SOURCES` and one ``conf/data/<name>.yaml`` (docs/extending.md)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from translate.data import iwslt
from translate.data.sources import find_file, read_jsonl, read_text_pair, sample_dir
from translate.errors import UserError
from translate.schema import DataSettings

if TYPE_CHECKING:
    import datasets

Langs = tuple[str, str]
# (data, split names, (src, tgt)) -> {split name: Dataset}, each split read once.
Reader = Callable[[DataSettings, list[str], Langs], "dict[str, datasets.Dataset]"]


@dataclass(frozen=True)
class Source:
    read: Reader
    # (data, split name, lang) -> where that side is read from, for messages (None: the source).
    where: Callable[[DataSettings, str, str], str] | None = None
    origin: str = ""  # where the data set comes from, told when its folder is not given or found
    # The keys of other sources this one does not read: set, they would be ignored.
    unread: tuple[str, ...] = ("path", "hub")

    def check(self, data: DataSettings) -> None:
        for key in self.unread:
            if getattr(data, key) is not None:
                raise UserError(
                    f"data={data.source} does not read data.{key}: leave it out, or pick the "
                    f"source that does (data.{key} is for {', '.join(readers(key))})"
                )

    def describe(self, data: DataSettings, name: str, lang: str) -> str:
        return f"data={data.source}" if self.where is None else self.where(data, name, lang)


def data_path(value: str | None, key: str) -> Path:
    if value is None:
        raise UserError(f"data.{key} is not set: add data.{key}=<path> to the command")
    return Path(os.path.expanduser(value))


def in_folder(
    read_split: Callable[[Path, str, Langs], datasets.Dataset],
    file_name: str,
    default: Callable[[], Path] | None = None,
    origin: str = "",
) -> Source:
    """Files in ``data.dir`` (``default()`` when null); ``file_name`` (with ``{split}`` and
    ``{lang}``) names one side's file in messages."""

    def folder(data: DataSettings, names: list[str], langs: Langs) -> Path:
        where = default() if data.dir is None and default else data_path(data.dir, "dir")
        if not where.is_dir():
            what = "is not a folder" if where.exists() else "does not exist"
            files = [file_name.format(split=n, lang=lang) for n in names for lang in langs]
            held = f"it must hold {', '.join(dict.fromkeys(files))} (each may be .gz)"
            raise UserError(f"data folder {where} {what}; {held}{origin}")
        return where

    def read(data: DataSettings, names: list[str], langs: Langs) -> dict[str, datasets.Dataset]:
        where = folder(data, names, langs)
        return {name: read_split(where, name, langs) for name in names}

    def where(data: DataSettings, name: str, lang: str) -> str:
        path = folder(data, [name], (lang,))
        return str(find_file(path, file_name.format(split=name, lang=lang)))

    return Source(read, where, origin)


def read_iwslt(data: DataSettings, names: list[str], langs: Langs) -> dict[str, datasets.Dataset]:
    if data.path is not None:
        release = iwslt.IwsltRelease(data_path(data.path, "path"), pair=data.pair)
        return {name: release.split(name, langs) for name in names}
    if data.hub is None:
        raise UserError("data=iwslt2017 needs data.hub.* or data.path=<release archive>")
    return iwslt.load_iwslt_hub(data.hub, names, langs, pair=data.pair)


def iwslt_where(data: DataSettings, name: str, lang: str) -> str:
    return f"data.path={data.path}" if data.path else f"hub {data.hub.repo}"


MULTI30K_ORIGIN = (
    "; Multi30k comes from its official repository, https://github.com/multi30k/dataset "
    "(the files of data/task1/raw/)"
)
SOURCES: dict[str, Source] = {
    "iwslt2017": Source(read_iwslt, iwslt_where, unread=("dir",)),
    "multi30k": in_folder(read_text_pair, "{split}.{lang}", origin=MULTI30K_ORIGIN),
    "jsonl": in_folder(read_jsonl, "{split}.jsonl"),
    "sample": in_folder(read_text_pair, "{split}.{lang}", default=sample_dir),
}


def readers(key: str) -> list[str]:
    """The sources that read ``data.<key>``."""
    return [name for name, src in SOURCES.items() if key not in src.unread]


def source(name: str) -> Source:
    if name not in SOURCES:
        raise UserError(f"data.source={name} is unknown; choose one of {', '.join(SOURCES)}")
    return SOURCES[name]
