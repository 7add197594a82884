"""The training loop: :func:`setup` builds everything a run works with, :func:`fit` trains it
until a limit, early stopping or a signal, validating and checkpointing on the way.

Each piece has a name: counting and logging an update (:func:`_count_step`, :func:`_log_step`),
the stop decision (:func:`_stop_reason`, agreed by all ranks under DDP), validation
(:func:`_validate`) and the checkpoint cadence (:func:`_checkpoint`). The end of a run (test
scores, ``results.json``) is :mod:`translate.training.report`.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.utils.tensorboard import SummaryWriter
from tqdm.contrib.logging import logging_redirect_tqdm

from translate.analysis.plots import log_attention
from translate.data.corpus import Corpus, load_corpus
from translate.decoding.scoring import mean_nll
from translate.decoding.translator import Translator
from translate.errors import UserError
from translate.metrics import score
from translate.nn.model import count_parameters
from translate.nn.sdpa import sdpa_backend
from translate.runtime import (
    reset_peak_memory,
    resolve_device,
    resolve_precision,
    rng_state,
    seed_everything,
)
from translate.settings import TrainSettings
from translate.training import distributed
from translate.training.checkpoints import CheckpointManager, checkpoint_state, resume_or_start
from translate.training.distributed import Dist
from translate.training.progress import (
    Progress,
    StopRequest,
    TrainBar,
    TrainBatches,
    budget_reached,
    early_stopped,
    limit_reached,
)
from translate.training.rundir import RunLock, check_fresh
from translate.training.step import StepResult, Trainer

log = logging.getLogger(__name__)

ETA_AFTER_STEPS = 200  # updates before the log says when the budget will end


@dataclass
class Run:
    """Everything one training run works with."""

    settings: TrainSettings
    dist: Dist
    run_dir: Path
    corpus: Corpus
    trainer: Trainer
    translator: Translator
    ckpts: CheckpointManager
    writer: SummaryWriter | distributed.NullWriter
    progress: Progress = field(default_factory=Progress)
    window: list = field(default_factory=lambda: [0, time.perf_counter()])  # tokens, start
    lock: RunLock | None = None  # rank 0's hold on the run dir, released when the run ends
    saved_step: int | None = None  # the step of the newest checkpoint this process wrote
    start_step: int = 0  # where this process started (> 0 when resumed)

    @property
    def model(self):
        return self.trainer.model


def setup(settings: TrainSettings, dist: Dist) -> Run:
    """Device, the run dir (locked), data, model, optimizer, checkpoints (resumed if asked)
    and TensorBoard."""
    t = settings.trainer
    distributed.quiet_other_ranks(dist)
    device = distributed.init(dist, resolve_device(t.device))
    precision = resolve_precision(t.precision, device)
    run_dir, lock = _claim_run_dir(settings, dist)
    try:
        run = _build(settings, dist, device, precision, run_dir)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    run.lock = lock
    _log_start(run)
    return run


def _claim_run_dir(settings: TrainSettings, dist: Dist) -> tuple[Path, RunLock | None]:
    """Rank 0 locks the run dir and checks that a fresh run overwrites nothing; every rank
    learns the verdict, so none waits for a rank that has stopped."""
    t, run_dir = settings.trainer, Path(settings.run_dir)
    if dist.enabled:
        run_dir = distributed.adopt_run_dir(dist, run_dir)
    lock, error = None, None
    if dist.is_main:
        try:
            lock = RunLock(run_dir).acquire()
            check_fresh(run_dir, t.resume, t.overwrite)
        except UserError as err:
            error = str(err)
    if dist.enabled:
        error = distributed.broadcast(error)
    if error is not None:
        if lock is not None:
            lock.release()
        raise UserError(error)
    return run_dir, lock


def _build(settings: TrainSettings, dist: Dist, device, precision: str, run_dir: Path) -> Run:
    t = settings.trainer
    if t.num_threads:
        torch.set_num_threads(t.num_threads)
    seed_everything(settings.seed)
    with distributed.main_first(dist):  # rank 0 builds the caches, the others then read them
        corpus = load_corpus(settings.data)
    tok = corpus.tokenizer
    model = settings.model.build(tok.vocab_size, tok.PAD).to(device)
    ddp = distributed.wrap(model, device) if dist.enabled else None
    compiled = torch.compile(ddp if ddp is not None else model) if t.compile else None
    trainer = Trainer(model, settings.optim, device, precision, tok.PAD, compiled, ddp)
    ckpts = CheckpointManager(run_dir / "checkpoints", t.keep_last_checkpoints)
    progress = Progress()
    if t.resume:
        model_config = settings.config["model"]
        progress = resume_or_start(ckpts.last, settings.sweep_job, trainer, tok, dist, model_config)
    translator = Translator(
        model, tok, settings.decode, device, precision, corpus.eval_max_tokens, corpus.max_src_len
    )
    # On resume, drop the events a killed run logged after its last checkpoint.
    purge_step = progress.step + 1 if t.resume else None
    writer = (
        SummaryWriter(run_dir / "tensorboard", purge_step=purge_step)
        if dist.is_main
        else distributed.NullWriter()
    )
    run = Run(settings, dist, run_dir, corpus, trainer, translator, ckpts, writer, progress)
    run.start_step = progress.step
    return run


def _log_start(run: Run) -> None:
    """What the run is doing, in its first lines: model, device, precision, the attention
    kernel, tokens per update, and where its outputs go."""
    m, t, device = run.settings.model, run.settings.trainer, run.trainer.device
    kv = "" if m.num_kv_heads == m.num_heads else f" sharing {m.num_kv_heads} key/value heads"
    log.info(
        "model: %s parameters, %d heads%s, d_model %d, %s attention",
        f"{count_parameters(run.model):,}",
        m.num_heads,
        kv,
        m.d_model,
        m.attention_impl,
    )
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    threads = "" if device.type == "cuda" else f", {torch.get_num_threads()} threads"
    log.info("device: %s (%s%s), precision %s", name, device, threads, run.trainer.precision)
    if m.attention_impl == "sdpa":
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(run.trainer.precision)
        args = (device, dtype or torch.float32, m.num_heads, m.d_model // m.num_heads)
        log.info(
            "sdpa kernels: %s for causal self-attention, %s with padding masks",
            sdpa_backend(*args, masked=False, num_kv_heads=m.num_kv_heads),
            sdpa_backend(*args, masked=True, num_kv_heads=m.num_kv_heads),
        )
    per_update = run.corpus.max_tokens * t.accumulate_grad_batches * run.dist.world_size
    log.info(
        "batches: %s tokens per side x %d accumulated x %d processes = %s padded tokens/update",
        f"{run.corpus.max_tokens:,}",
        t.accumulate_grad_batches,
        run.dist.world_size,
        f"{per_update:,}",
    )
    log.info(
        "checkpoints: %s | TensorBoard: tensorboard --logdir %s", run.ckpts.directory, run.run_dir
    )


def _log_eta(run: Run) -> None:
    """After the first ETA_AFTER_STEPS updates: the speed and when the budget will end."""
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
    t, p = run.settings.trainer, run.progress
    batches = TrainBatches(
        run.corpus.splits["train"],
        run.corpus.max_tokens,
        run.settings.seed,
        run.dist.rank,
        run.dist.world_size,
    )
    reset_peak_memory(run.trainer.device)
    bar = TrainBar(p, t.max_steps, t.max_minutes, t.progress_bar and run.dist.is_main)
    # A resumed run may already be at a limit (e.g. it stopped while scoring): no extra step.
    stop_reason = limit_reached(p, t)
    with StopRequest() as stop, logging_redirect_tqdm():
        loop_start = time.perf_counter() - p.train_seconds
        while stop_reason is None:
            for group in batches.epoch(p.epoch, p.batches_in_epoch, t.accumulate_grad_batches):
                result = run.trainer.step(group)
                p.batches_in_epoch += batches.consumed(group)
                p.train_seconds = time.perf_counter() - loop_start
                if not _count_step(run, result):
                    continue
                _log_step(run, result, bar)
                stop_reason = _stop_reason(run, stop)
                stop_reason = _validate_and_checkpoint(run, stop_reason, stop.signal)
                if stop_reason:
                    break
            else:
                p.epoch, p.batches_in_epoch = p.epoch + 1, 0
                if p.epoch >= t.max_epochs:
                    stop_reason = limit_reached(p, t)
                    if run.saved_step != p.step:  # the last step's checkpoint may be older
                        _validate_and_checkpoint(run, stop_reason, None)
        bar.close()
    return stop_reason, stop.signal


def _count_step(run: Run, result: StepResult) -> bool:
    """Count an update; False for a skipped (NaN/Inf) one, which stops the run after
    ``trainer.max_bad_steps`` in a row."""
    p, t = run.progress, run.settings.trainer
    if result.skipped:
        p.bad_steps += 1
        log.warning("step %d: loss or gradient is NaN/Inf, update skipped", p.step + 1)
        if p.bad_steps >= t.max_bad_steps:
            last = run.ckpts.last if run.ckpts.last.exists() else "not written yet"
            raise UserError(
                f"{p.bad_steps} consecutive steps had a NaN/Inf loss; likely causes: learning "
                f"rate too high (optim.lr={run.settings.optim.lr}) or fp16 overflow (try "
                f"trainer.precision=bf16). Last good checkpoint: {last}"
            )
        return False
    p.bad_steps = 0
    p.step += 1
    p.tokens += result.tokens
    run.window[0] += result.tokens
    return True


def _log_step(run: Run, result: StepResult, bar: TrainBar) -> None:
    p, t = run.progress, run.settings.trainer
    if p.step == run.start_step + ETA_AFTER_STEPS and p.step < t.max_steps:
        _log_eta(run)
    if p.step % t.log_every_n_steps != 0:
        bar.update(p)
        return
    now = time.perf_counter()
    tps = run.window[0] / max(now - run.window[1], 1e-9)
    run.window[:] = [0, now]
    # Of this step's padded positions, the share that holds tokens: what batching wastes.
    real = result.tokens / max(result.padded_tokens, 1)
    bar.update(
        p, loss=f"{result.loss:.3f}", lr=f"{result.lr:.2e}", tok_s=f"{tps:,.0f}", real=f"{real:.0%}"
    )
    for name, value in (
        ("loss", result.loss),
        ("lr", result.lr),
        ("grad_norm", result.grad_norm),
        ("tokens_per_s", tps),
        ("real_token_ratio", real),
    ):
        run.writer.add_scalar(f"train/{name}", value, p.step)


def _stop_reason(run: Run, stop: StopRequest) -> str | None:
    """A step or time limit, or a signal; under DDP every rank agrees on the clock and on
    signals first, so all stop after the same step."""
    p = run.progress
    if run.dist.enabled:
        p.train_seconds, sig = distributed.max_all([p.train_seconds, stop.signal or 0])
        stop.signal = int(sig) or None
    budget = budget_reached(p, run.settings.trainer)
    return budget or (signal.Signals(stop.signal).name if stop.signal else None)


def _validate_and_checkpoint(run: Run, stop_reason: str | None, sig: int | None) -> str | None:
    """Validate on the schedule and before every stop but a signal (which saves at once);
    checkpoint on the schedule and at every stop. Returns the stop reason, early stopping
    included."""
    p, t = run.progress, run.settings.trainer
    validate_now = p.step % t.val_every_n_steps == 0 or (stop_reason is not None and sig is None)
    improved = False
    if validate_now and run.dist.is_main:  # the other ranks wait for its verdict
        improved = _validate(run)
        stop_reason = stop_reason or early_stopped(p, t)
    if validate_now and run.dist.enabled:
        stop_reason = distributed.broadcast(stop_reason)  # early stopping
    if validate_now or stop_reason or p.step % t.checkpoint_every_n_steps == 0:
        _checkpoint(run, improved)
    return stop_reason


def dev_scores(run: Run) -> dict:
    """BLEU and chrF of the model on the dev prefix and with the beam validation uses
    (``trainer.val_bleu_sentences``, ``trainer.val_beam_size``)."""
    t, corpus = run.settings.trainer, run.corpus
    valid = corpus.splits["valid"]
    n = len(valid.src_ids) if t.val_bleu_sentences is None else t.val_bleu_sentences
    ids = run.translator.translate_ids(valid.src_ids[:n], beam_size=t.val_beam_size)
    return score(corpus.tokenizer.decode(ids), valid.tgt_text[:n])


def _validate(run: Run) -> bool:
    """Dev loss, perplexity, BLEU and chrF, heatmaps to TensorBoard; True on a new best BLEU."""
    p, corpus = run.progress, run.corpus
    valid = corpus.splits["valid"]
    loss = mean_nll(
        run.model,
        valid.batches(corpus.eval_max_tokens),
        run.trainer.device,
        run.trainer.precision,
    )
    scores = dev_scores(run)
    for name, value in (
        ("loss", loss),
        ("ppl", math.exp(min(loss, 50))),
        ("bleu", scores["bleu"]),
        ("chrf", scores["chrf"]),
    ):
        run.writer.add_scalar(f"dev/{name}", value, p.step)
    log_attention(
        run.writer,
        run.model,
        list(valid.src_ids[0]),
        list(valid.tgt_ids[0]),
        corpus.tokenizer,
        run.trainer.device,
        p.step,
    )
    improved = scores["bleu"] > p.best_dev_bleu
    if improved:
        p.best_dev_bleu, p.best_step, p.stale_validations = scores["bleu"], p.step, 0
    else:
        p.stale_validations += 1
    log.info(
        "step %d: dev loss %.3f, ppl %.2f, BLEU %.2f, chrF %.2f%s",
        p.step,
        loss,
        math.exp(min(loss, 50)),
        scores["bleu"],
        scores["chrf"],
        " (best)" if improved else "",
    )
    return improved


def _checkpoint(run: Run, improved: bool) -> None:
    """Every rank's RNG state to rank 0, which writes the checkpoint; TensorBoard is flushed
    so it stays in step with the checkpoints."""
    rngs = distributed.gather(rng_state()) if run.dist.enabled else None
    if run.dist.is_main:
        state = checkpoint_state(
            run.trainer, run.progress, run.settings.config, run.corpus.tokenizer, rngs
        )
        run.ckpts.save(state, run.progress.step, improved)
    run.saved_step = run.progress.step
    run.writer.flush()
