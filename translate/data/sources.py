"""Where parallel text comes from. Every reader returns Hugging Face ``datasets.Dataset`` splits
with one schema, ``{"translation": {"de": "...", "en": "..."}}``, as the hub's IWSLT2017 does.

- :func:`load_iwslt_hub`: the Parquet export of ``IWSLT/iwslt2017`` on the Hugging Face hub.
- :class:`IwsltRelease`: the official IWSLT 2017 release archive (``de-en.tgz``) or its folder.
- :func:`read_text_pair`: plain parallel text ``{split}.{lang}`` or ``{split}.{lang}.gz``
  (Multi30k's layout, and the built-in sample corpus in :func:`sample_dir`).
- :func:`read_jsonl`: JSON lines ``{split}.jsonl`` or ``.jsonl.gz`` in the record schema above.

Lines are read as UTF-8 with universal newlines and stripped, as the hub's loading script did.
Anything the user can fix raises :class:`~translate.errors.UserError`; no reader truncates or
skips pairs silently.
"""

from __future__ import annotations

import gzip
import importlib.resources
import json
import os
import re
import socket
import tarfile
from pathlib import Path
from xml.sax.saxutils import unescape

import datasets

from translate.errors import UserError

LOCAL_ALTERNATIVES = (
    "data=iwslt2017 data.path=<release archive or folder>, "
    "data=jsonl data.dir=<folder with {split}.jsonl>, or data=multi30k data.dir=<folder>"
)


def make_dataset(columns: dict[str, list[str]]) -> datasets.Dataset:
    """A dataset of translation records from equally long lists of sentences, one per language."""
    langs = list(columns)
    records = [dict(zip(langs, row)) for row in zip(*columns.values())]
    features = datasets.Features({"translation": datasets.Translation(languages=langs)})
    return datasets.Dataset.from_dict({"translation": records}, features=features)


def sample_dir() -> Path:
    """The small German-English corpus shipped inside the package (``data=sample``)."""
    return Path(str(importlib.resources.files("translate"))) / "resources" / "sample"


# ---------------------------------------------------------------------------- plain files


def decode_utf8(data: bytes, where: str | os.PathLike) -> str:
    """``data`` as text; bytes that are not UTF-8 raise a UserError naming file and line."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        bad = data[err.start : err.end]
        raise UserError(
            f"{where}, line {line}: bytes that are not UTF-8 ({bad!r}); "
            "convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)"
        ) from None


def split_lines(text: str) -> list[str]:
    """Stripped lines; ``\\n``, ``\\r\\n`` and ``\\r`` each end a line, as in text mode."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.strip() for line in lines]


def read_lines(path: Path) -> list[str]:
    """Stripped lines of a UTF-8 text file, gunzipped when its name ends in ``.gz``."""
    data = path.read_bytes()
    if path.suffix == ".gz":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as err:
            raise UserError(f"{path}: not a readable gzip file ({err})") from None
    return split_lines(decode_utf8(data, path))


def find_file(folder: Path, name: str) -> Path:
    """``folder/name`` or ``folder/name.gz``, whichever exists."""
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise UserError(f"data folder {folder} {what}")
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    present = sorted(p.name for p in folder.iterdir())
    shown = ", ".join(present[:8]) + (", …" if len(present) > 8 else "") or "nothing"
    raise UserError(f"{folder / name} not found (nor {name}.gz); the folder has: {shown}")


def read_text_pair(folder: Path, split: str, langs: tuple[str, str]) -> datasets.Dataset:
    """Line-aligned ``{split}.{lang}[.gz]`` files, one sentence per line."""
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


# ------------------------------------------------------------------- IWSLT 2017 release

_SEG = re.compile(r"<seg[^>]*>(.*?)(?:</seg>)?$")
_TEST_YEARS = tuple(f"tst{year}" for year in range(2010, 2016))


