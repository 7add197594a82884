"""Training-loop state that outlives a step: counters a checkpoint saves, the limits they
reach, and the progress bar."""

from __future__ import annotations

from dataclasses import dataclass

from tqdm.auto import tqdm

from translate.schema import OptimSettings, TrainerSettings


@dataclass
class Progress:
    step: int = 0  # optimizer updates done
    epoch: int = 0
    batches_in_epoch: int = 0  # micro-batches of `epoch` already consumed
    train_seconds: float = 0.0
    tokens: int = 0  # source + target tokens trained on
    best_dev_bleu: float = -1.0
    best_step: int = 0
    stale_validations: int = 0
    bad_steps: int = 0  # skipped updates in a row (trainer.max_bad_steps stops the run)
    skipped_updates: int = 0  # skipped updates in all, reported at the end of the run
    last_val_step: int = 0  # the newest validation's step and dev loss (None: not validated)
    last_dev_loss: float | None = None
    lowest_dev_loss: float | None = None
    loss_stale_validations: int = 0  # validations since the lowest dev loss
    # optim.cooldown_patience's cooldown: the step it started at and the step it ends at.
    cooldown_from: int | None = None
    cooldown_to: int | None = None


def budget_reached(p: Progress, t: TrainerSettings) -> str | None:
    if p.cooldown_to is not None and p.step >= p.cooldown_to:
        return f"optim.cooldown_patience: the cooldown from step {p.cooldown_from} ended"
    if p.step >= t.max_steps:
        return f"max_steps={t.max_steps}"
    if t.max_minutes is not None and p.train_seconds >= t.max_minutes * 60:
        return f"max_minutes={t.max_minutes}"
    return None


def early_stopped(p: Progress, t: TrainerSettings) -> str | None:
    patience = t.early_stopping_patience
    if patience is not None and p.stale_validations >= patience:
        return f"early stopping ({patience} validations without gain)"
    return None


def note_dev_loss(p: Progress, loss: float, o: OptimSettings) -> bool:
    """Count the validations since the lowest dev loss; after ``optim.cooldown_patience`` of
    them the cooldown starts now, over ``optim.cooldown`` times the updates done (the share the
    budget's cooldown would take had the budget ended here). True when it starts."""
    if p.lowest_dev_loss is None or loss < p.lowest_dev_loss:  # a NaN loss is no new low
        p.lowest_dev_loss, p.loss_stale_validations = loss, 0
    else:
        p.loss_stale_validations += 1
    patience = o.cooldown_patience
    if patience is None or p.cooldown_to is not None or p.loss_stale_validations < patience:
        return False
    p.cooldown_from, p.cooldown_to = p.step, p.step + max(1, round(o.cooldown * p.step))
    return True


def limit_reached(p: Progress, t: TrainerSettings) -> str | None:
    epochs = f"max_epochs={t.max_epochs}" if p.epoch >= t.max_epochs else None
    return budget_reached(p, t) or epochs or early_stopped(p, t)


class TrainBar:
    """How far the run is towards whichever limit ends it first, in per mille, so under a time
    budget the bar and its ETA follow the clock; the step count is in the postfix."""

    def __init__(self, progress: Progress, max_steps: int, max_minutes: float | None, enabled):
        self.max_steps = max_steps
        self.max_seconds = None if max_minutes is None else max_minutes * 60
        self._postfix: dict = {}
        self.bar = tqdm(
            total=1000,
            initial=self._permille(progress),
            desc="train",
            disable=not enabled,
            dynamic_ncols=True,
            bar_format="{l_bar}{bar}| {elapsed}<{remaining}{postfix}",
            # The mean rate of the whole run, not a moving one: validations recur, and a
            # moving rate put the ETA of a 2-minute run at 9 minutes after each of them.
            smoothing=0,
        )

    def _permille(self, progress: Progress) -> int:
        fraction = progress.step / self.max_steps
        if self.max_seconds:
            fraction = max(fraction, progress.train_seconds / self.max_seconds)
        return min(1000, int(1000 * fraction))

    def update(self, progress: Progress, **postfix) -> None:
        """Move to ``progress``; ``postfix`` (loss=..., lr=...) replaces the last."""
        self.bar.update(max(0, self._permille(progress) - self.bar.n))
        if postfix:
            self._postfix = postfix
        steps = f"{progress.step}/{self.max_steps}"
        self.bar.set_postfix(step=steps, **self._postfix, refresh=False)

    def close(self) -> None:
        self.bar.close()
