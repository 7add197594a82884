"""The optimiser recipe: Adam with decoupled weight decay (AdamW, as fairseq's Adam decays
weights) and linear warm-up then inverse-square-root decay (Vaswani et al. 2017; fairseq's
``inverse_sqrt``), all values from ``conf/optim/``. Without weight decay AdamW's update is
Adam's, bit for bit."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from translate.schema import OptimSettings


def inverse_sqrt_factor(warmup_steps: int):
    """LR multiplier at update ``step`` (0-based): linear warm-up to 1, then ``1/sqrt`` decay.
    With ``warmup_steps=0`` the learning rate is constant."""

    def factor(step: int) -> float:
        if warmup_steps == 0:
            return 1.0
        n = step + 1
        return min(n / warmup_steps, math.sqrt(warmup_steps / n))

    return factor


def make_optimizer(
    params: Iterable[torch.nn.Parameter], optim: OptimSettings
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """``(AdamW, its warm-up/decay schedule)`` for ``params``."""
    optimizer = torch.optim.AdamW(
        params,
        lr=optim.lr,
        betas=tuple(optim.betas),
        eps=optim.eps,
        weight_decay=optim.weight_decay,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, inverse_sqrt_factor(optim.warmup_steps)
    )
    return optimizer, scheduler