class IwsltRelease:
    """The official IWSLT 2017 De-En release: ``de-en.tgz`` or the folder it extracts to.

    Splits: ``train`` (``train.tags.de-en.*``, lines starting with ``<`` skipped), ``validation``
    (dev2010), ``test`` (tst2010..tst2015 joined in that order), or one of ``dev2010``,
    ``tst2010``..``tst2015`` alone. XML files keep the text of their ``<seg>`` lines.
    """

    def __init__(self, path: Path, pair: str = "de-en"):
        self.path, self.pair = path, pair
        wanted = re.compile(rf"^(train\.tags|IWSLT17\.TED\.\w+)\.{re.escape(pair)}\.")
        if path.is_dir():
            folders = [path, path / pair]
            self._files: dict[str, Path | bytes] = {
                p.name: p for d in folders if d.is_dir() for p in d.iterdir() if p.is_file()
            }
        elif path.is_file() and tarfile.is_tarfile(path):
            with tarfile.open(path) as tar:
                self._files = {
                    Path(m.name).name: tar.extractfile(m).read()
                    for m in tar
                    if m.isfile() and wanted.match(Path(m.name).name)
                }
        elif path.exists():
            raise UserError(f"data.path={path} is neither a folder nor a .tgz release archive")
        else:
            raise UserError(f"data.path={path} does not exist (expected the IWSLT 2017 release)")

    def split(self, name: str, langs: tuple[str, str]) -> datasets.Dataset:
        if set(langs) != set(self.pair.split("-")):
            raise UserError(f"data.pair={self.pair} does not name the languages {langs}")
        if name == "train":
            return self._train(langs)
        if name == "validation":
            return self._xml(["dev2010"], langs)
        if name == "test":
            return self._xml(list(_TEST_YEARS), langs)
        if re.fullmatch(r"dev2010|tst201[0-5]", name):
            return self._xml([name], langs)
        raise UserError(
            f"unknown IWSLT 2017 split {name!r}: use train, validation, test, dev2010 or "
            "tst2010..tst2015 in data.splits"
        )

    def _read(self, name: str) -> list[str]:
        if name not in self._files:
            raise UserError(
                f"{name} not found in {self.path}: data.path must be the IWSLT 2017 release "
                f"archive {self.pair}.tgz or the {self.pair}/ folder it extracts to"
            )
        item = self._files[name]
        if isinstance(item, Path):
            return read_lines(item)
        return split_lines(decode_utf8(item, self._where(name)))

    def _where(self, name: str) -> str:
        """The file ``name`` as an error message names it: its path, or ``archive:name``."""
        item = self._files.get(name)
        return str(item) if isinstance(item, Path) else f"{self.path}:{name}"

    def _train(self, langs: tuple[str, str]) -> datasets.Dataset:
        names = [f"train.tags.{self.pair}.{lang}" for lang in langs]
        columns = {lang: self._read(name) for lang, name in zip(langs, names)}
        check_aligned(columns, [self._where(n) for n in names], "lines")
        # As the hub script: a line whose first-language side starts with "<" is markup.
        markup = [line.startswith("<") for line in columns[self.pair.split("-")[0]]]
        return make_dataset(
            {lang: [s for s, skip in zip(col, markup) if not skip] for lang, col in columns.items()}
        )

    def _xml(self, sets: list[str], langs: tuple[str, str]) -> datasets.Dataset:
        columns: dict[str, list[str]] = {lang: [] for lang in langs}
        for name in sets:
            files = [f"IWSLT17.TED.{name}.{self.pair}.{lang}.xml" for lang in langs]
            segs = {lang: _segments(self._read(f)) for lang, f in zip(langs, files)}
            check_aligned(segs, [self._where(f) for f in files], "<seg> lines")
            for lang in langs:
                columns[lang] += segs[lang]
        return make_dataset(columns)


def _segments(lines: list[str]) -> list[str]:
    """Text of the ``<seg id="…">text</seg>`` lines, XML entities unescaped."""
    segs = []
    for line in lines:
        if line.startswith("<seg"):
            match = _SEG.match(line)
            text = match[1] if match else line.partition(">")[2]
            segs.append(unescape(text, {"&quot;": '"', "&apos;": "'"}).strip())
    return segs


# ------------------------------------------------------------------------ the hub


def load_iwslt_hub(urls: dict[str, str], langs: tuple[str, str]) -> dict[str, datasets.Dataset]:
    """``{split: url}`` Parquet files (``hf://datasets/…``) through ``datasets.load_dataset``."""
    offline = [v for v in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE") if _truthy(os.environ.get(v))]
    if offline:
        raise UserError(hub_unreachable(f"{offline[0]}=1 is set"))
    try:
        loaded = datasets.load_dataset("parquet", data_files=urls)
    except Exception as err:
        reason = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err) else ''}"
        if is_network_error(err):
            raise UserError(hub_unreachable(reason)) from err
        if _is_not_found(err):
            raise UserError(
                f"IWSLT2017 Parquet files not found on the hub ({reason}); check data.hub.* "
                f"or use a local copy: {LOCAL_ALTERNATIVES}"
            ) from err
        raise
    for split, ds in loaded.items():
        feature = ds.features.get("translation")
        languages = getattr(feature, "languages", None) or []
        if not set(langs) <= set(languages):
            raise UserError(f"{urls[split]} has no translation {langs}: features {ds.features}")
    return dict(loaded)


def hub_unreachable(reason: str) -> str:
    return (
        f"cannot reach the Hugging Face hub to load IWSLT2017 ({reason}); use a local copy "
        f"instead: {LOCAL_ALTERNATIVES}"
    )


_NETWORK_NAMES = {
    "ConnectError",
    "ConnectTimeout",
    "ReadTimeout",
    "TimeoutException",
    "NetworkError",
    "TransportError",
    "ProxyError",
    "OfflineModeIsEnabled",
    "LocalEntryNotFoundError",
}


def is_network_error(err: BaseException) -> bool:
    """Whether ``err`` or what caused it is a connection, DNS, timeout or offline-mode error.

    By class name too, since huggingface_hub has used requests, httpx and httpx2 over time.
    """
    seen = 0
    while err is not None and seen < 10:
        if isinstance(err, (ConnectionError, TimeoutError, socket.gaierror)):
            return True
        if any(cls.__name__ in _NETWORK_NAMES for cls in type(err).__mro__):
            return True
        err, seen = err.__cause__ or err.__context__, seen + 1
    return False


_NOT_FOUND_NAMES = {
    "FileNotFoundError",
    "DataFilesNotFoundError",
    "EntryNotFoundError",
    "RepositoryNotFoundError",
    "RevisionNotFoundError",
}


def _is_not_found(err: BaseException) -> bool:
    return any(cls.__name__ in _NOT_FOUND_NAMES for cls in type(err).__mro__)


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")
