"""The optimisation step and its state: Adam, inverse-sqrt warm-up, label smoothing, AMP,
gradient accumulation and clipping, NaN/Inf guarding, and the resumable training state.
Under DistributedDataParallel one update spans every rank's micro-batches (see ``step``)."""

from __future__ import annotations

import contextlib
import logging
import math
from dataclasses import dataclass

import torch
import torch.distributed as tdist
from torch import Tensor

from translate.config import OptimSettings
from translate.data import Batch
from translate.model import Seq2SeqTransformer
from translate.runtime import autocast

log = logging.getLogger(__name__)


def inverse_sqrt_factor(warmup_steps: int):
    """LR multiplier at update ``step`` (0-based): linear warm-up to 1, then ``1/sqrt`` decay.
    With ``warmup_steps=0`` the learning rate is constant."""

    def factor(step: int) -> float:
        if warmup_steps == 0:
            return 1.0
        n = step + 1
        return min(n / warmup_steps, math.sqrt(warmup_steps / n))

    return factor


def sequence_loss(
    logits: Tensor, target: Tensor, pad_id: int, label_smoothing: float = 0.0
) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed cross-entropy and summed NLL over non-pad targets.

    ``logits (B, T, V)`` in any dtype are scored in float32; ``target (B, T)``. One
    log-softmax serves both sums (fairseq's ``label_smoothed_nll_loss``): the vocabulary-sized
    tensors dominate a small model's step, so computing them once matters. The smoothed loss
    spreads ``label_smoothing`` uniformly over the vocabulary, as ``F.cross_entropy`` does.
    """
    lprobs = torch.log_softmax(logits.float(), dim=-1).reshape(-1, logits.size(-1))  # (B*T, V)
    gold = target.reshape(-1, 1)  # (B*T, 1)
    keep = gold != pad_id
    nll = -lprobs.gather(1, gold)[keep].sum()
    if label_smoothing == 0.0:
        return nll, nll.detach()
    smooth = -lprobs.sum(dim=-1, keepdim=True)[keep].sum()
    eps = label_smoothing
    loss = (1.0 - eps) * nll + eps / lprobs.size(-1) * smooth
    return loss, nll.detach()


@dataclass
class StepResult:
    loss: float  # label-smoothed loss per target token (of all ranks' micro-batches)
    nll: float  # negative log-likelihood per target token
    grad_norm: float
    lr: float
    tokens: int  # source + target tokens, summed over all ranks
    skipped: bool  # True when the loss or gradients were not finite


class Trainer:
    """Owns the model's optimisation. ``step`` takes the micro-batches of one update.

    ``model`` is the bare module: its parameters, ``state_dict`` (so checkpoints never carry
    DDP's ``module.`` prefix) and evaluation. Training runs through ``compiled_model`` (a
    ``torch.compile``'d callable) if given, else ``ddp`` (the model wrapped in
    ``DistributedDataParallel`` when several processes train together), else ``model``.
    """

    def __init__(
        self,
        model: Seq2SeqTransformer,
        optim: OptimSettings,
        device: torch.device,
        precision: str,
        pad_id: int,
        compiled_model=None,
        ddp: torch.nn.parallel.DistributedDataParallel | None = None,
    ) -> None:
        self.model = model
        self.ddp = ddp
        self.forward = compiled_model or ddp or model  # all share the model's parameters
        self.world_size = tdist.get_world_size() if ddp is not None else 1
        self.rank = tdist.get_rank() if ddp is not None else 0
        self.device = device
        self.precision = precision
        self.pad_id = pad_id
        self.label_smoothing = optim.label_smoothing
        self.clip_norm = optim.clip_norm
        self.optimizer = torch.optim.Adam(
            model.parameters(),
            lr=optim.lr,
            betas=tuple(optim.betas),
            eps=optim.eps,
            weight_decay=optim.weight_decay,
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, inverse_sqrt_factor(optim.warmup_steps)
        )
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
        if self.ddp is not None:
            total_tgt, tokens = self._sum_over_ranks([total_tgt, tokens], torch.int64).tolist()
        loss_sum = nll_sum = 0.0
        for i, batch in enumerate(batches):
            batch = batch.to(self.device)
            defer_sync = self.ddp is not None and i < len(batches) - 1
            with self.ddp.no_sync() if defer_sync else contextlib.nullcontext():
                with autocast(self.device, self.precision):
                    logits = self.forward(batch.src, batch.tgt_in, batch.src_padding_mask)
                loss, nll = sequence_loss(logits, batch.tgt_out, self.pad_id, self.label_smoothing)
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
        loss_value = float(loss_sum) / total_tgt
        finite = math.isfinite(loss_value) and bool(torch.isfinite(grad_norm))
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
            nll=float(nll_sum) / total_tgt,
            grad_norm=float(grad_norm),
            lr=lr,
            tokens=tokens,
            skipped=not finite,
        )

    def _sum_over_ranks(self, values: list, dtype: torch.dtype) -> torch.Tensor:
        t = torch.stack([torch.as_tensor(v, dtype=dtype, device=self.device) for v in values])
        tdist.all_reduce(t)
        return t

    def _trace(self, batches: list[Batch], loss: float) -> None:
        """What this rank trained on and where its weights ended up, for checking DDP
        (``hydra.verbose=translate.trainer``): ranks must differ in examples, never in
        weights."""
        checksum = sum(float(p.detach().double().sum()) for p in self.model.parameters())
        log.debug(
            "rank %d update: loss %.10g | params %.17g | examples %s",
            self.rank,
            loss,
            checksum,
            [b.indices for b in batches],
        )

    @torch.no_grad()
    def evaluate_loss(self, batches) -> float:
        """Mean per-token NLL (no label smoothing) over ``batches``; ``exp`` is perplexity."""
        self.model.eval()
        nll_sum, tokens = 0.0, 0
        for batch in batches:
            batch = batch.to(self.device)
            with autocast(self.device, self.precision):
                logits = self.model(batch.src, batch.tgt_in, batch.src_padding_mask)
            nll_sum += float(sequence_loss(logits, batch.tgt_out, self.pad_id)[1])
            tokens += batch.num_tgt_tokens
        return nll_sum / max(tokens, 1)

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
