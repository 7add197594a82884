"""IWSLT 2017 De-En: the Hugging Face hub's Parquet export or, with a warning where it lacks a
split, the release archive the same repository keeps (``data.hub.archive``); or a local copy of
that release (:class:`IwsltRelease`). A network error stops at once, without a fallback."""

from __future__ import annotations

import logging
import os
import re
import socket
import tarfile
import zipfile
import zlib
from pathlib import Path
from typing import TYPE_CHECKING
from xml.sax.saxutils import unescape

import huggingface_hub

from translate.data.sources import check_aligned, decode_utf8, make_dataset, read_lines, split_lines
from translate.errors import UserError

if TYPE_CHECKING:
    import datasets

    from translate.schema import HubSettings

log = logging.getLogger(__name__)

LOCAL_ALTERNATIVES = (
    "data=iwslt2017 data.path=<release archive (.tgz or .zip) or folder>, "
    "data=jsonl data.dir=<folder with {split}.jsonl>, or data=multi30k data.dir=<folder>"
)

_SEG = re.compile(r"<seg[^>]*>(.*?)(?:</seg>)?$")
# What the split "test" joins, in this order (8,079 pairs in the release).
TEST_SETS = tuple(f"tst{year}" for year in range(2010, 2016))


def train_file(pair: str, lang: str) -> str:
    return f"train.tags.{pair}.{lang}"


def xml_file(name: str, pair: str, lang: str) -> str:
    return f"IWSLT17.TED.{name}.{pair}.{lang}.xml"


class IwsltRelease:
    """The official release: ``de-en.tgz``, ``de-en.zip`` or the folder they extract to.
    Splits: ``train``, ``validation`` (dev2010), ``test`` (:data:`TEST_SETS`) or one set alone."""

    def __init__(self, path: Path, pair: str = "de-en"):
        self.path, self.pair = Path(path), pair
        if self.path.is_dir():
            folders = [self.path, self.path / pair]
            self._files: dict[str, Path | bytes] = {
                p.name: p for d in folders if d.is_dir() for p in d.iterdir() if p.is_file()
            }
        elif self.path.is_file():
            self._files = dict(_archive_members(self.path, pair))
        else:
            raise UserError(
                f"data.path={path} does not exist (expected the IWSLT 2017 release: "
                f"{pair}.tgz, {pair}.zip or the {pair}/ folder they extract to)"
            )

    def split(self, name: str, langs: tuple[str, str]) -> datasets.Dataset:
        if set(langs) != set(self.pair.split("-")):
            raise UserError(f"data.pair={self.pair} does not name the languages {langs}")
        if name == "train":
            return self._train(langs)
        if name == "validation":
            return self._xml(["dev2010"], langs)
        if name == "test":
            return self._xml(list(TEST_SETS), langs)
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
                f"archive {self.pair}.tgz or {self.pair}.zip, or the {self.pair}/ folder it "
                "extracts to"
            )
        item = self._files[name]
        if isinstance(item, Path):
            return read_lines(item)
        return split_lines(decode_utf8(item, self._where(name)))

    def _where(self, name: str) -> str:
        item = self._files.get(name)
        return str(item) if isinstance(item, Path) else f"{self.path}:{name}"

    def _train(self, langs: tuple[str, str]) -> datasets.Dataset:
        names = [train_file(self.pair, lang) for lang in langs]
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
            files = [xml_file(name, self.pair, lang) for lang in langs]
            segs = {lang: _segments(self._read(f)) for lang, f in zip(langs, files)}
            check_aligned(segs, [self._where(f) for f in files], "<seg> lines")
            for lang in langs:
                columns[lang] += segs[lang]
        return make_dataset(columns)


def _archive_members(path: Path, pair: str) -> dict[str, bytes]:
    wanted = re.compile(rf"^(train\.tags|IWSLT17\.TED\.\w+)\.{re.escape(pair)}\.")
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                return {
                    Path(info.filename).name: archive.read(info)
                    for info in archive.infolist()
                    if not info.is_dir() and wanted.match(Path(info.filename).name)
                }
        if tarfile.is_tarfile(path):
            with tarfile.open(path) as tar:
                return {
                    Path(m.name).name: tar.extractfile(m).read()
                    for m in tar
                    if m.isfile() and wanted.match(Path(m.name).name)
                }
    except (tarfile.TarError, zipfile.BadZipFile, zlib.error, EOFError, OSError) as err:
        raise UserError(
            f"{path}: a damaged release archive ({_reason(err)}); download it again"
        ) from None
    raise UserError(
        f"{path} is neither a folder nor a .tgz or .zip release archive; data.path must be "
        f"{pair}.tgz, {pair}.zip or the {pair}/ folder they extract to"
    )


