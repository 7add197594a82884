"""Training-loop state that outlives a step: counters a checkpoint saves and the limits they
reach, the epoch's batch order (so a resumed run skips exactly what it trained on), stop
requests by signal, and the progress bar."""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Iterator
from dataclasses import dataclass

from tqdm.auto import tqdm

from translate.data.batching import Batch, TokenBatchSampler, collate
from translate.data.corpus import EncodedSplit
from translate.errors import UserError
from translate.schema import TrainerSettings
from translate.training.distributed import shard

log = logging.getLogger(__name__)


@dataclass
class Progress:
    """Counters that a checkpoint saves and a resumed run restores."""

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


def budget_reached(p: Progress, t: TrainerSettings) -> str | None:
    """Which budget ``p`` has used up (``trainer.max_steps`` or ``max_minutes``), if any."""
    if p.step >= t.max_steps:
        return f"max_steps={t.max_steps}"
    if t.max_minutes is not None and p.train_seconds >= t.max_minutes * 60:
        return f"max_minutes={t.max_minutes}"
    return None


def early_stopped(p: Progress, t: TrainerSettings) -> str | None:
    """Early stopping's verdict: ``trainer.early_stopping_patience`` validations without gain."""
    patience = t.early_stopping_patience
    if patience is not None and p.stale_validations >= patience:
        return f"early stopping ({patience} validations without gain)"
    return None


def limit_reached(p: Progress, t: TrainerSettings) -> str | None:
    """Which limit ``p`` has reached (steps, minutes, epochs, early stopping), if any."""
    epochs = f"max_epochs={t.max_epochs}" if p.epoch >= t.max_epochs else None
    return budget_reached(p, t) or epochs or early_stopped(p, t)


class TrainBatches:
    """The training split's token batches, in a per-epoch order fixed by ``(seed, epoch)``,
    so a resumed run can skip exactly the micro-batches it already trained on.

    Under DDP (``world_size > 1``) rank ``r`` trains on batches ``r, r + N, ...`` of what is
    left of the epoch's order (:func:`~translate.training.distributed.shard`), so the
    ranks' shares are disjoint and equally long; ``skip`` and ``Progress.batches_in_epoch``
    count micro-batches of all ranks together (``consumed``), which keeps resuming exact.
    """

    def __init__(
        self, split: EncodedSplit, max_tokens: int, seed: int, rank: int = 0, world_size: int = 1
    ) -> None:
        self.split = split
        self.sampler = TokenBatchSampler(split.src_lens, split.tgt_lens, max_tokens, True, seed)
        self.rank, self.world_size = rank, world_size
        if world_size > 1 and len(self.sampler) < world_size:
            raise UserError(
                f"the training split makes only {len(self.sampler)} token batches per epoch, "
                f"fewer than the {world_size} processes; lower data.max_tokens or use fewer"
            )

    def consumed(self, group: list[Batch]) -> int:
        """Micro-batches of the epoch that one update over ``group`` used, on all ranks."""
        return len(group) * self.world_size

    def epoch(self, epoch: int, skip: int, accumulate: int) -> Iterator[list[Batch]]:
        """Groups of ``accumulate`` micro-batches (one optimizer update each), after ``skip``
        micro-batches of the epoch's order (all ranks' together)."""
        self.sampler.set_epoch(epoch)
        order = shard(list(self.sampler)[skip:], self.rank, self.world_size)
        for start in range(0, len(order), accumulate):
            yield [
                collate([self.split[i] for i in idx]) for idx in order[start : start + accumulate]
            ]


# SIGUSR1/SIGUSR2: what SLURM sends ahead of a job's time limit when asked to (`--signal`;
# hydra-submitit-launcher asks for USR2, `signal_delay_s` before the limit).
STOP_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGUSR1", "SIGUSR2")
    if hasattr(signal, name)
)


class Stopped(Exception):
    """A stop signal that could not wait for a step boundary (see :class:`StopRequest`)."""

    def __init__(self, signum: int, forced: bool) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum, self.forced = signum, forced


class StopRequest:
    """Turns SIGINT/SIGTERM (and SLURM's SIGUSR1/SIGUSR2 warning of the time limit) into a flag
    checked at step boundaries (save, then exit).

    A second signal cannot wait: it raises :class:`Stopped` (``forced``) at once. With
    ``immediate=True`` (while scoring, where there is no step boundary) the first one does.
    """

    def __init__(self, immediate: bool = False) -> None:
        self.signal: int | None = None
        self.immediate = immediate
        self._previous = {}

    def __enter__(self):
        for sig in STOP_SIGNALS:
            # Outside the main thread signals cannot be caught: leave them alone.
            with contextlib.suppress(ValueError):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.signal is not None or self.immediate:
            raise Stopped(signum, forced=self.signal is not None)
        self.signal = signum
        log.warning(
            "%s received: saving a checkpoint at the next step boundary",
            signal.Signals(signum).name,
        )

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


class TrainBar:
    """The training progress bar: how far the run is towards whichever limit ends it first.

    Progress is ``max(step / max_steps, seconds / max_minutes)`` in per mille, so under a time
    budget (``trainer.max_minutes``) the bar and its ETA follow the clock instead of showing
    ``0/100000`` steps with a 15-hour ETA; the step count, loss, learning rate and tokens/s
    are in the postfix.
    """

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
        """Move to where ``progress`` is; ``postfix`` (loss=..., lr=...) replaces the last."""
        self.bar.update(max(0, self._permille(progress) - self.bar.n))
        if postfix:
            self._postfix = postfix
        steps = f"{progress.step}/{self.max_steps}"
        self.bar.set_postfix(step=steps, **self._postfix, refresh=False)

    def close(self) -> None:
        self.bar.close()
