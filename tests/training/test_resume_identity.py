"""A resumed run is the same experiment: model, seed and data are checked against the
checkpoint (data by its text, wherever it is read from); schedule and budget may change; a run
killed before its first checkpoint can be resumed or started, and the advice says which."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SHORT, TINY, built_once, run_cli, snapshot
from conftest import short_config as config

from translate.data.sources import sample_dir
from translate.errors import UserError
from translate.train import train


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory) -> Path:
    """A copy of the sample corpus in a folder of its own (data.dir)."""

    def build(folder: Path) -> None:
        shutil.copytree(sample_dir(), folder / "sample")

    return built_once(tmp_path_factory, "sample-corpus", build) / "sample"


@pytest.fixture(scope="module")
def finished_template(tmp_path_factory, cache_dir, corpus_dir) -> Path:
    """Trained once for the test run (conftest.built_once): the tests copy it."""

    def build(folder: Path) -> None:
        train(config(folder / "run", cache_dir, f"data.dir={corpus_dir}"))

    return built_once(tmp_path_factory, "finished-data-dir", build) / "run"


@pytest.fixture
def finished(finished_template, tmp_path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(finished_template, run)
    return run


@pytest.mark.parametrize("max_steps", [4, 6], ids=["finished", "continued"])
def test_a_resume_with_other_heads_is_refused_and_changes_nothing(
    finished, cache_dir, corpus_dir, max_steps
):
    """Heads change no weight shape: before, the run trained on (or reported) as 4 heads."""
    before = snapshot(finished)
    overrides = ["trainer.resume=true", f"trainer.max_steps={max_steps}", "heads=4"]
    with pytest.raises(UserError) as err:
        train(config(finished, cache_dir, f"data.dir={corpus_dir}", *overrides))
    message = str(err.value)
    assert "heads=2 in the checkpoint, 4 here" in message and "\n" not in message
    assert "model.num_heads" not in message  # heads says it once
    assert snapshot(finished) == before


@pytest.mark.parametrize(
    "override,named",
    [
        ("seed=2", "seed=1 in the checkpoint, 2 here"),
        ("data.filter.max_len_ratio=2.0", "data.filter.max_len_ratio=3.0 in the checkpoint"),
        ("model.attention_impl=manual", "model.attention_impl=sdpa in the checkpoint"),
    ],
)
def test_every_setting_of_the_model_or_data_is_compared(
    finished, cache_dir, corpus_dir, override, named
):
    before = snapshot(finished)
    overrides = ["trainer.resume=true", "trainer.max_steps=6", override]
    with pytest.raises(UserError, match="other model or data settings") as err:
        train(config(finished, cache_dir, f"data.dir={corpus_dir}", *overrides))
    assert named in str(err.value)
    assert snapshot(finished) == before


def test_schedule_and_budget_may_change_and_the_log_says_so(
    finished, cache_dir, corpus_dir, caplog
):
    overrides = ["trainer.resume=true", "trainer.max_steps=6", "optim.lr=1e-3"]
    with caplog.at_level("WARNING", logger="translate.training"):
        results = train(config(finished, cache_dir, f"data.dir={corpus_dir}", *overrides))
    assert results["steps"] == 6
    assert "other schedule or budget settings: optim.lr=0.002 in the checkpoint, 0.001" in (
        caplog.text
    )


def test_a_finished_run_with_other_data_says_the_data_differs(
    finished, cache_dir, corpus_dir, tmp_path
):
    """Another data.dir with other test text is refused; the same text elsewhere is the same
    data, and the finished run only reports its results."""
    before = snapshot(finished)
    other = tmp_path / "other"
    shutil.copytree(corpus_dir, other)
    (other / "test.en").write_text((other / "test.en").read_text().upper())
    with pytest.raises(UserError) as err:
        train(config(finished, cache_dir, f"data.dir={other}", "trainer.resume=true"))
    message = str(err.value)
    assert "is a finished run" in message and "the text of the test split differs" in message
    assert f"data.dir={corpus_dir} in the checkpoint, {other} here" in message
    assert snapshot(finished) == before

    moved = tmp_path / "moved"
    shutil.copytree(corpus_dir, moved)
    again = train(config(finished, cache_dir, f"data.dir={moved}", "trainer.resume=true"))
    assert again == json.loads((finished / "results.json").read_text())
    assert snapshot(finished) == before


def test_a_resume_onto_other_training_text_is_refused(finished, cache_dir, corpus_dir, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(corpus_dir, other)
    lines = (other / "train.de").read_text().splitlines(keepends=True)
    (other / "train.de").write_text("".join(lines[1:] + lines[:1]))  # misaligned pairs
    with pytest.raises(UserError, match="the text of the train split differs"):
        train(
            config(
                finished, cache_dir, f"data.dir={other}", "trainer.resume=true",
                "trainer.max_steps=6",
            )
        )  # fmt: skip


# ---------------------------------------------------------------- killed during the first save

KILL_WHILE_SAVING = """
import os, runpy, signal, sys
import translate.checkpoint as checkpoint

def killed(state, f):
    f.write(b"half a checkpoint")
    f.flush()
    os.kill(os.getpid(), signal.SIGKILL)

checkpoint.torch.save = killed
sys.argv = ["translate.train", *sys.argv[1:]]
runpy.run_module("translate.train", run_name="__main__")
"""


@pytest.fixture(scope="module")
def killed_template(tmp_path_factory, cache_dir) -> Path:
    """A run dir whose process was SIGKILLed while writing its first checkpoint (once for the
    test run: conftest.built_once; the tests copy it)."""

    def build(folder: Path) -> None:
        run = folder / "run"
        args = [*TINY, *SHORT, f"data.cache_dir={cache_dir}", f"hydra.run.dir={run}"]
        proc = subprocess.run(
            [sys.executable, "-c", KILL_WHILE_SAVING, *args], cwd=ROOT, capture_output=True
        )
        assert proc.returncode == -9, proc.stderr.decode()
        assert list((run / "checkpoints").glob(".step_*.tmp")), "the write was not interrupted"

    return built_once(tmp_path_factory, "killed-while-saving", build) / "run"


@pytest.mark.parametrize("resume", [True, False], ids=["resumed", "started anew"])
def test_a_run_killed_during_its_first_save_can_be_resumed_or_started(
    killed_template, tmp_path, cache_dir, resume
):
    """Before, resume said 'start anew' and a fresh run said 'resume': a circle."""
    run = tmp_path / "run"
    shutil.copytree(killed_template, run)
    args = [*TINY, *SHORT, f"data.cache_dir={cache_dir}", f"hydra.run.dir={run}"]
    proc = run_cli("translate.train", *args, f"trainer.resume={str(resume).lower()}")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((run / "results.json").read_text())["steps"] == 4
    log = proc.stdout + proc.stderr
    assert "removed 1 partial file(s) of an interrupted write" in log
    assert not list(run.rglob(".*.tmp"))
    if resume:
        assert "holds no complete checkpoint" in log and "from step 0" in log


def test_resume_into_a_dir_without_any_run_names_the_command_that_works(tmp_path, cache_dir):
    run = tmp_path / "typo"
    with pytest.raises(UserError) as err:
        train(config(run, cache_dir, "trainer.resume=true"))
    message = str(err.value)
    assert "holds no run to resume" in message and "leave out trainer.resume=true" in message
    assert "start anew with trainer.resume=false" not in message
