"""The training progress bar follows whichever limit ends the run first."""

from __future__ import annotations

from translate.training.progress import Progress, TrainBar


def test_under_a_time_budget_the_bar_follows_the_clock(capsys):
    bar = TrainBar(Progress(), max_steps=100_000, max_minutes=1.0, enabled=True)
    bar.update(Progress(step=10, train_seconds=30.0), loss="1.234")
    assert bar.bar.n == 500  # half the minute, not 10 of 100,000 steps
    text = str(bar.bar)
    assert "50%" in text and "step=10/100000" in text and "loss=1.234" in text
    bar.close()


def test_the_step_limit_counts_when_it_comes_first(capsys):
    bar = TrainBar(Progress(), max_steps=10, max_minutes=60.0, enabled=True)
    bar.update(Progress(step=8, train_seconds=6.0))
    assert bar.bar.n == 800
    bar.close()


def test_a_resumed_run_starts_where_it_stopped(capsys):
    bar = TrainBar(
        Progress(step=25, train_seconds=1.0), max_steps=100, max_minutes=None, enabled=True
    )
    assert bar.bar.n == 250
    bar.close()
