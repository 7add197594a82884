"""A resume starts from the newest checkpoint that loads and is this experiment's, and never
writes over another experiment's: every checkpoint of the dir is checked, whichever ones are
there (issue 41, item 2). Before, a dir with step_*.pt but no last.pt "held no complete
checkpoint", and a heads=4 run retrained over a heads=2 run's step files."""

from __future__ import annotations

import io
import os
import random
import shutil
from pathlib import Path

import pytest
import torch
from conftest import SHORT, TINY, assert_one_line_error, run_cli, snapshot
from conftest import short_config as config

from translate.checkpoint import load_checkpoint
from translate.errors import UserError
from translate.train import train
from translate.training.averaging import average_into
from translate.training.resume import newest_resumable


@pytest.fixture(scope="module")
def finished_template(short_run) -> Path:
    """A finished heads=2 run (TINY): step_00000002.pt, step_00000004.pt, last.pt, best.pt."""
    return short_run


def _layout(template: Path, run: Path, kept: str) -> Path:
    """A copy of the run without its results, whose checkpoints/ holds only ``kept``."""
    shutil.copytree(template, run)
    (run / "results.json").unlink()
    ckpts = run / "checkpoints"
    if kept == "averaged.pt":
        average_into(sorted(ckpts.glob("step_*.pt")), ckpts / "averaged.pt")
    for path in ckpts.glob("*.pt"):
        if not (path.name.startswith("step_") if kept == "step_*.pt" else path.name == kept):
            path.unlink()
    return run


def test_step_files_without_last_pt_refuse_another_experiment(
    finished_template, tmp_path, cache_dir
):
    """The issue's case: `trainer.resume=auto heads=4` into a heads=2 run's step files."""
    run = _layout(finished_template, tmp_path / "run", "step_*.pt")
    before = snapshot(run / "checkpoints")
    args = [*TINY, *SHORT, f"data.cache_dir={cache_dir}", f"hydra.run.dir={run}", "heads=4"]
    proc = run_cli("translate.train", *args, "trainer.resume=auto")
    assert_one_line_error(
        proc,
        f"{run / 'checkpoints' / 'step_00000004.pt'} was trained with other model or data",
        "heads=2 in the checkpoint, 4 here",
        "hydra.run.dir=<new folder>",
        "trainer.resume=false trainer.overwrite=true",
    )
    assert "starting from step 0" not in proc.stdout + proc.stderr
    assert snapshot(run / "checkpoints") == before


@pytest.mark.parametrize("mode", ["true", "auto", "false"])
@pytest.mark.parametrize("kept", ["step_*.pt", "best.pt", "averaged.pt"])
def test_no_checkpoint_of_another_experiment_is_written_over(
    finished_template, tmp_path, cache_dir, mode, kept
):
    """Whatever checkpoint is left and whatever trainer.resume says, a heads=4 run stops
    before it writes. (false was refused before too: the dir holds a run.)"""
    run = _layout(finished_template, tmp_path / "run", kept)
    before = snapshot(run / "checkpoints")
    with pytest.raises(UserError) as err:
        train(config(run, cache_dir, f"trainer.resume={mode}", "heads=4"))
    refused = "already holds a run" if mode == "false" else "heads=2 in the checkpoint, 4 here"
    assert refused in str(err.value)
    assert snapshot(run / "checkpoints") == before


@pytest.mark.parametrize("kept", ["step_*.pt", "best.pt"])
def test_the_same_experiment_resumes_from_what_is_left(
    finished_template, tmp_path, cache_dir, caplog, kept
):
    run = _layout(finished_template, tmp_path / "run", kept)
    newest = "step_00000004.pt" if kept == "step_*.pt" else "best.pt"
    with caplog.at_level("INFO", logger="translate.training.resume"):
        results = train(config(run, cache_dir, "trainer.resume=auto", "trainer.max_steps=6"))
    assert f"resumed from {run / 'checkpoints' / newest}" in caplog.text
    assert results["steps"] == 6


def test_an_average_alone_cannot_be_resumed(finished_template, tmp_path, cache_dir):
    """Weights without their optimizer: neither resumed nor written over by a run from step 0."""
    run = _layout(finished_template, tmp_path / "run", "averaged.pt")
    before = snapshot(run)
    with pytest.raises(UserError, match="can be resumed .*averaged.pt: averaged weights, without"):
        train(config(run, cache_dir, "trainer.resume=auto"))
    assert snapshot(run) == before


def test_a_truncated_last_pt_resumes_from_the_newest_whole_step_file(
    finished_template, tmp_path, cache_dir, caplog
):
    """last.pt a copy (where hard links are unsupported) that a crash cut short."""
    run = _layout(finished_template, tmp_path / "run", "step_*.pt")
    ckpts = run / "checkpoints"
    (ckpts / "last.pt").write_bytes((ckpts / "step_00000004.pt").read_bytes()[:5000])
    with caplog.at_level("INFO", logger="translate.training.resume"):
        results = train(config(run, cache_dir, "trainer.resume=true", "trainer.max_steps=6"))
    assert f"not resumed from: checkpoint {ckpts / 'last.pt'} is truncated" in caplog.text
    assert f"resumed from {ckpts / 'step_00000004.pt'} at step 4" in caplog.text
    assert results["steps"] == 6


# ---------------------------------------------------------------- the choice, as a property

HERE = {"heads": 2, "seed": 1, "trainer": {"max_steps": 10}}
OTHER = {"heads": 4, "seed": 1, "trainer": {"max_steps": 10}}


