"""The training loop: :func:`fit` trains a :class:`~translate.training.run.Run` until a limit,
early stopping or a signal, validating and checkpointing on the way."""

from __future__ import annotations

import datetime as dt
import logging
import math
import signal
import time
from collections.abc import Iterator

import numpy as np
from tqdm.contrib.logging import logging_redirect_tqdm

from translate.analysis.figures import CARD_TOKENS, log_attention
from translate.checkpoint import non_finite
from translate.data.batching import Batch, TokenBatchSampler, collate
from translate.data.corpus import EncodedSplit
from translate.errors import UserError
from translate.metrics import score
from translate.runtime.memory import reset_peak_memory
from translate.scoring import mean_nll
from translate.training.progress import (
    TrainBar,
    budget_reached,
    early_stopped,
    limit_reached,
    note_dev_loss,
)
from translate.training.run import Run, Window
from translate.training.saving import checkpoint_state
from translate.training.signals import StopRequest
from translate.training.step import StepResult

log = logging.getLogger(__name__)

ETA_AFTER_STEPS = 200  # updates before the log says when the budget will end


class TrainBatches:
    """Batches in an order fixed by ``(seed, epoch)``: a resumed run skips the ones it trained."""

    def __init__(self, split: EncodedSplit, max_tokens: int, seed: int) -> None:
        self.split = split
        self.sampler = TokenBatchSampler(split.src_lens, split.tgt_lens, max_tokens, True, seed)

    def epoch(self, epoch: int, skip: int, accumulate: int) -> Iterator[list[Batch]]:
        """Groups of ``accumulate`` micro-batches (one update each), after ``skip`` of them."""
        self.sampler.set_epoch(epoch)
        order = list(self.sampler)[skip:]
        for start in range(0, len(order), accumulate):
            yield [
                collate([self.split[i] for i in idx]) for idx in order[start : start + accumulate]
            ]


def _log_eta(run: Run) -> None:
    p, t = run.progress, run.settings.trainer
    seconds_per_step = p.train_seconds / max(p.step, 1)
    left = (t.max_steps - p.step) * seconds_per_step
    if t.max_minutes is not None:
        left = min(left, t.max_minutes * 60 - p.train_seconds)
    end = dt.datetime.now() + dt.timedelta(seconds=max(left, 0))
    log.info(
        "step %d: %.2f steps/s, %s tokens/s; the budget (max_steps=%d%s) ends in about %s, at %s",
        p.step,
        1 / seconds_per_step,
        f"{p.tokens / max(p.train_seconds, 1e-9):,.0f}",
        t.max_steps,
        "" if t.max_minutes is None else f", max_minutes={t.max_minutes}",
        str(dt.timedelta(seconds=round(max(left, 0)))),
        end.strftime("%Y-%m-%d %H:%M"),
    )


def fit(run: Run) -> tuple[str, int | None]:
    """Train until a limit, early stopping or a signal; returns ``(why it stopped, signal
    number or None)``. Every stop but a signal ends with a validation and a checkpoint."""
    t, p, c = run.settings.trainer, run.progress, run.corpus
    batches = TrainBatches(c.splits["train"], c.max_tokens, run.settings.seed)
    reset_peak_memory(run.trainer.device)
    _tell_schedule(run)  # a resumed run's clock and early cooldown
    bar = TrainBar(p, t.max_steps, t.max_minutes, t.progress_bar)
    # A resumed run may already be at a limit (e.g. it stopped while scoring): no extra step.
    stop_reason = limit_reached(p, t)
    with StopRequest() as stop, logging_redirect_tqdm():
        if stop_reason is not None and p.last_val_step != p.step:
            # Stopped by a signal (which saves without validating), then resumed with a budget
            # it has reached: this stop validates and checkpoints as every other one does.
            _validate_and_checkpoint(run, stop_reason, None)
        for result in _updates(run, batches) if stop_reason is None else ():
            if result is not None:
                _log_step(run, result, bar)
                stop_reason = _stop_reason(run, stop)
                sig = stop.signal
            elif p.epoch >= t.max_epochs:  # the last epoch has ended
                stop_reason, sig = limit_reached(p, t), None
            else:
                continue
            stop_reason = _validate_and_checkpoint(run, stop_reason, sig)
            if stop_reason:
                break
        bar.close()
    return stop_reason, stop.signal


