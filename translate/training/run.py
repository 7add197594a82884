"""A training run's working set: :class:`Run` and :func:`setup`, which claims the run dir
(locked, checked to overwrite nothing), builds data, model and optimizer, resumes them if asked,
and says in its first log lines what the run does."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import torch

from translate import io
from translate.data.corpus import Corpus, load_corpus
from translate.decoding.engine import TorchEngine
from translate.decoding.translator import Translator
from translate.errors import UserError, counted
from translate.nn.model import count_parameters
from translate.nn.sdpa import sdpa_backend
from translate.runtime.device import (
    device_name,
    precision_reason,
    resolve_device,
    resolve_precision,
)
from translate.runtime.provenance import code_version
from translate.runtime.rng import seed_everything, use_deterministic_algorithms
from translate.settings import TrainSettings
from translate.training.optim import Schedule
from translate.training.progress import Progress
from translate.training.resume import resume_or_start
from translate.training.rundir import RunLock, check_fresh, remove_partial_writes
from translate.training.saving import CheckpointManager
from translate.training.step import SEQ_MULTIPLE, Trainer, pads_shapes

log = logging.getLogger(__name__)


class Window(NamedTuple):
    """The tokens trained on since ``start``: what the next logged tokens/s is measured over."""

    tokens: int
    start: float


@dataclass
class Run:
    settings: TrainSettings
    run_dir: Path
    corpus: Corpus
    trainer: Trainer
    translator: Translator
    ckpts: CheckpointManager
    writer: object  # TensorBoard's SummaryWriter
    progress: Progress = field(default_factory=Progress)
    window: Window = field(default_factory=lambda: Window(0, time.perf_counter()))
    lock: RunLock | None = None  # the hold on the run dir, released when the run ends
    saved_step: int | None = None  # the step of the newest checkpoint this process wrote
    start_step: int = 0  # where this process started (> 0 when resumed)

    @property
    def model(self):
        return self.trainer.model


def setup(settings: TrainSettings) -> Run:
    r, t = settings.runtime, settings.trainer
    run_dir = Path(settings.run_dir)
    device = resolve_device(r.device)
    precision = resolve_precision(r.precision, device, training=True)
    lock = RunLock(run_dir).acquire()
    try:
        remove_partial_writes(run_dir)  # of a process killed while writing
        check_fresh(run_dir, t.resume, t.overwrite)
    except UserError:
        lock.release()
        raise
    try:
        run = _build(settings, device, precision, run_dir)
    except BaseException:
        lock.release()
        raise
    run.lock = lock
    _log_start(run)
    return run


def _build(settings: TrainSettings, device, precision: str, run_dir: Path) -> Run:
    t = settings.trainer
    settings.runtime.apply_to_process()
    use_deterministic_algorithms(t.deterministic)
    seed_everything(settings.seed)
    corpus = load_corpus(settings.data)
    tok = corpus.tokenizer
    model = settings.model.build(tok.vocab_size, tok.PAD).to(device)
    compiled = torch.compile(model) if t.compile else None
    o = settings.optim
    schedule = Schedule(o.warmup_steps, o.cooldown, t.max_steps, t.max_minutes)
    pad = settings.runtime.cpu_bf16_padding and pads_shapes(device, precision)
    trainer = Trainer(model, o, device, precision, tok.PAD, compiled, schedule, pad)
    around_best = t.average_last_n if t.average_around_best else 0
    ckpts = CheckpointManager(run_dir / "checkpoints", t.keep_last_checkpoints, around_best)
    progress = Progress()
    if t.resume:
        progress = resume_or_start(ckpts.directory, trainer, corpus, settings)
        ckpts.relink(progress.step, progress.best_step)
    engine = TorchEngine(model, device, precision)
    translator = Translator(
        engine, tok, settings.decode, corpus.eval_max_tokens, corpus.eval_max_len
    )
    # Hide the events a killed run logged after its last checkpoint (all of them when it
    # was killed before its first), so the curves continue cleanly.
    writer = io.summary_writer(run_dir / "tensorboard", purge_step=progress.step + 1)
    threading.excepthook = _quiet_event_writer
    run = Run(settings, run_dir, corpus, trainer, translator, ckpts, writer, progress)
    run.start_step = progress.step
    return run


def _quiet_event_writer(args) -> None:
    """threading's excepthook without the traceback of a write TensorBoard's writer thread
    could not make: the writer raises it again in training's thread, which says it in one line."""
    if not isinstance(args.exc_value, OSError) or "AsyncWriter" not in type(args.thread).__name__:
        _THREAD_EXCEPTHOOK(args)


_THREAD_EXCEPTHOOK = threading.excepthook


def _log_start(run: Run) -> None:
    m, t, device = run.settings.model, run.settings.trainer, run.trainer.device
    kv = "" if m.num_kv_heads == m.num_heads else f" sharing {m.num_kv_heads} key/value heads"
    log.info(
        "model: %s parameters, %s%s, d_model %d, %s attention",
        f"{count_parameters(run.model):,}",
        counted(m.num_heads, "head"),
        kv,
        m.d_model,
        m.attention_impl,
    )
    name = device_name(device, "CPU")
    threads = "" if device.type == "cuda" else f", {counted(torch.get_num_threads(), 'thread')}"
    precision = run.trainer.precision
    why = precision_reason(run.settings.runtime.precision, precision, device)
    log.info("device: %s (%s%s), precision %s (%s)", name, device, threads, precision, why)
    if run.trainer.pad_shapes:
        log.info(
            "bf16 on a CPU: batches padded to multiples of %d positions, so that oneDNN "
            "reuses its kernels (runtime.cpu_bf16_padding)",
            SEQ_MULTIPLE,
        )
    # Read now, as the run starts: results.json records the code this process imported.
    log.info("code: %s", code_version())
    if m.attention_impl == "sdpa":
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(run.trainer.precision)
        args = (device, dtype or torch.float32, m.num_heads, m.d_model // m.num_heads)
        log.info(
            "sdpa kernels: %s for causal self-attention, %s with padding masks",
            sdpa_backend(*args, masked=False, num_kv_heads=m.num_kv_heads),
            sdpa_backend(*args, masked=True, num_kv_heads=m.num_kv_heads),
        )
    per_update = run.corpus.max_tokens * t.accumulate_grad_batches
    log.info(
        "batches: %s tokens per side x %d accumulated = %s padded tokens/update",
        f"{run.corpus.max_tokens:,}",
        t.accumulate_grad_batches,
        f"{per_update:,}",
    )
    log.info(
        "checkpoints: %s | TensorBoard: tensorboard --logdir %s", run.ckpts.directory, run.run_dir
    )
