"""The optimiser recipe: AdamW (fairseq's Adam decays weights so; without weight decay its
update is Adam's, bit for bit) and its learning-rate schedule, from ``conf/optim/``."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from translate.schema import OptimSettings


class Schedule:
    """The learning-rate multiplier of each update: linear warm-up to 1 over ``warmup_steps``
    then ``1/sqrt`` decay (Vaswani et al. 2017; fairseq's ``inverse_sqrt``; 0: constant), and
    with ``cooldown`` > 0 a linear fall to zero over the last ``cooldown`` share of the budget
    (warmup-stable-decay: a run ends with cooled-down weights, whatever its length).

    The budget is ``max_steps`` updates or ``max_minutes`` of training, whichever runs out
    first: the training loop sets ``seconds`` (the training time so far) after each update, so
    a machine twice as fast cools down after twice the updates. ``early``: the steps where an
    early cooldown (``optim.cooldown_patience``) started and where the rate reaches zero.
    """

    def __init__(
        self,
        warmup_steps: int,
        cooldown: float = 0.0,
        max_steps: int | None = None,
        max_minutes: float | None = None,
    ) -> None:
        self.warmup_steps = warmup_steps
        self.cooldown = cooldown
        self.max_steps = max_steps
        self.max_seconds = None if max_minutes is None else max_minutes * 60
        self.seconds = 0.0
        self.early: tuple[int, int] | None = None

    def used(self, step: int) -> float:
        """Share of the budget (steps or seconds, the larger) used before update ``step + 1``."""
        shares = [0.0 if self.max_steps is None else step / self.max_steps]
        if self.max_seconds is not None:
            shares.append(self.seconds / self.max_seconds)
        return max(shares)

    def __call__(self, step: int) -> float:
        """The multiplier of update ``step + 1`` (``step`` updates are done)."""
        factor = 1.0
        if self.warmup_steps > 0:
            n = step + 1
            factor = min(n / self.warmup_steps, math.sqrt(self.warmup_steps / n))
        if self.cooldown > 0:
            factor *= min(1.0, max(0.0, 1.0 - self.used(step)) / self.cooldown)
        if self.early is not None:
            start, end = self.early
            factor *= min(1.0, max(0, end - step) / (end - start))
        return factor


def make_optimizer(
    params: Iterable[torch.nn.Parameter], optim: OptimSettings, schedule: Schedule | None = None
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    optimizer = torch.optim.AdamW(
        params,
        lr=optim.lr,
        betas=tuple(optim.betas),
        eps=optim.eps,
        weight_decay=optim.weight_decay,
    )
    schedule = schedule or Schedule(optim.warmup_steps)
    # A function around the schedule, not the schedule: LambdaLR saves a callable object's
    # attributes into the checkpoint and restores them on resume, over the resumed run's budget.
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: schedule(step))
    return optimizer, scheduler
