"""Readers of parallel text into ``datasets.Dataset`` splits of ``{"translation": {"de": ...,
"en": ...}}`` records, as the hub's IWSLT2017. Corpus lines are read as UTF-8 with universal
newlines and stripped, as the hub's loading script did (:func:`read_lines`); text to translate
is split on ``\\n`` and ``\\r\\n`` only and kept as it is (:func:`read_input_lines`), so one
input line is one output line. No reader truncates or skips pairs silently.
"""

from __future__ import annotations

import gzip
import importlib.resources
import json
import os
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

from translate.errors import UserError

# ``datasets`` (half a second to import) is imported where a split is built: a command that
# stops at a bad setting, or reads encoded splits from the cache, never imports it.
if TYPE_CHECKING:
    import datasets


def make_dataset(columns: dict[str, list[str]]) -> datasets.Dataset:
    import datasets

    langs = list(columns)
    records = [dict(zip(langs, row)) for row in zip(*columns.values())]
    features = datasets.Features({"translation": datasets.Translation(languages=langs)})
    return datasets.Dataset.from_dict({"translation": records}, features=features)


def sample_dir() -> Path:
    """The small corpus shipped inside the package (``data=sample``)."""
    return Path(str(importlib.resources.files("translate"))) / "resources" / "sample"


def decode_utf8(data: bytes, where: str | os.PathLike) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        bad = data[err.start : err.end]
        raise UserError(
            f"{where}, line {line}: bytes that are not UTF-8 ({bad!r}); "
            "convert the text to UTF-8 (e.g. iconv -f latin1 -t utf-8)"
        ) from None


def split_lines(text: str) -> list[str]:
    """Stripped lines; ``\\n``, ``\\r\\n`` and ``\\r`` each end a line, as in text mode."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.strip() for line in lines]


def split_input_lines(text: str) -> list[str]:
    """Lines of text to translate, not stripped: only ``\\n`` and ``\\r\\n`` end a line, not the
    others ``str.splitlines`` splits on (a lone ``\\r``, ``\\x85``, ``\\u2028`` ...)."""
    parts = text.split("\n")
    last = parts.pop()  # the text after the last "\n": "" when the text ends with a newline
    lines = [part[:-1] if part.endswith("\r") else part for part in parts]
    if last:
        lines.append(last)
    return lines


def decode_input(data: bytes, where: str = "stdin") -> list[str]:
    return split_input_lines(decode_utf8(data, where))


def read_text(path: Path) -> str:
    """A UTF-8 text file, gunzipped for ``.gz``; every way it can be bad is one line."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path} is a folder, not a file; name a text file")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path} does not exist; check the path") from None
    except OSError as err:
        raise UserError(f"{path} cannot be read ({err.strerror or err}); check the file") from None
    if path.suffix == ".gz":
        data = gunzip(data, path)
    return decode_utf8(data, path)


def gunzip(data: bytes, where: str | os.PathLike) -> bytes:
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(
            f"{where}: not a readable gzip file ({reason}); download or compress it again "
            "(gzip -t checks a file)"
        ) from None


def read_lines(path: Path) -> list[str]:
    return split_lines(read_text(path))


def read_input_lines(path: Path) -> list[str]:
    return split_input_lines(read_text(path))


def find_file(folder: Path, name: str) -> Path:
    """``name`` or ``name.gz`` in ``folder`` (checked to be a folder by the source)."""
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    present = sorted(p.name for p in folder.iterdir())
    shown = ", ".join(present[:8]) + (", …" if len(present) > 8 else "") or "nothing"
    raise UserError(f"{folder / name} not found (nor {name}.gz); the folder has: {shown}")


def read_text_pair(folder: Path, split: str, langs: tuple[str, str]) -> datasets.Dataset:
    """Line-aligned ``{split}.{lang}[.gz]`` files (Multi30k's layout)."""
    paths = [find_file(folder, f"{split}.{lang}") for lang in langs]
    columns = {lang: read_lines(path) for lang, path in zip(langs, paths)}
    check_aligned(columns, paths, "lines")
    return make_dataset(columns)


def check_aligned(columns: dict[str, list[str]], where: list, unit: str) -> None:
    (a, b), (na, nb) = where, [len(v) for v in columns.values()]
    if na != nb:
        raise UserError(f"{a} has {na} {unit} but {b} has {nb}; the two sides must be aligned")


def read_jsonl(folder: Path, split: str, langs: tuple[str, str]) -> datasets.Dataset:
    """``{split}.jsonl[.gz]``: one ``{"translation": {src: ..., tgt: ...}}`` record per line."""
    path = find_file(folder, f"{split}.jsonl")
    columns: dict[str, list[str]] = {lang: [] for lang in langs}
    expected = '{"translation": {' + ", ".join(f'"{lang}": "..."' for lang in langs) + "}}"
    for number, line in enumerate(read_lines(path), 1):
        if not line:
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise UserError(
                f"{path}, line {number}: not JSON ({err.msg}); expected {expected}"
            ) from None
        pair = record.get("translation") if isinstance(record, dict) else None
        if not isinstance(pair, dict) or not all(isinstance(pair.get(x), str) for x in langs):
            raise UserError(f"{path}, line {number}: expected a record like {expected}")
        for lang in langs:
            columns[lang].append(pair[lang].strip())
    return make_dataset(columns)