def _segments(lines: list[str]) -> list[str]:
    segs = []
    for line in lines:
        if line.startswith("<seg"):
            match = _SEG.match(line)
            text = match[1] if match else line.partition(">")[2]
            segs.append(unescape(text, {"&quot;": '"', "&apos;": "'"}).strip())
    return segs


class NotOnHub(Exception):
    """The hub has no such repository, revision or file."""


def load_iwslt_hub(
    hub: HubSettings, names: list[str], langs: tuple[str, str], pair: str = "de-en"
) -> dict[str, datasets.Dataset]:
    offline = [v for v in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE") if _truthy(os.environ.get(v))]
    if offline:
        raise UserError(hub_unreachable(f"{offline[0]}=1 is set"))
    tried = parquet_url(hub, names)
    try:
        return load_parquet({n: parquet_url(hub, [n]) for n in names}, langs)
    except NotOnHub as missing:
        tried, why = f"the Parquet export {tried} ({missing})", str(missing)
    if not hub.archive:
        raise UserError(
            f"IWSLT2017 not found on the hub: {tried}; set data.hub.archive or check data.hub.*, "
            f"or use a local copy: {LOCAL_ALTERNATIVES}"
        )
    url = archive_url(hub)
    log.warning(
        "IWSLT2017: the hub's Parquet export is missing or incomplete (%s); "
        "falling back to the release archive %s",
        why,
        url,
    )
    try:
        local = _from_hub(
            lambda: huggingface_hub.hf_hub_download(
                repo_id=hub.repo,
                filename=hub.archive,
                repo_type="dataset",
                revision=hub.archive_revision,
            )
        )
    except NotOnHub as missing:
        raise UserError(
            f"IWSLT2017 not found on the hub: tried {tried} and the release archive {url} "
            f"({missing}); check data.hub.* or use a local copy: {LOCAL_ALTERNATIVES}"
        ) from None
    release = IwsltRelease(Path(local), pair=pair)
    return {name: release.split(name, langs) for name in names}


def parquet_url(hub: HubSettings, names: list[str]) -> str:
    """``hf://datasets/{repo}@{revision}/{config}/{split}/{file}``; ``{a,b}`` for several."""
    split = names[0] if len(names) == 1 else "{" + ",".join(names) + "}"
    return f"hf://datasets/{hub.repo}@{hub.revision}/{hub.config}/{split}/{hub.file}"


def archive_url(hub: HubSettings) -> str:
    revision = hub.archive_revision or "main"
    return f"hf://datasets/{hub.repo}@{revision}/{hub.archive}"


def load_parquet(urls: dict[str, str], langs: tuple[str, str]) -> dict[str, datasets.Dataset]:
    """``{split: url}`` Parquet files; :class:`NotOnHub` when a file or split is missing."""
    import datasets  # imported only here, as in translate.data.sources

    loaded = _from_hub(lambda: datasets.load_dataset("parquet", data_files=urls))
    missing = [split for split in urls if split not in loaded]
    if missing:
        raise NotOnHub(f"no split {missing[0]!r} in {urls[missing[0]]}")
    for split in urls:
        feature = loaded[split].features.get("translation")
        languages = getattr(feature, "languages", None) or []
        if not set(langs) <= set(languages):
            raise UserError(
                f"{urls[split]} has no translation {langs}: features {loaded[split].features}"
            )
    return {split: loaded[split] for split in urls}


def _from_hub(call):
    """``call()``: unreachable is a UserError (no fallback), not found :class:`NotOnHub`."""
    try:
        return call()
    except Exception as err:
        if is_network_error(err):
            raise UserError(hub_unreachable(_reason(err))) from err
        if any(cls.__name__ in _NOT_FOUND_NAMES for cls in type(err).__mro__):
            raise NotOnHub(_reason(err)) from err
        raise


def hub_unreachable(reason: str) -> str:
    return (
        f"cannot reach the Hugging Face hub to load IWSLT2017 ({reason}); use a local copy "
        f"instead: {LOCAL_ALTERNATIVES}"
    )


def _reason(err: BaseException) -> str:
    text = str(err).strip()
    first = text.splitlines()[0] if text else ""
    reason = f"{type(err).__name__}: {first}" if first else type(err).__name__
    return reason if len(reason) <= 200 else reason[:199] + "…"


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
    """Whether ``err`` or its cause is a connection, DNS, timeout or offline-mode error, by class
    name too (huggingface_hub has used requests, httpx and httpx2)."""
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


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")
