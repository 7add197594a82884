"""IWSLT 2017: the release as .zip, .tgz or folder, and the hub's Parquet -> archive fallback.

The hub is faked: ``datasets.load_dataset`` and ``huggingface_hub.hf_hub_download`` are
replaced by functions that serve (or refuse) the release fixture, so nothing touches the network.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import datasets
import huggingface_hub
import pytest
from conftest import data_config
from huggingface_hub.errors import EntryNotFoundError

from translate.data import iwslt
from translate.data.corpus import load_corpus
from translate.errors import UserError
from translate.settings import data_settings

ROOT = Path(__file__).resolve().parents[2]
RELEASE = ROOT / "tests" / "fixtures" / "iwslt_release"
LANGS = ("de", "en")
COUNTS = [6, 3, 7]  # train, validation (dev2010), test (tst2010..tst2015) of the fixture
PARQUET = "hf://datasets/IWSLT/iwslt2017@refs%2Fconvert%2Fparquet/iwslt2017-de-en"
ARCHIVE = "data/2017-01-trnted/texts/de/en/de-en.zip"
ARCHIVE_URL = f"hf://datasets/IWSLT/iwslt2017@main/{ARCHIVE}"


def make_release(tmp_path: Path, kind: str) -> Path:
    """The release fixture as the official layout: ``de-en.zip``, ``de-en.tgz`` or a folder."""
    files = sorted((RELEASE / "de-en").iterdir())
    if kind == "zip":
        path = tmp_path / "de-en.zip"
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("de-en/", "")
            for file in files:
                archive.write(file, f"de-en/{file.name}")
    elif kind == "tgz":
        path = tmp_path / "de-en.tgz"
        with tarfile.open(path, "w:gz") as tar:
            tar.add(RELEASE / "de-en", arcname="de-en")
    else:
        path = tmp_path / "release"
        shutil.copytree(RELEASE / "de-en", path / "de-en")
    return path


def data_cfg(tmp_path: Path, *overrides: str):
    cfg = data_config("iwslt2017")
    cfg.merge_with_dotlist([f"cache_dir={tmp_path / 'cache'}", "tokenizer.vocab_size=90"])
    cfg.merge_with_dotlist(list(overrides))
    return data_settings(cfg)


def pairs(ds: datasets.Dataset) -> list[tuple[str, str]]:
    return [(r["de"], r["en"]) for r in ds["translation"]]


# ------------------------------------------------------------------ the release formats


@pytest.mark.parametrize("kind", ["zip", "tgz", "folder"])
def test_release_formats_read_alike(tmp_path, kind):
    reference = iwslt.IwsltRelease(RELEASE)
    release = iwslt.IwsltRelease(make_release(tmp_path, kind))
    for split in ("train", "validation", "test", "tst2012"):
        assert pairs(release.split(split, LANGS)) == pairs(reference.split(split, LANGS))


def test_damaged_or_unknown_archive_is_one_line(tmp_path):
    path = make_release(tmp_path, "zip")
    data = bytearray(path.read_bytes())
    start = data.index(b"train.tags.de-en.de") + len("train.tags.de-en.de")
    data[start : start + 40] = b"\xff" * 40  # inside the first member's deflate data
    path.write_bytes(bytes(data))
    with pytest.raises(UserError, match=r"de-en\.zip: a damaged release archive") as err:
        iwslt.IwsltRelease(path)
    assert "download it again" in str(err.value) and "\n" not in str(err.value)

    other = tmp_path / "notes.txt"
    other.write_text("not an archive\n")
    with pytest.raises(UserError, match="neither a folder nor a .tgz or .zip"):
        iwslt.IwsltRelease(other)


# ------------------------------------------------------------------ the fake hub


class ConnectError(Exception):
    """Named like httpx's error when DNS fails."""


class FakeHub:
    """What ``datasets.load_dataset`` and ``hf_hub_download`` see and answer."""

    def __init__(self, archive: Path | None, parquet_splits=("train", "validation", "test")):
        self.archive, self.parquet_splits = archive, set(parquet_splits)
        self.parquet_error: Exception | None = None
        self.archive_error: Exception | None = None
        self.parquet_calls: list[dict] = []
        self.downloads: list[dict] = []

    def load_dataset(self, builder, data_files):
        assert builder == "parquet"
        self.parquet_calls.append(dict(data_files))
        if self.parquet_error is not None:
            raise self.parquet_error
        missing = [url for split, url in data_files.items() if split not in self.parquet_splits]
        if missing:
            raise FileNotFoundError(f"Unable to find '{missing[0]}'")
        release = iwslt.IwsltRelease(RELEASE)
        return datasets.DatasetDict({n: release.split(n, LANGS) for n in data_files})

    def hf_hub_download(self, **kwargs):
        self.downloads.append(kwargs)
        if self.archive_error is not None:
            raise self.archive_error
        if self.archive is None:
            raise EntryNotFoundError(f"404 Client Error: entry {kwargs['filename']} not found")
        return str(self.archive)