def _updates(run: Run, batches: TrainBatches) -> Iterator[StepResult | None]:
    """Each counted update's result, and None at each epoch's end: where a run may stop."""
    p, t = run.progress, run.settings.trainer
    loop_start = time.perf_counter() - p.train_seconds
    while True:
        for group in batches.epoch(p.epoch, p.batches_in_epoch, t.accumulate_grad_batches):
            result = run.trainer.step(group)
            p.batches_in_epoch += len(group)
            p.train_seconds = time.perf_counter() - loop_start
            if _count_step(run, result):
                yield result
        p.epoch, p.batches_in_epoch = p.epoch + 1, 0
        yield None


def _count_step(run: Run, result: StepResult) -> bool:
    """Count an update; False for a skipped (NaN/Inf) one."""
    p, t = run.progress, run.settings.trainer
    if result.skipped:
        p.bad_steps += 1
        p.skipped_updates += 1
        log.warning("step %d: loss or gradient is NaN/Inf, update skipped", p.step + 1)
        if p.bad_steps >= t.max_bad_steps:
            raise UserError(
                f"{p.bad_steps} consecutive steps had a NaN/Inf loss; {nonfinite_causes(run)}. "
                f"{_checkpoints_as_they_are(run)}"
            )
        return False
    p.bad_steps = 0
    p.step += 1
    p.tokens += result.tokens
    run.window = run.window._replace(tokens=run.window.tokens + result.tokens)
    return True


def nonfinite_causes(run: Run) -> str:
    return (
        f"likely causes: learning rate too high (optim.lr={run.settings.optim.lr}) or fp16 "
        "overflow (try runtime.precision=bf16)"
    )


def _checkpoints_as_they_are(run: Run) -> str:
    """The run's newest and best checkpoints: what they are, never a claim that either is good."""
    p, last = run.progress, run.ckpts.last
    if not last.exists():
        return "No checkpoint was written."
    step = run.start_step if run.saved_step is None else run.saved_step
    validated = p.last_val_step == step and p.last_dev_loss is not None
    dev = f"dev loss {p.last_dev_loss:,.3f}" if validated else "not validated"
    said = f"The newest checkpoint is {last} (step {step}, {dev})"
    if run.ckpts.best.exists():
        said += f"; best.pt is step {p.best_step} (dev BLEU {p.best_dev_bleu:.2f})"
    return said + "."


def _log_step(run: Run, result: StepResult, bar: TrainBar) -> None:
    p, t = run.progress, run.settings.trainer
    if p.step == run.start_step + ETA_AFTER_STEPS and p.step < t.max_steps:
        _log_eta(run)
    if p.step % t.log_every_n_steps != 0:
        bar.update(p)
        return
    now = time.perf_counter()
    tps = run.window.tokens / max(now - run.window.start, 1e-9)
    run.window = Window(0, now)
    # Of this step's padded positions, the share that holds tokens: what batching wastes.
    real = result.tokens / max(result.padded_tokens, 1)
    bar.update(
        p, loss=f"{result.loss:.3f}", lr=f"{result.lr:.2e}", tok_s=f"{tps:,.0f}", real=f"{real:.0%}"
    )
    train = {
        "loss": result.loss,
        "lr": result.lr,
        "grad_norm": result.grad_norm,
        "tokens_per_s": tps,
        "real_token_ratio": real,
    }
    for name, value in train.items():
        run.writer.add_scalar(f"train/{name}", value, p.step)


def _stop_reason(run: Run, stop: StopRequest) -> str | None:
    """A step or time limit, or a signal."""
    _tell_schedule(run)
    budget = budget_reached(run.progress, run.settings.trainer)
    return budget or (signal.Signals(stop.signal).name if stop.signal else None)


def _tell_schedule(run: Run) -> None:
    """The training time a cooldown under a clock follows, and an early cooldown's steps."""
    p, schedule = run.progress, run.trainer.schedule
    schedule.seconds = p.train_seconds
    schedule.early = None if p.cooldown_to is None else (p.cooldown_from, p.cooldown_to)


def _validate_and_checkpoint(run: Run, stop_reason: str | None, sig: int | None) -> str | None:
    """Validate on the schedule and before every stop but a signal (which saves at once);
    checkpoint on the schedule and at every stop. Returns the stop reason, early stops too."""
    p, t = run.progress, run.settings.trainer
    if run.saved_step == p.step:  # the last epoch ended right after a checkpointed update
        return stop_reason
    validate_now = p.step % t.val_every_n_steps == 0 or (stop_reason is not None and sig is None)
    improved = False
    if validate_now:
        improved = _validate(run)
        stop_reason = stop_reason or early_stopped(p, t)
        _log_heatmaps(run, last=stop_reason is not None)
        _tell_schedule(run)  # a cooldown it started applies from the next update on
    if validate_now or stop_reason or p.step % t.checkpoint_every_n_steps == 0:
        _checkpoint(run, improved)
    return stop_reason


