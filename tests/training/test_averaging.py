"""Checkpoint averaging: the mean of the weights, what is refused, the command, and
``trainer.average_last_n`` at the end of training."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import SHORT_DECODE, TINY, assert_one_line_error, compose_config, run_cli

from translate.average import average
from translate.checkpoint import FORMAT_VERSION, load_checkpoint, save_checkpoint
from translate.decoding.translator import load_translator
from translate.errors import UserError
from translate.evaluate import evaluate
from translate.settings import train_settings
from translate.train import train
from translate.training import report
from translate.training.averaging import around, average_checkpoints, step_checkpoints
from translate.training.loop import dev_scores
from translate.training.progress import Progress
from translate.training.saving import CheckpointManager


def _ckpt(path, weight, count=3, d_model=4, tokenizer=b"spm", step=1):
    """A small checkpoint with a float weight, an integer and a boolean buffer."""
    save_checkpoint(
        {
            "format_version": FORMAT_VERSION,
            "model": {
                "w": torch.as_tensor(weight, dtype=torch.float32),
                "count": torch.tensor([count, 7]),
                "flag": torch.tensor([True, False]),
            },
            "optimizer": {"state": {}},
            "config": {"model": {"d_model": d_model}},
            "tokenizer": tokenizer,
            "step": step,
            "progress": {"step": step},
        },
        path,
    )
    return path


def _mean(*paths):
    models = [load_checkpoint(p)["model"] for p in paths]
    return {k: sum(m[k].double() for m in models) / len(models) for k in models[0]}


def _assert_weights(model: dict, expected: dict) -> None:
    assert set(model) == set(expected)
    for key, value in expected.items():
        assert model[key].dtype == torch.float32 or not model[key].is_floating_point()
        assert torch.equal(model[key], value.to(model[key].dtype)), key


def test_averaging_copies_of_one_checkpoint_gives_its_weights_exactly(trained_run, tmp_path):
    run, _ = trained_run
    newest = step_checkpoints(run / "checkpoints")[-1]
    copies = _copies(newest, tmp_path, 3)
    averaged = average_checkpoints(copies)
    _assert_weights(averaged["model"], load_checkpoint(newest)["model"])
    assert averaged["averaged_from"] == [str(p) for p in copies]
    # Odd values that a float32 sum or mean would round: still exact.
    odd = torch.tensor([0.1, 1 / 3, 1e-38, 3.4e38, -7.123456789])
    path = _ckpt(tmp_path / "odd.pt", odd)
    assert torch.equal(average_checkpoints(_copies(path, tmp_path, 7))["model"]["w"], odd)


def _copies(path: Path, folder: Path, n: int) -> list[Path]:
    """``n`` checkpoints with ``path``'s weights, each of another step (one checkpoint named
    twice, or copied byte for byte, is refused: below)."""
    state = load_checkpoint(path)
    copies = [folder / f"copy{i}_{path.name}" for i in range(n)]
    for i, copy in enumerate(copies):
        save_checkpoint({**state, "step": state["step"] + i}, copy)
    return copies


def test_one_file_named_twice_is_refused_not_counted_twice(trained_run, tmp_path, capsys):
    """Before: "averaged 2 checkpoints" of one file, whether named twice or as last.pt and the
    step_*.pt it is a hard link to. The first case from the command line (one line, exit 2),
    the others in this process (each python -m costs seconds of imports)."""
    ckpts = trained_run[0] / "checkpoints"
    step = step_checkpoints(ckpts)[-1]
    assert (ckpts / "last.pt").samefile(step)
    copy = tmp_path / "copy.pt"  # the probe's case: a byte-for-byte copy counted twice
    shutil.copyfile(step, copy)
    out = tmp_path / "avg.pt"
    proc = run_cli("translate.average", f"checkpoints=[{step},{step}]", f"output={out}")
    assert_one_line_error(proc, f"name {step} twice", "name each checkpoint once")
    assert not out.exists() and "averaged" not in proc.stdout
    for listed, said in (
        ([ckpts / "last.pt", step], f"name {ckpts / 'last.pt'} and {step}, one checkpoint"),
        ([step, copy], f"name {step} and {copy}, one checkpoint"),
    ):
        overrides = [f"checkpoints=[{','.join(map(str, listed))}]", f"output={out}"]
        with pytest.raises(UserError) as err:
            average(compose_config("average", overrides))
        assert said in str(err.value) and "name each checkpoint once" in str(err.value)
        assert "\n" not in str(err.value)
        assert not out.exists() and "averaged" not in capsys.readouterr().out


def test_averaging_two_gives_the_mean_and_keeps_the_newest_ones_metadata(tmp_path):
    a = _ckpt(tmp_path / "a.pt", [1.0, 2.0, 0.1], step=4)
    b = _ckpt(tmp_path / "b.pt", [3.0, -2.0, 0.2], step=6, tokenizer=b"spm")
    averaged = average_checkpoints([b, a])  # the newest is the one of the highest step
    assert torch.equal(averaged["model"]["w"], torch.tensor([2.0, 0.0, 0.15]))
    assert torch.equal(averaged["model"]["count"], torch.tensor([3, 7]))
    assert averaged["step"] == 6 and averaged["progress"] == {"step": 6}
    assert "optimizer" not in averaged and averaged["format_version"] == FORMAT_VERSION
    save_checkpoint(averaged, tmp_path / "avg.pt")
    assert load_checkpoint(tmp_path / "avg.pt")["averaged_from"] == [str(b), str(a)]


@pytest.mark.parametrize(
    "other,message",
    [
        ({"d_model": 8}, "different model configs (model.d_model=4 in {a}, 8 in {b})"),
        ({"tokenizer": b"other"}, "they were trained with different tokenizers"),
        ({"count": 4}, "non-float entry model.count differs"),
        ({"weight": [1.0, 2.0]}, "model.w is float32 (3,) in {a}, float32 (2,) in {b}"),
    ],
)
def test_checkpoints_that_do_not_fit_together_are_refused_in_one_line(tmp_path, other, message):
    a = _ckpt(tmp_path / "a.pt", [1.0, 2.0, 3.0])
    b = _ckpt(tmp_path / "b.pt", **{"weight": [1.0, 2.0, 3.0], **other})
    with pytest.raises(UserError) as err:
        average_checkpoints([a, b])
    assert f"cannot average {b} with {a}" in str(err.value)
    assert message.format(a=a, b=b) in str(err.value) and "\n" not in str(err.value)


def test_the_command_writes_a_checkpoint_that_evaluate_scores(trained_run, tmp_path):
    run, _ = trained_run
    steps = step_checkpoints(run / "checkpoints")[-2:]
    out = tmp_path / "avg.pt"
    proc = run_cli("translate.average", f"run_dir={run}", "n=2", f"output={out}")
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {out}" in proc.stdout and f"{steps[0]}, {steps[1]}" in proc.stdout
    _assert_weights(load_checkpoint(out)["model"], _mean(*steps))
    assert load_translator(out).translator is not None
    cfg = compose_config(
        "evaluate", [f"checkpoint={out}", f"output_dir={tmp_path}", "decode=greedy", *SHORT_DECODE]
    )
    assert evaluate(cfg)["bleu"] >= 0 and (tmp_path / "hyp.txt").is_file()
    # The same two files, listed: the same weights.
    listed = f"checkpoints=[{steps[0]},{steps[1]}]"
    average(compose_config("average", [listed, f"output={tmp_path / 'listed.pt'}"]))
    _assert_weights(load_checkpoint(tmp_path / "listed.pt")["model"], _mean(*steps))


def test_the_command_says_what_is_wrong_in_one_line(trained_run, tmp_path):
    run, _ = trained_run
    step = step_checkpoints(run / "checkpoints")[-1]
    other = load_checkpoint(step)
    other["config"] = {**other["config"], "model": {**other["config"]["model"], "d_model": 64}}
    save_checkpoint(other, tmp_path / "other.pt")
    other = tmp_path / "other.pt"
    cases = [
        ([f"checkpoints=[{step},{tmp_path}/gone.pt]", "output=x.pt"], "checkpoint not found"),
        ([f"checkpoints=[{step},{other}]", f"output={tmp_path}/a.pt"], "model.d_model"),
        ([f"checkpoints=[{step},{other}]", f"output={tmp_path}/no/a.pt"], "does not exist"),
        ([f"checkpoints=[{step},{other}]", f"output={tmp_path}/best.pt"], "training's checkpoints"),
        ([f"checkpoints=[{step}]", "output=x.pt"], "at least 2"),
        ([f"checkpoints=[{step},{other}]"], "pass output=<file>"),
        ([f"run_dir={run}", "n=1"], "n=1 must be an integer >= 2"),
        ([f"run_dir={tmp_path}", "n=2"], "checkpoints does not exist"),
        ([], "pass checkpoints="),
    ]
    for overrides, message in cases:
        with pytest.raises(UserError) as err:
            average(compose_config("average", overrides))
        assert message in str(err.value) and "\n" not in str(err.value), overrides
    assert not (tmp_path / "a.pt").exists() and not (tmp_path / "best.pt").exists()
    proc = run_cli("translate.average", f"run_dir={run}", "n=9")
    assert_one_line_error(proc, "n=9 but", "pass n=2")


def test_too_large_an_n_suggests_only_values_the_command_accepts(trained_run, tmp_path):
    """The n it suggests averages; with fewer than 2 step checkpoints it suggests none."""
    steps = step_checkpoints(trained_run[0] / "checkpoints")
    for kept in (len(steps), 1):
        run = tmp_path / f"kept{kept}"
        (run / "checkpoints").mkdir(parents=True)
        for path in steps[-kept:]:
            shutil.copy(path, run / "checkpoints" / path.name)
        with pytest.raises(UserError) as err:
            average(compose_config("average", [f"run_dir={run}", f"n={kept + 1}"]))
        suggested = [int(n) for n in re.findall(r"\bn=(\d+)", str(err.value))[1:]]
        if kept < 2:
            assert not suggested and "checkpoints='[a.pt,b.pt]'" in str(err.value)
        for n in suggested:
            assert average(compose_config("average", [f"run_dir={run}", f"n={n}"]))["step"]


def test_average_last_n_is_checked_before_any_work():
    for value, message in ((4, "must be <= trainer.keep_last_checkpoints=3"), (-1, ">= 0")):
        overrides = [*TINY, "run_dir=unused", f"trainer.average_last_n={value}"]
        with pytest.raises(UserError) as err:
            train_settings(compose_config("train", overrides))
        assert f"trainer.average_last_n={value}" in str(err.value) and message in str(err.value)


def test_a_run_without_averaging_scores_best(trained_run):
    _, results = trained_run
    assert results["scored_checkpoint"] == "best" and results["averaged_dev_bleu"] is None
    assert results["checkpoint"].endswith("best.pt")


def _end_of_run(trained_run, tmp_path, steps: int, average_last_n: int, around_best=False):
    """What ``_choose_checkpoint`` reads of a run at its end: the last ``steps`` step
    checkpoints of the shared run (best.pt is the oldest), the newest weights in the model."""
    source = step_checkpoints(trained_run[0] / "checkpoints")[-steps:]
    ckpts = CheckpointManager(tmp_path / "checkpoints", keep_last=3)
    ckpts.directory.mkdir()
    for path in source:
        shutil.copy(path, ckpts.directory / path.name)
    os.link(ckpts.directory / source[0].name, ckpts.best)
    return SimpleNamespace(
        settings=SimpleNamespace(
            trainer=SimpleNamespace(average_last_n=average_last_n, average_around_best=around_best)
        ),
        ckpts=ckpts,
        progress=Progress(step=8, best_dev_bleu=10.0, best_step=4),
        model=load_translator(source[-1]).model,
        trainer=SimpleNamespace(device=torch.device("cpu")),
        writer=SimpleNamespace(add_scalar=lambda *args: None),
    )


@pytest.mark.parametrize(
    "averaged_bleu,chosen", [(5.0, "best"), (10.0, "best"), (20.0, "averaged")]
)
def test_the_test_split_is_scored_with_the_better_dev_bleu(
    trained_run, tmp_path, monkeypatch, averaged_bleu, chosen
):
    """best.pt has dev BLEU 10: a worse or equal average keeps it (its weights reloaded)."""
    monkeypatch.setattr(report, "dev_scores", lambda run: {"bleu": averaged_bleu})
    run = _end_of_run(trained_run, tmp_path, steps=2, average_last_n=2)
    scored = report._choose_checkpoint(run)
    assert (scored.name, scored.averaged_dev_bleu) == (chosen, averaged_bleu)
    assert scored.path == run.ckpts.directory / f"{chosen}.pt"
    assert scored.averaged_from == [p.name for p in step_checkpoints(run.ckpts.directory)]
    _assert_weights(run.model.state_dict(), load_checkpoint(scored.path)["model"])


def test_fewer_than_two_step_checkpoints_are_not_averaged(trained_run, tmp_path, caplog):
    run = _end_of_run(trained_run, tmp_path, steps=1, average_last_n=3)
    with caplog.at_level(logging.INFO, logger="translate.training.report"):
        scored = report._choose_checkpoint(run)
    assert (scored.name, scored.averaged_dev_bleu, scored.averaged_from) == ("best", None, None)
    assert not (run.ckpts.directory / "averaged.pt").exists()
    assert "1 step checkpoint(s)" in caplog.text and "nothing to average" in caplog.text


def test_training_with_average_last_n_writes_averaged_pt_and_says_what_it_scored(
    tiny_train_cfg, monkeypatch
):
    """The averaged dev BLEU is measured as validation does, then made better than best.pt's
    so that the test split is scored with it; validation runs once, at the stop."""

    def raised(run):  # the averaged weights' real dev scores, BLEU raised so they win
        scores = dev_scores(run)
        return {**scores, "bleu": scores["bleu"] + 100.0}

    monkeypatch.setattr(report, "dev_scores", raised)
    cfg = tiny_train_cfg(
        "trainer.max_steps=3",
        "trainer.val_every_n_steps=100",
        "trainer.checkpoint_every_n_steps=1",
        "trainer.average_last_n=2",
        "analysis.summary_sentences=0",
        *SHORT_DECODE,
    )
    results = train(cfg)
    run = Path(cfg.run_dir)
    steps = step_checkpoints(run / "checkpoints")
    assert [p.name for p in steps] == ["step_00000001.pt", "step_00000002.pt", "step_00000003.pt"]
    assert results["averaged_from"] == ["step_00000002.pt", "step_00000003.pt"]
    _assert_weights(load_checkpoint(run / "checkpoints/averaged.pt")["model"], _mean(*steps[1:]))
    assert results["scored_checkpoint"] == "averaged"
    assert results["averaged_dev_bleu"] == results["dev_bleu"] + 100.0  # BLEU of the same prefix
    assert results["checkpoint"] == str(run / "checkpoints" / "averaged.pt")
    assert json.loads((run / "results.json").read_text()) == results


# ---------------------------------------------------------------- around best.pt


@pytest.mark.parametrize("n", [1, 2, 3, 5])
@pytest.mark.parametrize("best_index", [0, 3, 7, 9])
def test_around_takes_n_files_from_half_of_n_before_the_step_on(n, best_index):
    paths = [Path(f"step_{100 * (i + 1):08d}.pt") for i in range(10)]
    window = around(paths, 100 * (best_index + 1), n)
    assert paths[best_index] in window and window == paths[paths.index(window[0]) :][: len(window)]
    assert window.index(paths[best_index]) == min(best_index, n // 2)
    assert len(window) == min(n, len(paths) - paths.index(window[0]))
    assert around(paths, 150, n) == []  # no file of that step


def test_the_manager_keeps_the_step_files_around_the_best(tmp_path):
    """Best at step 3 of 10: with keep_last 2 and 4 around the best (two before it, it, one
    after), steps 1-4 stay beside the newest two, through every save after it."""
    manager = CheckpointManager(tmp_path, keep_last=2, around_best=4)
    state = {"format_version": 1, "model": {}, "config": {}, "tokenizer": b"", "step": 0}
    for step in range(1, 11):
        manager.save({**state, "step": step}, step, is_best=step <= 3, best_step=min(step, 3))
    kept = [int(p.stem.split("_")[1]) for p in step_checkpoints(tmp_path)]
    assert kept == [1, 2, 3, 4, 9, 10]
    plain = CheckpointManager(tmp_path / "plain", keep_last=2)
    plain.directory.mkdir()
    for step in range(1, 11):
        plain.save({**state, "step": step}, step, is_best=step <= 3, best_step=min(step, 3))
    assert [p.name for p in step_checkpoints(plain.directory)][0] == "step_00000009.pt"


@pytest.mark.parametrize("around_best,averaged", [(False, [6, 7, 8]), (True, [3, 4, 5])])
def test_averaging_around_the_best_when_the_last_come_after_it(
    trained_run, tmp_path, monkeypatch, around_best, averaged
):
    """Step files 1-8, best.pt at step 4, three averaged: the newest three come after it, so
    with average_around_best the three around it are averaged (from one before it)."""
    monkeypatch.setattr(report, "dev_scores", lambda run: {"bleu": 20.0})
    run = _end_of_run(trained_run, tmp_path, steps=1, average_last_n=3, around_best=around_best)
    [source] = step_checkpoints(run.ckpts.directory)
    ckpt = load_checkpoint(source)
    for step in range(1, 9):  # one checkpoint's weights, each file another step of it
        path = run.ckpts.directory / f"step_{step:08d}.pt"
        save_checkpoint({**ckpt, "step": step}, path, adopt=True)
    scored = report._choose_checkpoint(run)
    assert scored.averaged_from == [f"step_{step:08d}.pt" for step in averaged]
