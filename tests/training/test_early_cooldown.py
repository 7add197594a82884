"""optim.cooldown_patience: a dev loss without a new low starts the cooldown early, and the run
ends with it (a machine that trains more updates than its recipe needs stops overfitting)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from conftest import SHORT_DECODE, TINY, compose_config

from translate.checkpoint import load_checkpoint
from translate.errors import UserError
from translate.schema import OptimSettings
from translate.settings import train_settings
from translate.train import train
from translate.training import loop
from translate.training.optim import Schedule
from translate.training.progress import Progress, note_dev_loss


def optim(patience: int | None, cooldown: float = 0.25) -> OptimSettings:
    settings = train_settings(compose_config("train", [*TINY, "run_dir=unused"])).optim
    return OptimSettings(**{**vars(settings), "cooldown": cooldown, "cooldown_patience": patience})


def test_an_early_cooldown_falls_linearly_from_its_start_to_zero():
    plain, cool = Schedule(0, cooldown=0.2, max_steps=10_000), Schedule(0, 0.2, 10_000)
    cool.early = (1000, 1400)
    assert all(cool(s) == plain(s) == 1.0 for s in range(0, 1001, 100))
    assert cool(1100) == pytest.approx(0.75) and cool(1300) == pytest.approx(0.25)
    assert cool(1400) == 0.0 and cool(2000) == 0.0


def test_the_cooldown_starts_after_patience_validations_without_a_new_lowest_dev_loss():
    p, o = Progress(), optim(patience=2)
    started = []
    # An equal loss is no new low, nor is a NaN one; a new low resets the count.
    for step, loss in zip(itertools.count(400, 400), [3.0, 2.5, 2.5, 2.4, math.nan, 2.45]):
        p.step = step
        started.append(note_dev_loss(p, loss, o))
    assert started == [False] * 5 + [True]
    assert p.lowest_dev_loss == 2.4 and p.loss_stale_validations == 2
    assert (p.cooldown_from, p.cooldown_to) == (2400, 2400 + 600)  # 0.25 of the 2,400 updates done
    p.step = 2800
    assert not note_dev_loss(p, 2.5, o) and p.cooldown_to == 3000  # started once


def test_without_patience_or_with_a_falling_loss_the_cooldown_follows_the_budget():
    for patience, losses in ((None, [3.0, 3.1, 3.2, 3.3]), (1, [3.0, 2.9, 2.8, 2.7])):
        p = Progress()
        for step, loss in enumerate(losses, 1):
            p.step = step * 100
            assert not note_dev_loss(p, loss, optim(patience))
        assert p.cooldown_to is None


def test_a_patience_without_a_cooldown_is_refused_in_one_line():
    overrides = [*TINY, "run_dir=unused", "optim.cooldown=0", "optim.cooldown_patience=2"]
    with pytest.raises(UserError, match=r"optim.cooldown_patience=2 needs a cooldown: set"):
        train_settings(compose_config("train", overrides))


@pytest.fixture
def rising_dev_loss(monkeypatch):
    """Every validation's dev loss is higher than the one before, whatever the model."""
    losses = itertools.count(3.0, 0.1)
    monkeypatch.setattr(loop, "mean_nll", lambda *args: next(losses))


def early_cfg(tiny_train_cfg, run_dir, *overrides):
    common = ["optim.cooldown=0.5", "optim.cooldown_patience=1", "optim.warmup_steps=0"]
    common += ["trainer.val_every_n_steps=4", "trainer.checkpoint_every_n_steps=4"]
    common += ["trainer.keep_last_checkpoints=2", *SHORT_DECODE]
    return tiny_train_cfg(*common, "model.dropout=0.1", *overrides, run_dir=run_dir)


def test_a_run_ends_when_its_early_cooldown_does(tiny_train_cfg, tmp_path, rising_dev_loss):
    """Validations at 4 (the lowest) and 8 (higher: patience 1): the rate falls to zero over
    the next 0.5 * 8 updates and the run stops at 12 of its 40."""
    results = train(early_cfg(tiny_train_cfg, tmp_path / "a", "trainer.max_steps=40"))
    assert results["steps"] == 12 and results["early_cooldown"] == [8, 12]
    checkpoints = tmp_path / "a" / "checkpoints"
    lr = tiny_train_cfg().optim.lr
    rates = {
        step: load_checkpoint(checkpoints / name)["optimizer"]["param_groups"][0]["lr"]
        for step, name in ((8, "step_00000008.pt"), (12, "last.pt"))
    }
    assert rates == {8: pytest.approx(lr), 12: 0.0}  # the next update's rate


def test_resume_over_an_early_cooldown_matches_an_uninterrupted_run(
    tiny_train_cfg, tmp_path, rising_dev_loss, monkeypatch
):
    """Stopped at step 10, in the cooldown that started at 8, and resumed. (Stopped by a
    stand-in for a signal: a smaller max_steps would move the budget's own cooldown.)"""
    straight = train(early_cfg(tiny_train_cfg, tmp_path / "a", "trainer.max_steps=40"))
    budget_reached = loop.budget_reached
    with monkeypatch.context() as m:
        m.setattr(loop, "budget_reached", lambda p, t: "a stop" if p.step == 10 else None)
        assert (
            train(early_cfg(tiny_train_cfg, tmp_path / "b", "trainer.max_steps=40"))["steps"] == 10
        )
    assert loop.budget_reached is budget_reached
    resumed = train(
        early_cfg(tiny_train_cfg, tmp_path / "b", "trainer.max_steps=40", "trainer.resume=true")
    )
    assert resumed["steps"] == straight["steps"] == 12
    assert resumed["early_cooldown"] == straight["early_cooldown"] == [8, 12]
    a = load_checkpoint(tmp_path / "a" / "checkpoints" / "last.pt")["model"]
    b = load_checkpoint(tmp_path / "b" / "checkpoints" / "last.pt")["model"]
    for name, tensor in a.items():
        torch.testing.assert_close(b[name], tensor, msg=name)
