"""docs/extending.md, "A data source": a tsv reader, registered in SOURCES and read through the
settings reader and :func:`load_raw_split` from files in ``tmp_path``."""

from __future__ import annotations

from pathlib import Path

import datasets
import pytest
from conftest import compose_config

from translate.data import registry
from translate.data.corpus import load_raw_split
from translate.data.registry import in_folder
from translate.data.sources import find_file, make_dataset, read_lines
from translate.errors import UserError
from translate.settings import data_settings


# recipe: start read_tsv
# translate/data/sources.py
def read_tsv(folder: Path, split: str, langs: tuple[str, str]) -> datasets.Dataset:
    """``{split}.tsv[.gz]``: a header naming the languages (``de<TAB>en``), then one pair a line."""
    path = find_file(folder, f"{split}.tsv")
    header, *rows = [line.split("\t") for line in read_lines(path)] or [[]]
    if sorted(header) != sorted(langs):
        raise UserError(f"{path}, line 1: expected the header {langs[0]}<TAB>{langs[1]}")
    for number, row in enumerate(rows, 2):
        if len(row) != 2:
            raise UserError(f"{path}, line {number}: expected 2 tab-separated columns")
    columns = {lang: [row[header.index(lang)].strip() for row in rows] for lang in langs}
    return make_dataset(columns)
# recipe: end read_tsv


ADDED = {
    # recipe: start entry
    # translate/data/registry.py, one more entry in SOURCES
    "tsv": in_folder(read_tsv, "{split}.tsv"),
    # recipe: end entry
}


@pytest.fixture
def tsv_data(monkeypatch, tmp_path):
    """The source registered for one test; ``read(role, *langs)`` reads a split of
    ``data=jsonl data.source=tsv data.dir=tmp_path`` (``conf/data/tsv.yaml`` in the guide)."""
    for name, source in ADDED.items():
        monkeypatch.setitem(registry.SOURCES, name, source)

    def read(role: str, src: str = "de", tgt: str = "en"):
        overrides = ["data=jsonl", "data.source=tsv", f"data.dir={tmp_path}"]
        langs = [f"data.src_lang={src}", f"data.tgt_lang={tgt}"]
        cfg = compose_config("train", ["experiment=quickstart", *overrides, *langs])
        return load_raw_split(data_settings(cfg.data), role)

    return read


def test_a_tsv_split_is_read_by_its_header_in_either_direction(tsv_data, tmp_path):
    (tmp_path / "train.tsv").write_text("en\tde\na dog\tein Hund\nthe cat \t die Katze\n")
    assert tsv_data("train") == ("train", ["ein Hund", "die Katze"], ["a dog", "the cat"])
    reversed_run = ("train", ["a dog", "the cat"], ["ein Hund", "die Katze"])
    assert tsv_data("train", "en", "de") == reversed_run


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("de\ten\nein Hund\ta dog\nzwei\tSpalten\tzu viel\n", "line 3: expected 2 tab-separated"),
        ("de\tfr\nein Hund\tun chien\n", r"line 1: expected the header de<TAB>en"),
        ("", r"line 1: expected the header de<TAB>en"),
    ],
)
def test_a_bad_file_is_one_line_naming_the_file_and_line(tsv_data, tmp_path, text, error):
    (tmp_path / "validation.tsv").write_text(text)
    with pytest.raises(UserError, match=rf"validation\.tsv, {error}"):
        tsv_data("valid")

