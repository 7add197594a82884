"""The optimisation step and its resumable state (optimizer, scheduler, AMP scaler)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from translate.data.batching import Batch
from translate.nn.model import Seq2SeqTransformer
from translate.schema import OptimSettings
from translate.scoring import batch_loss
from translate.training.optim import Schedule, make_optimizer

# oneDNN builds a kernel for every shape of a CPU's bf16 matmuls, and Multi30k's token batches
# almost never repeat one. Positions padded to a multiple of 8 and loss rows to one of 64 leave
# few shapes: 20,020 tokens/s against 14,838 unpadded on an Intel Xeon with AMX (fp32: 14,652,
# 13,230 padded, so fp32 never pads; docs/benchmarks.md, "bf16 on the CPU").
SEQ_MULTIPLE, ROW_MULTIPLE = 8, 64
STATES = ("model", "optimizer", "scheduler", "scaler")  # a checkpoint's, in this order


def pads_shapes(device: torch.device, precision: str) -> bool:
    return device.type == "cpu" and precision == "bf16"  # see SEQ_MULTIPLE


@dataclass
class StepResult:
    loss: float  # label-smoothed loss per target token
    nll: float  # negative log-likelihood per target token
    grad_norm: float
    lr: float
    tokens: int  # source + target tokens
    padded_tokens: int  # source + target positions with padding (rows * longest)
    skipped: bool  # True when the loss or gradients were not finite


class Trainer:
    """Owns the model's optimisation; trains through ``compiled_model`` if given."""

    def __init__(
        self,
        model: Seq2SeqTransformer,
        optim: OptimSettings,
        device: torch.device,
        precision: str,
        pad_id: int,
        compiled_model=None,
        schedule: Schedule | None = None,
        pad_shapes: bool = False,
    ) -> None:
        self.model = model
        # Both share the model's parameters. `is not None`, not `or`: bool() of a
        # torch.compile wrapper asks the model for len() and fails.
        self.forward = compiled_model if compiled_model is not None else model
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
        """One update over ``batches``, normalised by their target tokens: as one large batch."""
        self.model.train()
        total_tgt = sum(b.num_tgt_tokens for b in batches)
        tokens = sum(b.num_src_tokens + b.num_tgt_tokens for b in batches)
        padded = sum(b.src.numel() + b.tgt_out.numel() for b in batches)
        loss_sum = nll_sum = 0.0
        for batch in batches:
            loss, nll = self._loss(batch)
            self.scaler.scale(loss / total_tgt).backward()
            loss_sum += loss.detach()
            nll_sum += nll
        self.scaler.unscale_(self.optimizer)
        params = self.model.parameters()
        if self.clip_norm > 0:
            grad_norm = torch.nn.utils.clip_grad_norm_(params, self.clip_norm)
        else:
            grad_norm = torch.linalg.vector_norm(
                torch.stack([p.grad.norm() for p in self.model.parameters() if p.grad is not None])
            )
        # The values the loop reads, in one host-device sync (float64 holds float32 exactly).
        values = (loss_sum, nll_sum, grad_norm)
        as_f64 = [torch.as_tensor(v, dtype=torch.float64, device=self.device) for v in values]
        loss_total, nll_total, norm = torch.stack(as_f64).tolist()
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

    def state_dict(self) -> dict:
        return {name: getattr(self, name).state_dict() for name in STATES}

    def load_state_dict(self, state: dict) -> None:
        for name in STATES:
            getattr(self, name).load_state_dict(state[name])
