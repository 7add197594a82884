"""The optimisation step and its resumable state (optimizer, scheduler, AMP scaler)."""

from __future__ import annotations

import contextlib
import logging
import math
from dataclasses import dataclass

import torch
import torch.distributed as tdist

from translate.data.batching import Batch
from translate.nn.model import Seq2SeqTransformer
from translate.schema import OptimSettings
from translate.scoring import batch_loss
from translate.training.optim import Schedule, make_optimizer

log = logging.getLogger(__name__)

# oneDNN, which runs a CPU's bf16 matmuls, builds and caches a kernel for every matrix shape,
# and Multi30k's token batches almost never repeat one: a bf16 step built kernels for as long
# as AMX saved. Positions padded to a multiple of 8 and the loss rows to one of 64 leave few
# shapes: 20,020 tokens/s against 14,838 unpadded on an Intel Xeon with AMX (fp32: 14,652, and
# 13,230 padded, so fp32 never pads; docs/benchmarks.md, "bf16 on the CPU").
SEQ_MULTIPLE, ROW_MULTIPLE = 8, 64


def pads_shapes(device: torch.device, precision: str) -> bool:
    """Whether a step in ``precision`` on ``device`` pads its shapes (:data:`SEQ_MULTIPLE`)."""
    return device.type == "cpu" and precision == "bf16"


@dataclass
class StepResult:
    loss: float  # label-smoothed loss per target token (of all ranks' micro-batches)
    nll: float  # negative log-likelihood per target token
    grad_norm: float
    lr: float
    tokens: int  # source + target tokens, summed over all ranks
    padded_tokens: int  # source + target positions with padding (rows * longest), all ranks
    skipped: bool  # True when the loss or gradients were not finite


class Trainer:
    """Owns the model's optimisation. ``model`` is the bare module (its ``state_dict`` never
    carries DDP's ``module.`` prefix); training runs through ``compiled_model`` if given, else
    ``ddp``, else ``model``. ``schedule`` defaults to ``optim``'s, without a cooldown."""

    def __init__(
        self,
        model: Seq2SeqTransformer,
        optim: OptimSettings,
        device: torch.device,
        precision: str,
        pad_id: int,
        compiled_model=None,
        ddp: torch.nn.parallel.DistributedDataParallel | None = None,
        schedule: Schedule | None = None,
        pad_shapes: bool = False,
    ) -> None:
        self.model = model
        self.ddp = ddp
        # All three share the model's parameters. `is not None`, not `or`: bool() of a
        # torch.compile wrapper asks the model for len() and fails.
        wrapped = compiled_model if compiled_model is not None else ddp
        self.forward = wrapped if wrapped is not None else model
        self.world_size = tdist.get_world_size() if ddp is not None else 1
        self.rank = tdist.get_rank() if ddp is not None else 0
        self.device = device
        self.precision = precision
        self.pad_id = pad_id
        self.label_smoothing = optim.label_smoothing
        self.pad_shapes = pad_shapes  # see SEQ_MULTIPLE
        self.clip_norm = optim.clip_norm
        # The training loop tells a cooldown under a clock the time (``schedule.seconds``).
        self.schedule = schedule or Schedule(optim.warmup_steps)
        self.optimizer, self.scheduler = make_optimizer(model.parameters(), optim, self.schedule)
        # Loss scaling only for fp16; bf16 has fp32's range.
        self.scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")

    def step(self, batches: list[Batch]) -> StepResult:
        """One optimizer update over ``batches`` (gradient accumulation), loss normalised by
        the total number of target tokens so accumulation equals one large batch.

        Under DDP the update spans all ranks: the target-token total is summed over the ranks
        (``T``), and each rank backpropagates ``world_size * loss_r / T``; DDP averages the
        ranks' gradients (sum / ``world_size``), which leaves ``sum_r grad(loss_r) / T``, the
        gradient of one process training on every rank's micro-batches. Gradients are
        all-reduced once per update: ``no_sync`` on all micro-batches but the last.
        """
        self.model.train()
        total_tgt = sum(b.num_tgt_tokens for b in batches)
        tokens = sum(b.num_src_tokens + b.num_tgt_tokens for b in batches)
        padded = sum(b.src.numel() + b.tgt_out.numel() for b in batches)
        if self.ddp is not None:
            counts = self._sum_over_ranks([total_tgt, tokens, padded], torch.int64)
            total_tgt, tokens, padded = counts.tolist()
        loss_sum = nll_sum = 0.0
        for i, batch in enumerate(batches):
            defer_sync = self.ddp is not None and i < len(batches) - 1
            with self.ddp.no_sync() if defer_sync else contextlib.nullcontext():
                loss, nll = self._loss(batch)
                self.scaler.scale(loss / total_tgt * self.world_size).backward()
            loss_sum += loss.detach()
            nll_sum += nll
        if self.ddp is not None:
            loss_sum, nll_sum = self._sum_over_ranks([loss_sum, nll_sum], torch.float32)
        self.scaler.unscale_(self.optimizer)
        params = self.model.parameters()
        if self.clip_norm > 0:
            grad_norm = torch.nn.utils.clip_grad_norm_(params, self.clip_norm)
        else:
            grad_norm = torch.linalg.vector_norm(
                torch.stack([p.grad.norm() for p in self.model.parameters() if p.grad is not None])
            )
        # The values the loop reads, in one host-device sync (float64 holds float32 exactly).
        values = self._stacked([loss_sum, nll_sum, grad_norm], torch.float64)
        loss_total, nll_total, norm = values.tolist()
        loss_value = loss_total / total_tgt
        finite = math.isfinite(loss_value) and math.isfinite(norm)
        lr = self.optimizer.param_groups[0]["lr"]
        if finite or self.scaler.is_enabled():
            # With fp16 the scaler skips the update itself on inf/NaN grads and lowers the scale.
            self.scaler.step(self.optimizer)
            self.scaler.update()
        if finite:
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        if log.isEnabledFor(logging.DEBUG):
            self._trace(batches, loss_value)
        return StepResult(
            loss=loss_value,
            nll=nll_total / total_tgt,
            grad_norm=norm,
            lr=lr,
            tokens=tokens,
            padded_tokens=padded,
            skipped=not finite,
        )

    def _loss(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        rows = 1
        if self.pad_shapes:
            batch, rows = batch.padded(SEQ_MULTIPLE, self.pad_id), ROW_MULTIPLE
        return batch_loss(
            self.forward,
            batch,
            self.device,
            self.precision,
            self.pad_id,
            self.label_smoothing,
            rows,
        )

    def _stacked(self, values: list, dtype: torch.dtype) -> torch.Tensor:
        return torch.stack([torch.as_tensor(v, dtype=dtype, device=self.device) for v in values])

    def _sum_over_ranks(self, values: list, dtype: torch.dtype) -> torch.Tensor:
        t = self._stacked(values, dtype)
        tdist.all_reduce(t)
        return t

    def _trace(self, batches: list[Batch], loss: float) -> None:
        """For checking DDP (``hydra.verbose=translate.training.step``): ranks must differ in
        examples, never in weights."""
        checksum = sum(float(p.detach().double().sum()) for p in self.model.parameters())
        log.debug(
            "rank %d update: loss %.10g | params %.17g | examples %s",
            self.rank,
            loss,
            checksum,
            [b.indices for b in batches],
        )

    def state_dict(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
