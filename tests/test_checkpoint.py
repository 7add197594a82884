"""The checkpoint file: loading never runs code from it, and a file of another format is
refused in one line."""

from __future__ import annotations

import pathlib
import shutil

import pytest
import torch
from conftest import TINY, assert_one_line_error, compose_config, run_cli

from translate.checkpoint import load_checkpoint
from translate.errors import UserError
from translate.train import train


class _Payload:
    """Unpickling this creates ``marker``: what a hostile checkpoint could do instead."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return pathlib.Path.touch, (self.marker,)


@pytest.fixture
def hostile(trained_run, tmp_path) -> tuple[pathlib.Path, pathlib.Path]:
    """``(checkpoint, marker)``: the trained checkpoint plus an object whose unpickling
    creates ``marker``."""
    ckpt = load_checkpoint(trained_run[1]["checkpoint"])
    marker = tmp_path / "pwned"
    path = tmp_path / "hostile.pt"
    torch.save({**ckpt, "extra": _Payload(marker)}, path)
    return path, marker


def test_the_hostile_payload_is_live_when_loaded_unsafely(hostile):
    """The control: pickle's default loading really runs the payload."""
    path, marker = hostile
    torch.load(path, weights_only=False)
    assert marker.exists()


def test_load_checkpoint_refuses_code_and_runs_none(hostile):
    path, marker = hostile
    with pytest.raises(UserError, match="holds Python objects .* refused") as err:
        load_checkpoint(path)
    assert "\n" not in str(err.value) and not marker.exists()


@pytest.mark.parametrize(
    "module,extra",
    [
        ("translate.evaluate", ["decode=greedy"]),
        ("translate.translate", []),
        ("translate.analyze", []),
    ],
)
def test_commands_refuse_a_hostile_checkpoint(hostile, tmp_path, module, extra):
    path, marker = hostile
    proc = run_cli(module, f"checkpoint={path}", f"hydra.run.dir={tmp_path}", *extra, stdin="Hallo")
    assert_one_line_error(proc, "holds Python objects", "refused")
    assert not marker.exists()


def test_resume_refuses_a_hostile_last_checkpoint(hostile, tmp_path, cache_dir):
    path, marker = hostile
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copy(path, run / "checkpoints" / "last.pt")
    cfg = compose_config(
        "train", [*TINY, f"run_dir={run}", f"data.cache_dir={cache_dir}", "trainer.resume=true"]
    )
    with pytest.raises(UserError, match="holds Python objects"):
        train(cfg)
    assert not marker.exists()


def test_a_checkpoint_of_an_older_format_is_refused_in_one_line(trained_run, tmp_path):
    """Formats 1 and 2 (before grouped-query attention and the runtime group) are no longer
    read: a file of theirs is refused by name, not half-read."""
    ckpt = load_checkpoint(trained_run[1]["checkpoint"])
    old = tmp_path / "old.pt"
    torch.save({**ckpt, "format_version": 2}, old)
    with pytest.raises(UserError, match="is a checkpoint of format 2") as err:
        load_checkpoint(old)
    assert "\n" not in str(err.value)