def _checkpoint(step: int, config: dict, average: bool = False) -> bytes:
    """A small checkpoint of ``config`` at ``step`` (an average has no optimizer state)."""
    state = {"format_version": 3, "model": {"w": torch.zeros(2)}, "config": config}
    state |= {"tokenizer": b"spm", "step": step, "progress": {"step": step}}
    if not average:
        state["optimizer"] = {}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def _draw(rng: random.Random, folder: Path) -> tuple[dict, dict]:
    """A random checkpoints/ folder: step files that are whole, cut short or another
    experiment's, last.pt linked to or copied from the newest, best.pt, an average. Returns
    ``{name: (step, kind)}`` of each file written and ``{link: step file}`` of the hard links."""
    states, twins = {}, {}
    for step in rng.sample([2, 4, 6, 8], rng.randint(0, 4)):
        states[f"step_{step:08d}.pt"] = (step, rng.choice(["whole", "whole", "cut", "other"]))
    for name in ("last.pt", "best.pt"):
        if states and rng.random() < 0.7:
            source = max(states) if name == "last.pt" else rng.choice(sorted(states))
            if rng.random() < 0.5:
                twins[name] = source  # a hard link: the same file
            else:
                states[name] = (states[source][0], rng.choice(["whole", "cut"]))
    if rng.random() < 0.3:
        states["averaged.pt"] = (max([s for s, _ in states.values()], default=2), "average")
    for name, (step, kind) in states.items():
        data = _checkpoint(step, OTHER if kind == "other" else HERE, kind == "average")
        (folder / name).write_bytes(data[: len(data) // 2] if kind == "cut" else data)
    for name, source in twins.items():
        (folder / name).hardlink_to(folder / source)
    return states, twins


@pytest.mark.parametrize("seed", range(120))
def test_the_resumed_checkpoint_is_the_newest_whole_one_of_this_experiment(tmp_path, seed):
    states, twins = _draw(random.Random(seed), tmp_path)
    others = sorted(name for name, (_, kind) in states.items() if kind == "other")
    whole = {name: step for name, (step, kind) in states.items() if kind == "whole"}
    if others:
        with pytest.raises(UserError, match="heads=4 in the checkpoint, 2 here"):
            newest_resumable(tmp_path, HERE, None)
    elif not whole and states:
        with pytest.raises(UserError, match="can be resumed"):
            newest_resumable(tmp_path, HERE, None)
    else:
        chosen = newest_resumable(tmp_path, HERE, None)
        if not whole:
            assert chosen is None
        else:
            name = twins.get(chosen.name, chosen.name)
            assert whole.get(name) == max(whole.values()), (chosen, states, twins)


def test_a_step_file_cut_short_is_trained_again_and_replaced(
    finished_template, tmp_path, cache_dir
):
    """`truncate` on last.pt cuts its hard-linked step_00000004.pt and best.pt too: the resume
    starts from step 2 and must write step 4 again over the cut file (before: it trained, then
    refused to replace 'a training checkpoint output changed since it was written')."""
    run = _layout(finished_template, tmp_path / "run", "step_*.pt")
    ckpts = run / "checkpoints"
    os.link(ckpts / "step_00000004.pt", ckpts / "last.pt")
    with open(ckpts / "last.pt", "r+b") as f:
        f.truncate(5000)
    results = train(config(run, cache_dir, "trainer.resume=true"))
    assert results["status"] == "completed" and results["steps"] == 4
    assert torch.load(ckpts / "step_00000004.pt", weights_only=True)["step"] == 4


def test_a_run_killed_before_linking_its_newest_checkpoint_points_at_it_after_a_resume(
    finished_template, tmp_path, cache_dir
):
    """A kill between writing step_00000004.pt and linking last.pt (and best.pt) to it: the
    resume starts from step 4, already at its limit, trains nothing and writes no checkpoint,
    yet both names must be the resumed state's (at eb0d597 last.pt stayed at step 2)."""
    run = _layout(finished_template, tmp_path / "run", "step_*.pt")
    ckpts = run / "checkpoints"
    newest = ckpts / "step_00000004.pt"
    best_step = torch.load(newest, weights_only=True)["progress"]["best_step"]
    os.link(ckpts / "step_00000002.pt", ckpts / "last.pt")
    # best.pt at the other step (in this template's run step 2 was the best): a name the state
    # disagrees with, whichever it is, is pointed at the state's.
    other = "step_00000002.pt" if best_step == 4 else "step_00000004.pt"
    os.link(ckpts / other, ckpts / "best.pt")
    results = train(config(run, cache_dir, "trainer.resume=true"))
    assert results["steps"] == 4
    assert (ckpts / "last.pt").samefile(newest)
    assert (ckpts / "best.pt").samefile(ckpts / f"step_{best_step:08d}.pt")


def test_a_signal_stopped_run_resumed_at_its_limit_still_ends_validated(
    finished_template, tmp_path, cache_dir, caplog
):
    """A signal saves without validating; resumed with a budget it has already reached, the run
    trains nothing, yet its stop validates and checkpoints as every other stop does (before,
    the scoring took an older best.pt and step 4 was never validated)."""
    run = _layout(finished_template, tmp_path / "run", "step_*.pt")
    newest = run / "checkpoints" / "step_00000004.pt"
    state = torch.load(newest, weights_only=True)
    state["progress"]["last_val_step"] = 2  # as saved by a SIGTERM at step 4
    torch.save(state, newest)
    with caplog.at_level("INFO", logger="translate.training.loop"):
        results = train(config(run, cache_dir, "trainer.resume=true"))
    assert results["steps"] == 4
    assert "step 4: dev loss" in caplog.text
    assert load_checkpoint(run / "checkpoints" / "last.pt")["progress"]["last_val_step"] == 4