def dev_scores(run: Run) -> dict:
    """BLEU and chrF on the dev prefix, with the beam validation uses."""
    t, corpus = run.settings.trainer, run.corpus
    valid = corpus.splits["valid"]
    n = len(valid.src_ids) if t.val_bleu_sentences is None else t.val_bleu_sentences
    ids = run.translator.translate_ids(valid.src_ids[:n], beam_size=t.val_beam_size)
    return score(corpus.tokenizer.decode(ids), valid.tgt_text[:n])


def _validate(run: Run) -> bool:
    """Dev scores to TensorBoard; True on a new best BLEU."""
    p, corpus = run.progress, run.corpus
    batches = corpus.splits["valid"].batches(corpus.eval_max_tokens, corpus.eval_max_len)
    loss = mean_nll(run.model, batches, run.trainer.device, run.trainer.precision)
    scores = dev_scores(run)
    ppl = math.exp(min(loss, 50))
    dev = {"loss": loss, "ppl": ppl, "bleu": scores["bleu"], "chrf": scores["chrf"]}
    for name, value in dev.items():
        run.writer.add_scalar(f"dev/{name}", value, p.step)
    p.last_val_step, p.last_dev_loss = p.step, loss
    broken = _never_best(run, loss)
    improved = broken is None and scores["bleu"] > p.best_dev_bleu
    if improved:
        p.best_dev_bleu, p.best_step, p.stale_validations = scores["bleu"], p.step, 0
    else:
        p.stale_validations += 1
    log.info(
        "step %d: dev loss %.3f, ppl %.2f, BLEU %.2f, chrF %.2f%s",
        p.step,
        loss,
        ppl,
        scores["bleu"],
        scores["chrf"],
        " (best)" if improved else f" (never best: {broken})" if broken else "",
    )
    if note_dev_loss(p, loss, run.settings.optim):
        log.info(
            "step %d: no new lowest dev loss (%.3f) for %d validations: the learning rate "
            "falls to zero over the next %d updates and training ends at step %d "
            "(optim.cooldown_patience)",
            p.step,
            p.lowest_dev_loss,
            p.loss_stale_validations,
            p.cooldown_to - p.step,
            p.cooldown_to,
        )
    return improved


def _never_best(run: Run, dev_loss: float) -> str | None:
    """Why the model may not become best.pt whatever its BLEU (a NaN one can decode); or None."""
    broken = non_finite(run.model.state_dict())
    if broken:
        return f"weights {broken} are not finite"
    return None if math.isfinite(dev_loss) else "the dev loss is not finite"


def _log_heatmaps(run: Run, last: bool) -> None:
    """Every head's attention on the first dev pair that fits a TensorBoard card (else the
    shortest), at every ``trainer.heatmap_every_n_validations``-th validation and the last:
    each drawing costs a second or so, and the last shows the model the run ends with."""
    t, valid = run.settings.trainer, run.corpus.splits["valid"]
    every = t.val_every_n_steps * t.heatmap_every_n_validations
    due = last or run.progress.step % every == 0
    if not (t.attention_heatmaps and due and len(valid.src_lens)):
        return
    longest = np.maximum(valid.src_lens, valid.tgt_lens)  # (N,) tokens with EOS/BOS
    fits = np.flatnonzero(longest <= CARD_TOKENS)
    pair = int(fits[0]) if len(fits) else int(np.argmin(longest))
    log_attention(
        run.writer,
        run.model,
        list(valid.src_ids[pair]),
        list(valid.tgt_ids[pair]),
        run.corpus.tokenizer,
        run.trainer.device,
        run.progress.step,
    )


def _checkpoint(run: Run, improved: bool) -> None:
    """Write the checkpoint; TensorBoard is flushed to stay in step with it."""
    state = checkpoint_state(
        run.trainer,
        run.progress,
        run.settings.config,
        run.corpus.tokenizer,
        run.corpus.fingerprints,
    )
    run.ckpts.save(state, run.progress.step, improved, run.progress.best_step)
    run.saved_step = run.progress.step
    run.writer.flush()
