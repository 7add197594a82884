"""A run's checkpoints: what a training checkpoint holds, resuming from one, and
``step_<N>.pt`` written atomically with the newest K kept, ``last.pt`` and ``best.pt``
pointing at the newest and the best (the file format: :mod:`translate.checkpoint`).
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path

from translate.checkpoint import FORMAT_VERSION, load_checkpoint, save_checkpoint
from translate.data.tokenizer import Tokenizer
from translate.errors import UserError
from translate.io import atomic_link
from translate.runtime import rng_state, set_rng_state
from translate.training.distributed import Dist
from translate.training.progress import Progress
from translate.training.step import Trainer

log = logging.getLogger(__name__)


class CheckpointManager:
    """Writes ``step_<N>.pt`` atomically, keeps the newest ``keep_last``, and points
    ``last.pt`` (and ``best.pt`` on request) at the newest file."""

    def __init__(self, directory: Path, keep_last: int) -> None:
        if keep_last < 1:
            raise UserError(f"trainer.keep_last_checkpoints={keep_last} must be >= 1")
        self.directory = Path(directory)
        self.keep_last = keep_last

    @property
    def last(self) -> Path:
        return self.directory / "last.pt"

    @property
    def best(self) -> Path:
        return self.directory / "best.pt"

    def save(self, state: dict, step: int, is_best: bool) -> Path:
        path = self.directory / f"step_{step:08d}.pt"
        save_checkpoint(state, path)
        atomic_link(path, self.last)
        if is_best:
            atomic_link(path, self.best)
        for old in sorted(self.directory.glob("step_*.pt"))[: -self.keep_last]:
            old.unlink()
        log.debug("saved %s%s", path, " (best)" if is_best else "")
        return path


def checkpoint_state(
    trainer: Trainer, progress: Progress, config: dict, tokenizer: Tokenizer, rng_ranks=None
) -> dict:
    """Everything a resumed run restores, as tensors and plain values. ``config`` is the
    resolved training config; ``rng_ranks``: every rank's RNG state under DDP (``rng`` is
    rank 0's)."""
    return {
        "format_version": FORMAT_VERSION,
        **trainer.state_dict(),
        "progress": asdict(progress),
        "rng": rng_state(),
        "config": config,
        "tokenizer": tokenizer.model_proto,
        "step": progress.step,
        **({"rng_ranks": rng_ranks} if rng_ranks else {}),
    }


def resume(
    path: Path, trainer: Trainer, tokenizer: Tokenizer, dist: Dist, model_config: dict
) -> Progress:
    """Restore ``trainer`` and the RNG states from ``path``; returns the saved counters.
    ``model_config`` (this run's ``model`` group) names what differs when the weights do not
    fit."""
    ckpt = load_checkpoint(path, map_location=trainer.device)
    if ckpt["tokenizer"] != tokenizer.model_proto:
        raise UserError(
            f"{path} was trained with a different tokenizer than this data config builds; "
            "resume with the run's original data settings"
        )
    try:
        trainer.load_state_dict(ckpt)
    except (RuntimeError, KeyError, ValueError) as err:
        raise UserError(
            f"{path} does not fit this model config ({_mismatch(ckpt, model_config, err)}); "
            "resume with the run's original model settings (see its .hydra/config.yaml)"
        ) from None
    ranks = ckpt.get("rng_ranks") or []
    set_rng_state(ranks[dist.rank] if len(ranks) == dist.world_size > 1 else ckpt["rng"])
    progress = Progress(**ckpt["progress"])
    log.info("resumed from %s at step %d (epoch %d)", path, progress.step, progress.epoch)
    return progress


def resume_or_start(
    last: Path, sweep_job: str | None, trainer: Trainer, tokenizer: Tokenizer, dist: Dist,
    model_config: dict,
) -> Progress:  # fmt: skip
    """``trainer.resume=true``: :func:`resume` from ``last``. A sweep job that has trained
    nothing yet (no checkpoint, no results) starts from scratch instead, so re-running a sweep
    with trainer.resume=true also starts the jobs it never reached; a single run without a
    checkpoint is a mistyped run dir and stops."""
    if last.is_file():
        return resume(last, trainer, tokenizer, dist, model_config)
    if sweep_job is None or (last.parent.parent / "results.json").exists():
        raise UserError(
            f"trainer.resume=true but {last} does not exist; pass the run dir of the "
            "interrupted run with hydra.run.dir=<run_dir>, or start anew with trainer.resume=false"
        )
    log.info("%s: no checkpoint yet, starting", sweep_job)
    return Progress()


def _mismatch(ckpt: dict, model_config: dict, err: Exception) -> str:
    """The whole reason in one line: the settings that differ, else torch's first details."""
    saved = ckpt["config"].get("model", {})
    differ = [
        f"model.{k}={saved[k]} in the checkpoint, {model_config[k]} here"
        for k in sorted(model_config)
        if k in saved and saved[k] != model_config[k]
    ]
    if differ:
        return "; ".join(differ)
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    details = lines[1:] or lines  # torch's first line only says "Error(s) in loading ..."
    more = f"; and {len(details) - 2} more" if len(details) > 2 else ""
    return "; ".join(details[:2]) + more
