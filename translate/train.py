"""Train a Transformer: ``python -m translate.train heads=8`` (see README.md).

``train(cfg) -> dict`` is the whole job as a plain function (tests call it through Hydra's
``compose``); ``main`` only wraps it for the command line. Everything is written under
``cfg.run_dir``: ``checkpoints/``, ``tensorboard/``, ``test.hyp.txt`` and ``results.json``.
"""

from __future__ import annotations

import logging
import math
import shlex
import signal
import time
from dataclasses import asdict
from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig, OmegaConf
from torch.utils.tensorboard import SummaryWriter
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from translate import distributed
from translate.checkpoint import FORMAT_VERSION, CheckpointManager, load_checkpoint
from translate.config import TrainSettings, train_settings
from translate.data import Corpus, load_corpus
from translate.distributed import Dist
from translate.errors import UserError, exit_on_user_error
from translate.evaluate import evaluate_run
from translate.inference import Translator
from translate.loop import Progress, StopRequest, TrainBatches
from translate.metrics import score
from translate.model import count_parameters
from translate.runtime import (
    reset_peak_memory,
    resolve_device,
    resolve_precision,
    rng_state,
    seed_everything,
    set_rng_state,
)
from translate.trainer import Trainer
from translate.visualize import log_attention

log = logging.getLogger(__name__)


def _checkpoint_state(
    trainer: Trainer, progress: Progress, cfg: DictConfig, corpus: Corpus, rng_ranks=None
) -> dict:
    """``rng_ranks``: every rank's RNG state under DDP (``rng`` is rank 0's)."""
    return {
        "format_version": FORMAT_VERSION,
        **trainer.state_dict(),
        "progress": asdict(progress),
        "rng": rng_state(),
        "config": OmegaConf.to_container(cfg, resolve=True),
        "tokenizer": corpus.tokenizer.model_proto,
        "step": progress.step,
        **({"rng_ranks": rng_ranks} if rng_ranks else {}),
    }


def _resume(path: Path, trainer: Trainer, corpus: Corpus, dist: Dist) -> Progress:
    ckpt = load_checkpoint(path, map_location=trainer.device)
    if ckpt["tokenizer"] != corpus.tokenizer.model_proto:
        raise UserError(
            f"{path} was trained with a different tokenizer than this data config builds; "
            "resume with the run's original data settings"
        )
    try:
        trainer.load_state_dict(ckpt)
    except (RuntimeError, KeyError, ValueError) as err:
        raise UserError(
            f"{path} does not fit this model config ({str(err).splitlines()[0]}); resume with the "
            "run's original model settings (see its .hydra/config.yaml)"
        ) from err
    ranks = ckpt.get("rng_ranks") or []
    set_rng_state(ranks[dist.rank] if len(ranks) == dist.world_size > 1 else ckpt["rng"])
    progress = Progress(**ckpt["progress"])
    log.info("resumed from %s at step %d (epoch %d)", path, progress.step, progress.epoch)
    return progress


def train(cfg: DictConfig) -> dict:
    """Train, validate, checkpoint, then score the best checkpoint on the test split.

    Returns the ``results.json`` dict. Under torchrun every process runs this as one rank of
    DistributedDataParallel (translate/distributed.py); rank 0 alone evaluates and writes, the
    other ranks return ``{"status": "completed", "rank": r, "steps": n, "bleu": None}``.
    """
    dist = distributed.from_env()
    try:
        return _train(cfg, dist)
    finally:
        if dist.enabled:
            distributed.shutdown()