@pytest.fixture
def hub(tmp_path, monkeypatch):
    for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    fake = FakeHub(make_release(tmp_path, "zip"))
    monkeypatch.setattr(datasets, "load_dataset", fake.load_dataset)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake.hf_hub_download)
    return fake


def counts(tmp_path, *overrides) -> list[int]:
    return [s.num_raw for s in load_corpus(data_cfg(tmp_path, *overrides)).splits.values()]


def one_line_error(tmp_path, *overrides) -> str:
    with pytest.raises(UserError) as err:
        load_corpus(data_cfg(tmp_path, *overrides))
    message = str(err.value)
    assert "\n" not in message
    return message


def test_parquet_export_first_and_no_archive_download(tmp_path, hub, caplog):
    with caplog.at_level(logging.WARNING):
        assert counts(tmp_path) == COUNTS
    assert hub.parquet_calls == [
        {s: f"{PARQUET}/{s}/0000.parquet" for s in ("train", "validation", "test")}
    ]
    assert hub.downloads == []
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("missing", ["all", "one split"])
def test_missing_parquet_falls_back_to_the_archive_with_a_warning(tmp_path, hub, caplog, missing):
    if missing == "all":
        hub.parquet_error = datasets.exceptions.DataFilesNotFoundError("No (supported) data files")
    else:
        hub.parquet_splits = {"train", "validation"}
    with caplog.at_level(logging.WARNING, logger="translate.data.iwslt"):
        assert counts(tmp_path) == COUNTS
    assert hub.downloads == [
        {
            "repo_id": "IWSLT/iwslt2017",
            "filename": ARCHIVE,
            "repo_type": "dataset",
            "revision": "main",
        }
    ]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "Parquet export is missing or incomplete" in warnings[0]
    assert f"falling back to the release archive {ARCHIVE_URL}" in warnings[0]


def test_a_split_only_the_release_has_comes_from_the_archive(tmp_path, hub):
    assert counts(tmp_path, "splits.test=tst2015") == [6, 3, 1]
    assert len(hub.downloads) == 1


def test_parquet_and_archive_both_missing_name_both_and_the_alternatives(tmp_path, hub):
    hub.parquet_splits, hub.archive = set(), None
    message = one_line_error(tmp_path)
    assert message.startswith("IWSLT2017 not found on the hub")
    assert f"{PARQUET}/{{train,validation,test}}/0000.parquet" in message
    assert f"the release archive {ARCHIVE_URL}" in message and "EntryNotFoundError" in message
    for alternative in ("data=iwslt2017 data.path=", "data=jsonl", "data=multi30k"):
        assert alternative in message


def test_no_archive_configured_is_one_line(tmp_path, hub):
    hub.parquet_splits = set()
    message = one_line_error(tmp_path, "hub.archive=null")
    assert "IWSLT2017 not found on the hub" in message and "set data.hub.archive" in message
    assert hub.downloads == []


def test_network_error_on_parquet_fails_at_once_without_fallback(tmp_path, hub):
    hub.parquet_error = ConnectError("[Errno -2] Name or service not known")
    message = one_line_error(tmp_path)
    assert message.startswith("cannot reach the Hugging Face hub to load IWSLT2017")
    assert "Name or service not known" in message and "data=multi30k" in message
    assert hub.downloads == []


def test_network_error_on_the_archive_is_the_unreachable_message(tmp_path, hub):
    hub.parquet_splits = set()
    hub.archive_error = huggingface_hub.errors.LocalEntryNotFoundError("cannot reach the hub")
    message = one_line_error(tmp_path)
    assert message.startswith("cannot reach the Hugging Face hub to load IWSLT2017")
    assert len(hub.downloads) == 1


def test_offline_mode_touches_neither_source(tmp_path, hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert "HF_HUB_OFFLINE=1 is set" in one_line_error(tmp_path)
    assert hub.parquet_calls == [] and hub.downloads == []


# ------------------------------------------------------------------ the inspection command


@pytest.mark.parametrize("kind", ["zip", "tgz", "folder"])
def test_cli_reports_the_split_sizes_of_a_release(tmp_path, kind):
    done = subprocess.run(
        [
            sys.executable, "-m", "translate.data", "data=iwslt2017",
            f"data.path={make_release(tmp_path, kind)}", f"data.cache_dir={tmp_path / 'cache'}",
            "data.tokenizer.vocab_size=90",
        ],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split()[1:3] for line in done.stdout.splitlines() if line}
    assert rows["train"] == ["train", "6"]
    assert rows["valid"] == ["validation", "3"]
    assert rows["test"] == ["test", "7"]
