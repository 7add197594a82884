"""An empty or blank dev/test split is refused in one line before any training, instead of a
run that trains and then dies scoring it; evaluate refuses such a test split the same way."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import TINY, assert_one_line_error, data_config, run_cli

from translate.data.corpus import load_corpus, load_raw_split
from translate.data.sources import sample_dir
from translate.data.tokenizer import text_fingerprint
from translate.errors import UserError
from translate.settings import data_settings
from translate.train import train

BLANK = {"empty": "", "one blank line": "\n"}
# Never reached when the split is refused; without the check, a short run that fails late.
SHORT = ["trainer.max_steps=2", "trainer.val_every_n_steps=2"]


def sample_with(tmp_path: Path, split: str, content: str) -> Path:
    """A copy of the sample corpus whose ``split``.de/.en hold only ``content``."""
    folder = tmp_path / "data"
    shutil.copytree(sample_dir(), folder)
    for lang in ("de", "en"):
        (folder / f"{split}.{lang}").write_text(content)
    return folder


@pytest.mark.parametrize("role,split", [("test", "test"), ("valid", "validation")])
@pytest.mark.parametrize("content", BLANK.values(), ids=BLANK.keys())
def test_training_refuses_a_blank_dev_or_test_split_before_any_work(
    tiny_train_cfg, tmp_path, role, split, content
):
    folder = sample_with(tmp_path, split, content)
    with pytest.raises(UserError) as err:
        train(tiny_train_cfg(f"data.dir={folder}", *SHORT))
    message = str(err.value)
    assert f"the {role} split {split!r}" in message and "\n" not in message
    assert f"{folder / split}.de" in message and f"{folder / split}.en" in message
    assert f"data.splits.{role}" in message
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_the_train_command_says_it_in_one_line(tmp_path, cache_dir):
    folder = sample_with(tmp_path, "test", "\n")
    run = tmp_path / "run"
    proc = run_cli(
        "translate.train",
        *TINY,
        *SHORT,
        f"data.dir={folder}",
        f"data.cache_dir={cache_dir}",
        f"hydra.run.dir={run}",
    )
    assert_one_line_error(proc, "the test split 'test'", str(folder / "test.de"))
    assert not (run / "checkpoints").exists()


def test_evaluate_refuses_a_blank_test_split_in_one_line(trained_run, tmp_path):
    folder = sample_with(tmp_path, "test", "")
    cfg = data_config("sample")
    cfg.merge_with_dotlist([f"dir={folder}"])
    with pytest.raises(UserError, match="the test split 'test'"):
        load_raw_split(data_settings(cfg), "test")
    checkpoint = trained_run[1]["checkpoint"]
    proc = run_cli(
        "translate.evaluate",
        f"checkpoint={checkpoint}",
        "data=sample",
        f"data.dir={folder}",
        f"hydra.run.dir={tmp_path / 'eval'}",
    )
    assert_one_line_error(proc, "the test split 'test'", str(folder / "test.de"))


def test_the_corpus_carries_the_fingerprint_of_each_split(tmp_path):
    cfg = data_config("sample")
    cfg.merge_with_dotlist([f"cache_dir={tmp_path}", "tokenizer.vocab_size=300"])
    corpus = load_corpus(data_settings(cfg))
    assert set(corpus.fingerprints) == {"train", "valid", "test"}
    test = corpus.splits["test"]
    assert corpus.fingerprints["test"] == text_fingerprint(
        {"de": test.src_text, "en": test.tgt_text}
    )
    assert len(set(corpus.fingerprints.values())) == 3