def _train(cfg: DictConfig, dist: Dist) -> dict:
    settings: TrainSettings = train_settings(cfg)
    t = settings.trainer
    distributed.quiet_other_ranks(dist)
    device = distributed.init(dist, resolve_device(t.device))
    precision = resolve_precision(t.precision, device)
    run_dir = Path(settings.run_dir)
    if dist.enabled:
        run_dir = distributed.adopt_run_dir(dist, run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if t.num_threads:
        torch.set_num_threads(t.num_threads)
    seed_everything(settings.seed)

    with distributed.main_first(dist):  # rank 0 builds the caches, the others then read them
        corpus = load_corpus(cfg.data)
    tok = corpus.tokenizer
    model = settings.model.build(tok.vocab_size, tok.PAD).to(device)
    ddp = distributed.wrap(model, device) if dist.enabled else None
    compiled = torch.compile(ddp or model) if t.compile else None
    trainer = Trainer(model, settings.optim, device, precision, tok.PAD, compiled, ddp)
    ckpts = CheckpointManager(run_dir / "checkpoints", t.keep_last_checkpoints)
    params = count_parameters(model)

    progress = Progress()
    if t.resume:
        if not ckpts.last.is_file():
            raise UserError(
                f"trainer.resume=true but {ckpts.last} does not exist; pass the run dir of the "
                "interrupted run with hydra.run.dir=<run_dir>"
            )
        progress = _resume(ckpts.last, trainer, corpus, dist)

    train_batches = TrainBatches(
        corpus.splits["train"], corpus.max_tokens, settings.seed, dist.rank, dist.world_size
    )
    valid = corpus.splits["valid"]
    dev_n = len(valid.src_ids) if t.val_bleu_sentences is None else t.val_bleu_sentences
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
    log.info(
        "model: %s parameters, %d heads, d_model %d, %s attention, precision %s on %s",
        f"{params:,}",
        settings.model.num_heads,
        settings.model.d_model,
        settings.model.attention_impl,
        precision,
        device,
    )
    log.info("checkpoints: %s | TensorBoard: tensorboard --logdir %s", ckpts.directory, run_dir)

    def validate() -> tuple[float, float, float]:
        loss = trainer.evaluate_loss(valid.batches(corpus.eval_max_tokens))
        hyps = tok.decode(
            translator.translate_ids(valid.src_ids[:dev_n], beam_size=t.val_beam_size)
        )
        scores = score(hyps, valid.tgt_text[:dev_n])
        step = progress.step
        writer.add_scalar("dev/loss", loss, step)
        writer.add_scalar("dev/ppl", math.exp(min(loss, 50)), step)
        writer.add_scalar("dev/bleu", scores["bleu"], step)
        writer.add_scalar("dev/chrf", scores["chrf"], step)
        log_attention(
            writer, model, list(valid.src_ids[0]), list(valid.tgt_ids[0]), tok, device, step
        )
        return loss, scores["bleu"], scores["chrf"]

    reset_peak_memory(device)
    bar = tqdm(
        total=t.max_steps,
        initial=progress.step,
        desc="train",
        unit="step",
        disable=not t.progress_bar or not dist.is_main,
        dynamic_ncols=True,
    )
    window_tokens, window_start = 0, time.perf_counter()
    stop_reason = None
    with StopRequest() as stop, logging_redirect_tqdm():
        loop_start = time.perf_counter() - progress.train_seconds
        while stop_reason is None:
            if progress.epoch >= t.max_epochs:
                stop_reason = f"max_epochs={t.max_epochs}"
                break
            epoch = train_batches.epoch(
                progress.epoch, progress.batches_in_epoch, t.accumulate_grad_batches
            )
            for group in epoch:
                result = trainer.step(group)
                progress.batches_in_epoch += train_batches.consumed(group)
                progress.train_seconds = time.perf_counter() - loop_start
                if result.skipped:
                    _count_bad_step(progress, t.max_bad_steps, settings.optim.lr, ckpts)
                    continue
                progress.bad_steps = 0
                progress.step += 1
                progress.tokens += result.tokens
                window_tokens += result.tokens
                bar.update(1)
                if progress.step % t.log_every_n_steps == 0:
                    now = time.perf_counter()
                    tps = window_tokens / max(now - window_start, 1e-9)
                    window_tokens, window_start = 0, now
                    bar.set_postfix(
                        loss=f"{result.loss:.3f}", lr=f"{result.lr:.2e}", tok_s=f"{tps:,.0f}"
                    )
                    for name, value in (
                        ("loss", result.loss),
                        ("lr", result.lr),
                        ("grad_norm", result.grad_norm),
                        ("tokens_per_s", tps),
                    ):
                        writer.add_scalar(f"train/{name}", value, progress.step)
                if dist.enabled:  # the ranks agree on the clock and on signals: same last step
                    progress.train_seconds, sig = distributed.max_all(
                        [progress.train_seconds, stop.signal or 0]
                    )
                    stop.signal = int(sig) or None
                stop_reason = _limit_reached(progress, t) or (
                    signal.Signals(stop.signal).name if stop.signal else None
                )
                # A signal saves at once; the other limits end with a last validation.
                validate_now = progress.step % t.val_every_n_steps == 0 or (
                    stop_reason is not None and stop.signal is None
                )
                improved = False
                if validate_now and dist.is_main:  # the other ranks wait for its verdict
                    dev_loss, dev_bleu, dev_chrf = validate()
                    improved = dev_bleu > progress.best_dev_bleu
                    if improved:
                        progress.best_dev_bleu, progress.best_step = dev_bleu, progress.step
                        progress.stale_validations = 0
                    else:
                        progress.stale_validations += 1
                    log.info(
                        "step %d: dev loss %.3f, ppl %.2f, BLEU %.2f, chrF %.2f%s",
                        progress.step,
                        dev_loss,
                        math.exp(min(dev_loss, 50)),
                        dev_bleu,
                        dev_chrf,
                        " (best)" if improved else "",
                    )
                    patience = t.early_stopping_patience
                    if patience is not None and progress.stale_validations >= patience:
                        stop_reason = (
                            stop_reason or f"early stopping ({patience} validations without gain)"
                        )
                if validate_now and dist.enabled:
                    stop_reason = distributed.broadcast(stop_reason)  # early stopping
                if validate_now or stop_reason or progress.step % t.checkpoint_every_n_steps == 0:
                    rngs = distributed.gather(rng_state()) if dist.enabled else None
                    if dist.is_main:
                        state = _checkpoint_state(trainer, progress, cfg, corpus, rngs)
                        ckpts.save(state, progress.step, improved)
                    writer.flush()  # TensorBoard stays in step with the checkpoints
                if stop_reason:
                    break
            else:
                progress.epoch += 1
                progress.batches_in_epoch = 0
        bar.close()
    if stop.signal is not None:
        log.log(
            logging.WARNING if dist.is_main else logging.DEBUG,  # the resume command once
            "stopped by %s at step %d; saved %s. Resume with:\n  %s %s %s trainer.resume=true",
            stop_reason,
            progress.step,
            ckpts.last,
            "torchrun <same options> -m translate.train"
            if dist.enabled
            else "python -m translate.train",
            " ".join(shlex.quote(o) for o in _task_overrides()),
            # Quoted twice: job dirs of sweeps hold '=' and ',' (Hydra) and the shell sees it too.
            shlex.quote(f'hydra.run.dir="{run_dir}"'),
        )
        raise SystemExit(128 + stop.signal)
    log.info(
        "training stopped (%s) after %d steps, %.1f min",
        stop_reason,
        progress.step,
        progress.train_seconds / 60,
    )
    if not dist.is_main:  # rank 0 alone scores the test split and writes results.json
        return {"status": "completed", "rank": dist.rank, "steps": progress.step, "bleu": None}
    return evaluate_run(
        settings, corpus, trainer.model, translator, progress, ckpts, writer, cfg.get("analysis")
    )


def _limit_reached(progress: Progress, t) -> str | None:
    if progress.step >= t.max_steps:
        return f"max_steps={t.max_steps}"
    if t.max_minutes is not None and progress.train_seconds >= t.max_minutes * 60:
        return f"max_minutes={t.max_minutes}"
    return None


def _count_bad_step(progress: Progress, max_bad_steps: int, lr: float, ckpts: CheckpointManager):
    progress.bad_steps += 1
    log.warning("step %d: loss or gradient is NaN/Inf, update skipped", progress.step + 1)
    if progress.bad_steps >= max_bad_steps:
        last = ckpts.last if ckpts.last.exists() else "not written yet"
        raise UserError(
            f"{progress.bad_steps} consecutive steps had a NaN/Inf loss; likely causes: learning "
            f"rate too high (optim.lr={lr}) or fp16 overflow (try trainer.precision=bf16). "
            f"Last good checkpoint: {last}"
        )


def _task_overrides() -> list[str]:
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    return [o for o in HydraConfig.get().overrides.task if not o.startswith("trainer.resume")]


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
@exit_on_user_error
def main(cfg: DictConfig) -> float:
    return train(cfg)["bleu"]  # the value a Hydra optimisation sweeper would maximise


if __name__ == "__main__":
    main()
