"""The training split's batches in a per-epoch order fixed by ``(seed, epoch)``, sharded over
DDP ranks, so a resumed run skips exactly the micro-batches it already trained on."""

from __future__ import annotations

from collections.abc import Iterator

from translate.data.batching import Batch, TokenBatchSampler, collate
from translate.data.corpus import EncodedSplit
from translate.errors import UserError
from translate.training.distributed import shard


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
