"""The data sources by name: one table, one config file per source, one way to add one."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import data_config
from omegaconf import OmegaConf

from translate.data import registry
from translate.data.corpus import load_raw_split
from translate.data.sources import make_dataset
from translate.errors import UserError
from translate.settings import data_settings

CONF_DATA = Path(__file__).resolve().parents[2] / "conf" / "data"


def sample_config(**changes):
    cfg = data_config("sample")
    cfg.merge_with_dotlist([f"{key}={value}" for key, value in changes.items()])
    return cfg


def test_every_source_has_its_config_file_and_every_data_config_a_source():
    files = [path for path in CONF_DATA.glob("*.yaml") if path.stem != "base"]  # shared keys
    by_file = {path.stem: OmegaConf.load(path).source for path in files}
    assert by_file == {name: name for name in registry.SOURCES}


def test_an_unknown_source_is_one_line_naming_the_known_ones():
    with pytest.raises(UserError) as err:
        data_settings(sample_config(source="wmt14"))
    assert str(err.value) == (
        "data.source=wmt14 is unknown; choose one of iwslt2017, multi30k, jsonl, sample"
    )


@pytest.mark.parametrize(
    "name,key,readers",
    [("iwslt2017", "dir", "multi30k, jsonl, sample"), ("sample", "path", "iwslt2017")],
)
def test_a_key_of_another_source_is_refused_not_ignored(name, key, readers):
    """``+data.dir=x`` on the hub's IWSLT: the reader would load the hub as if it were absent."""
    cfg = data_config(name)
    OmegaConf.set_struct(cfg, False)
    cfg[key] = "x"
    with pytest.raises(UserError) as err:
        data_settings(cfg)
    assert str(err.value) == (
        f"data={name} does not read data.{key}: leave it out, or pick the source that does "
        f"(data.{key} is for {readers})"
    )


def test_a_new_source_is_one_reader_and_one_entry(monkeypatch):
    def read_toy(data, names, langs):
        rows = {"train": ["ein Hund", "a dog"], "test": ["", ""]}
        return {
            name: make_dataset(dict(zip(langs, ([rows[name][0]], [rows[name][1]]))))
            for name in names
        }

    monkeypatch.setitem(registry.SOURCES, "toy", registry.Source(read_toy))
    data = data_settings(sample_config(source="toy"))
    assert load_raw_split(data, "train") == ("train", ["ein Hund"], ["a dog"])
    with pytest.raises(UserError, match=r"the test split 'test' \(data=toy\) has no pair"):
        load_raw_split(data, "test")
