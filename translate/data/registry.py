"""The data sources by name: what ``data.source`` (``data=<name>``) reads, in one table.

A new source is one reader, one entry in :data:`SOURCES` and one ``conf/data/<name>.yaml``
that sets ``source: <name>``. A reader takes the typed ``data`` settings, the split names to
read and the language pair, and returns ``{split name: datasets.Dataset}`` of translation
records (:func:`translate.data.sources.make_dataset`); a source of one file set per split in
``data.dir`` is :func:`in_folder` around a function that reads one split. :func:`source` is the
one lookup: the settings reader checks ``data.source`` with it before any work, the corpus
reads through it.
"""

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
    # (data, split name, lang) -> where that side of the split is read from, for messages;
    # None: ``data=<source>``.
    where: Callable[[DataSettings, str, str], str] | None = None

    def describe(self, data: DataSettings, name: str, lang: str) -> str:
        return f"data={data.source}" if self.where is None else self.where(data, name, lang)


def data_path(value: str | None, key: str) -> Path:
    """``data.<key>`` as a path (``~`` expanded); unset is a UserError naming the key."""
    if value is None:
        raise UserError(f"data.{key} is not set: add data.{key}=<path> to the command")
    return Path(os.path.expanduser(value))


def in_folder(
    read_split: Callable[[Path, str, Langs], datasets.Dataset],
    file_name: str,
    default: Callable[[], Path] | None = None,
) -> Source:
    """A source of files in ``data.dir`` (``default()`` when it is null): ``read_split(folder,
    split, langs)`` reads one split; ``file_name`` (with ``{split}`` and ``{lang}``) names the
    file of one side in messages."""

    def folder(data: DataSettings) -> Path:
        return default() if data.dir is None and default else data_path(data.dir, "dir")

    def read(data: DataSettings, names: list[str], langs: Langs) -> dict[str, datasets.Dataset]:
        where = folder(data)
        return {name: read_split(where, name, langs) for name in names}

    def where(data: DataSettings, name: str, lang: str) -> str:
        return str(find_file(folder(data), file_name.format(split=name, lang=lang)))

    return Source(read, where)


def read_iwslt(data: DataSettings, names: list[str], langs: Langs) -> dict[str, datasets.Dataset]:
    """IWSLT 2017 from ``data.path`` (the release archive or folder), else from the hub."""
    if data.path is not None:
        release = iwslt.IwsltRelease(data_path(data.path, "path"), pair=data.pair)
        return {name: release.split(name, langs) for name in names}
    if data.hub is None:
        raise UserError("data=iwslt2017 needs data.hub.* or data.path=<release archive>")
    return iwslt.load_iwslt_hub(data.hub, names, langs, pair=data.pair)


def iwslt_where(data: DataSettings, name: str, lang: str) -> str:
    return f"data.path={data.path}" if data.path else f"hub {data.hub.repo}"


SOURCES: dict[str, Source] = {
    "iwslt2017": Source(read_iwslt, iwslt_where),
    "multi30k": in_folder(read_text_pair, "{split}.{lang}"),
    "jsonl": in_folder(read_jsonl, "{split}.jsonl"),
    "sample": in_folder(read_text_pair, "{split}.{lang}", default=sample_dir),
}


def source(name: str) -> Source:
    """The source ``data.source=name``; an unknown name is one line listing the known ones."""
    if name not in SOURCES:
        raise UserError(f"data.source={name} is unknown; choose one of {', '.join(SOURCES)}")
    return SOURCES[name]
