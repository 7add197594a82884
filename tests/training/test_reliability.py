"""Faults a user meets: interrupted runs, bad configs, bad data, bad checkpoints, bad numerics.

The command line is the interface for exit codes and messages, so those tests run the real
commands in subprocesses. See docs/reliability.md for the table of faults and tests.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import ROOT, TINY, assert_one_line_error, listing, run_cli
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from translate import checkpoint as checkpoint_module
from translate.checkpoint import load_checkpoint
from translate.data.batching import collate
from translate.errors import UserError
from translate.schema import ModelSettings, OptimSettings
from translate.train import train
from translate.training.saving import CheckpointManager
from translate.training.step import Trainer


@pytest.fixture
def checkpoint(trained_run) -> Path:
    return trained_run[0] / "checkpoints" / "best.pt"


# ---------------------------------------------------------------- command-line errors


@pytest.mark.parametrize(
    "overrides,fragments",
    [
        (["heads=3"], ["model.d_model=128 is not divisible by heads=3"]),
        (["model.attention_impl=fast"], ["model.attention_impl=fast is unknown"]),
        (["runtime.precision=fp16"], ["fp16 needs a CUDA GPU"]),
        (["data.max_tokens=16"], ["data.max_tokens=16 is smaller than the longest allowed"]),
        (["data=multi30k", "data.dir=/nonexistent/m30k"], ["/nonexistent/m30k"]),
        (["runtime.device=meta"], ["runtime.device=meta must be auto, cpu, cuda or cuda:N"]),
        (["runtime.num_threads=100000"], ["runtime.num_threads=100000 must be in 1.."]),
        # A key in the wrong group: Hydra's five lines suggested +trainer.lr, refused in turn.
        (["trainer.lr=1e-3"], ["unknown key trainer.lr (optim.lr?); the keys of trainer are"]),
        (["analysis.degenerate.max=1"], ["the keys of analysis.degenerate are uniform_entropy"]),
    ],
)
def test_train_cli_rejects_bad_input_with_one_line(overrides, fragments, tmp_path):
    proc = run_cli(
        "translate.train", "experiment=quickstart", f"hydra.run.dir={tmp_path}", *overrides
    )
    assert_one_line_error(proc, *fragments)


def test_evaluate_cli_missing_and_corrupt_checkpoints(tmp_path):
    proc = run_cli(
        "translate.evaluate", f"checkpoint={tmp_path / 'nope.pt'}", f"hydra.run.dir={tmp_path}"
    )
    assert_one_line_error(proc, "checkpoint not found")
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"\x00not a checkpoint" * 100)
    proc = run_cli("translate.evaluate", f"checkpoint={garbage}", f"hydra.run.dir={tmp_path}")
    assert_one_line_error(proc, "truncated or corrupt")


def test_truncated_checkpoint_and_foreign_file_are_user_errors(checkpoint, tmp_path):
    data = checkpoint.read_bytes()
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError, match="truncated or corrupt"):
        load_checkpoint(truncated)
    foreign = tmp_path / "weights.pt"
    torch.save({"weight": torch.zeros(2)}, foreign)
    with pytest.raises(UserError, match="not a translate checkpoint"):
        load_checkpoint(foreign)


def test_translate_cli_keeps_lines_aligned(checkpoint):
    lines = [
        "Der Hund schläft.",
        "",
        "   ",
        "Die Katze 😺 sieht Привет 你好",
        "Hund " * 100,
        "Ende.",
    ]
    proc = run_cli(
        "translate.translate",
        f"checkpoint={checkpoint}",
        "decode=greedy",
        stdin="\n".join(lines) + "\n",
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.split("\n")
    assert out[-1] == "" and len(out) - 1 == len(lines)
    assert out[1] == "" and out[2] == ""
    assert "truncated" in proc.stderr and "line 5" in proc.stderr


# ---------------------------------------------------------------- checkpoints


def test_crash_while_saving_leaves_previous_checkpoint_intact(tmp_path, monkeypatch):
    manager = CheckpointManager(tmp_path, keep_last=3)
    state = {"format_version": 1, "model": {}, "config": {}, "tokenizer": b"", "step": 1}
    manager.save(state, 1, is_best=True)
    before = manager.last.read_bytes()

    def crash(obj, f):
        f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint_module.torch, "save", crash)
    with pytest.raises(OSError):
        manager.save({**state, "step": 2}, 2, is_best=True)
    assert manager.last.read_bytes() == before and manager.best.read_bytes() == before
    assert listing(tmp_path) == ["best.pt", "last.pt", "step_00000001.pt"]


def test_resume_refuses_a_different_model_config(tiny_train_cfg, tmp_path):
    run = tmp_path / "run"
    train(tiny_train_cfg("trainer.max_steps=2", run_dir=run))
    with pytest.raises(UserError, match="model.d_ff=64 in the checkpoint, 48 here"):
        train(
            tiny_train_cfg(
                "trainer.max_steps=4", "trainer.resume=true", "model.d_ff=48", run_dir=run
            )
        )


def test_resume_without_a_checkpoint_says_which_file_is_missing(tiny_train_cfg, tmp_path):
    with pytest.raises(UserError, match="last.pt does not exist"):
        train(tiny_train_cfg("trainer.resume=true", run_dir=tmp_path / "empty"))


# ---------------------------------------------------------------- numerics


def test_non_finite_loss_skips_the_update():
    torch.manual_seed(0)
    model = ModelSettings(16, 2, 1, 1, 32, 0.0, 0.0, 0.0, "relu", True, "manual").build(30, 0)
    trainer = Trainer(model, OptimSettings(1e-3, [0.9, 0.98], 1e-9, 0.0, 0, 0.0, 0.1, 1.0),
                      torch.device("cpu"), "32", pad_id=0)  # fmt: skip
    before = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():
        model.embedding.embed.weight[5, 0] = float("nan")
    batch = collate([(0, [5, 6, 7], [8, 9])])
    result = trainer.step([batch])
    assert result.skipped
    changed = [not torch.equal(a, b) for a, b in zip(before, model.parameters())]
    assert sum(changed) == 1  # only the weight we poisoned
    assert trainer.scheduler.last_epoch == 0


def test_run_stops_after_consecutive_nan_losses(tiny_train_cfg, monkeypatch):
    import translate.training.step as trainer_module

    real_loss = trainer_module.batch_loss

    def nan_loss(*args, **kwargs):
        loss, nll = real_loss(*args, **kwargs)
        return loss * float("nan"), nll * float("nan")

    monkeypatch.setattr(trainer_module, "batch_loss", nan_loss)
    with pytest.raises(UserError, match="3 consecutive steps had a NaN/Inf loss") as err:
        train(tiny_train_cfg("trainer.max_bad_steps=3", "trainer.max_steps=50"))
    assert "runtime.precision=bf16" in str(err.value)


def test_skipped_updates_are_counted_in_the_results_and_the_closing_line(
    tiny_train_cfg, monkeypatch, caplog
):
    """Before, a run that skipped updates (fewer than trainer.max_bad_steps in a row) ended
    `status: completed` with no word of them."""
    import translate.training.step as trainer_module

    real_loss, calls = trainer_module.batch_loss, []

    def nan_at_first(*args, **kwargs):  # the first 3 training updates come out NaN
        loss, nll = real_loss(*args, **kwargs)
        calls.append(torch.is_grad_enabled())
        bad = torch.is_grad_enabled() and sum(calls) <= 3
        return (loss * float("nan"), nll) if bad else (loss, nll)

    monkeypatch.setattr(trainer_module, "batch_loss", nan_at_first)
    with caplog.at_level("WARNING"):
        results = train(tiny_train_cfg("trainer.max_bad_steps=5", "trainer.max_steps=4"))
    assert results["steps"] == 4 and results["skipped_nonfinite_updates"] == 3
    last = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"][-1]
    assert last.startswith("3 of 7 updates were skipped as non-finite") and "optim.lr=" in last


def test_greedy_on_a_beam_run_names_the_key_to_set(tiny_train_cfg):
    """Before, the hint said "(or beam_size=1)", a key no command line has."""
    with pytest.raises(UserError, match="add decode.beam_size=1 for greedy search"):
        train(tiny_train_cfg("decode=beam", "decode.strategy=greedy"))


def _diverge_after(monkeypatch, good_steps: int) -> None:
    """Every update after the first ``good_steps`` leaves NaN weights, as a learning rate far
    too high does (optim.lr=1e3); the updates before train normally."""
    real_step, calls = Trainer.step, []

    def step(self, batches):
        result = real_step(self, batches)
        calls.append(1)
        if len(calls) > good_steps:
            with torch.no_grad():
                for p in self.model.parameters():
                    p.fill_(float("nan"))
        return result

    monkeypatch.setattr(Trainer, "step", step)


def test_a_nan_model_is_never_best_and_the_stop_says_what_the_checkpoints_are(
    tiny_train_cfg, tmp_path, monkeypatch, caplog
):
    """Before, a NaN model decoded to a BLEU above the initial -1 and became best.pt, and the
    stop called the newest checkpoint 'good'."""
    _diverge_after(monkeypatch, good_steps=2)
    overrides = ["trainer.max_steps=50", "trainer.val_every_n_steps=1", "trainer.max_bad_steps=2"]
    with caplog.at_level("INFO", logger="translate.training"), pytest.raises(UserError) as err:
        train(tiny_train_cfg(*overrides))
    ckpts = tmp_path / "run" / "checkpoints"
    best = load_checkpoint(ckpts / "best.pt")
    # Step 3's update left NaN weights; its validation and checkpoint see them.
    assert best["step"] <= 2 and all(torch.isfinite(v).all() for v in best["model"].values())
    assert "step 3: dev loss nan" in caplog.text and "never best: weights" in caplog.text
    message = str(err.value)
    assert "good" not in message
    assert f"The newest checkpoint is {ckpts / 'last.pt'} (step 3, dev loss nan)" in message
    assert f"best.pt is step {best['step']} (dev BLEU" in message


def test_a_non_finite_dev_loss_is_never_best(tiny_train_cfg, tmp_path, monkeypatch):
    from translate.training import loop

    monkeypatch.setattr(loop, "mean_nll", lambda *args, **kwargs: float("nan"))
    results = train(tiny_train_cfg("trainer.max_steps=4", "trainer.val_every_n_steps=2"))
    assert not (tmp_path / "run" / "checkpoints" / "best.pt").exists()
    assert results["scored_checkpoint"] == "last"


def test_an_average_with_non_finite_weights_is_never_written(trained_run, tmp_path):
    from translate.training.averaging import average_into

    good = trained_run[0] / "checkpoints" / "best.pt"
    ckpt = load_checkpoint(good)
    name = next(iter(ckpt["model"]))
    ckpt["model"][name] = torch.full_like(ckpt["model"][name], float("inf"))
    bad = tmp_path / "diverged.pt"
    torch.save(ckpt, bad)
    output = tmp_path / "averaged.pt"
    with pytest.raises(UserError, match=f"has non-finite weights \\({name}\\)"):
        average_into([good, bad], output)
    assert not output.exists()


# ---------------------------------------------------------------- interruption


def start_training(run_dir: Path, cache_dir: Path, *extra: str) -> subprocess.Popen:
    args = [
        *TINY, f"data.cache_dir={cache_dir}", f"hydra.run.dir={run_dir}",
        "trainer.max_steps=100000", "trainer.val_every_n_steps=100000",
        "trainer.checkpoint_every_n_steps=5", *extra,
    ]  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-m", "translate.train", *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def wait_for_checkpoint(proc: subprocess.Popen, path: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.2)


def resume_training(run_dir: Path, cache_dir: Path, max_steps: int):
    """``python -m translate.train ... trainer.resume=true`` on ``run_dir`` up to ``max_steps``."""
    return run_cli(
        "translate.train", *TINY, f"data.cache_dir={cache_dir}", f"hydra.run.dir={run_dir}",
        "trainer.resume=true", f"trainer.max_steps={max_steps}",
    )  # fmt: skip


def train_losses(run_dir: Path) -> dict[int, float]:
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    return {e.step: e.value for e in events.Scalars("train/loss")}


@pytest.mark.slow
def test_sigterm_saves_and_exits_cleanly_then_resumes(tmp_path, cache_dir):
    run = tmp_path / "run"
    proc = start_training(run, cache_dir)
    wait_for_checkpoint(proc, run / "checkpoints" / "last.pt")
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, output
    assert "Traceback" not in output and "trainer.resume=true" in output
    step = load_checkpoint(run / "checkpoints" / "last.pt")["step"]
    assert step >= 5
    resumed = resume_training(run, cache_dir, max_steps=step + 3)
    assert resumed.returncode == 0, resumed.stderr
    assert load_checkpoint(run / "checkpoints" / "last.pt")["step"] == step + 3


@pytest.mark.slow
def test_sigkill_mid_training_resumes_from_the_last_checkpoint(tmp_path, cache_dir):
    run = tmp_path / "run"
    proc = start_training(run, cache_dir)
    wait_for_checkpoint(proc, run / "checkpoints" / "step_00000010.pt")
    # last.pt is pointed at a step file just after it is written: wait for that too, or a
    # loaded machine kills the run in between and last.pt is still the step before.
    deadline = time.monotonic() + 120
    while load_checkpoint(run / "checkpoints" / "last.pt")["step"] < 10:
        assert proc.poll() is None and time.monotonic() < deadline, "last.pt never reached step 10"
        time.sleep(0.2)
    proc.kill()
    proc.wait(timeout=30)
    saved = load_checkpoint(run / "checkpoints" / "last.pt")["step"]
    assert saved >= 10
    # Train on to an even step: TINY logs the loss every 2 steps, and the last one must be logged.
    target = (saved // 2 + 3) * 2
    resumed = resume_training(run, cache_dir, max_steps=target)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from" in resumed.stdout + resumed.stderr
    assert load_checkpoint(run / "checkpoints" / "last.pt")["step"] == target
    losses = train_losses(run)
    assert max(losses) == target
    before = [v for s, v in losses.items() if s <= saved]
    after = [v for s, v in losses.items() if s > saved]
    # The curve continues from where it stopped instead of starting again from the top.
    assert after and before and after[0] < before[0]
    assert abs(after[0] - before[-1]) < 0.5 * (before[0] - before[-1]) + 0.5
