"""Training-loop state that outlives a step: counters a checkpoint saves, the epoch's batch
order (so a resumed run skips exactly what it trained on), and stop requests by signal."""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Iterator
from dataclasses import dataclass

from translate.data import Batch, EncodedSplit, TokenBatchSampler, collate

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
    bad_steps: int = 0


class TrainBatches:
    """The training split's token batches, in a per-epoch order fixed by ``(seed, epoch)``,
    so a resumed run can skip exactly the micro-batches it already trained on."""

    def __init__(self, split: EncodedSplit, max_tokens: int, seed: int) -> None:
        self.split = split
        self.sampler = TokenBatchSampler(split.src_lens, split.tgt_lens, max_tokens, True, seed)

    def epoch(self, epoch: int, skip: int, accumulate: int) -> Iterator[list[Batch]]:
        """Groups of ``accumulate`` micro-batches (one optimizer update each), after ``skip``."""
        self.sampler.set_epoch(epoch)
        order = list(self.sampler)[skip:]
        for start in range(0, len(order), accumulate):
            yield [
                collate([self.split[i] for i in idx]) for idx in order[start : start + accumulate]
            ]


class StopRequest:
    """Turns SIGINT/SIGTERM into a flag checked at step boundaries (save, then exit)."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self._previous = {}

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            # Outside the main thread signals cannot be caught: leave them alone.
            with contextlib.suppress(ValueError):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.signal is not None:  # a second Ctrl-C stops at once
            raise KeyboardInterrupt
        self.signal = signum
        log.warning(
            "%s received: saving a checkpoint at the next step boundary",
            signal.Signals(signum).name,
        )

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
