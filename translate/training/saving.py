"""A run's checkpoints: what a training checkpoint holds, and how they are kept."""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path

from translate import io
from translate.checkpoint import CHECKPOINT, FORMAT_VERSION, save_checkpoint
from translate.data.tokenizer import Tokenizer
from translate.runtime.rng import rng_state
from translate.training.averaging import around, step_checkpoints
from translate.training.progress import Progress
from translate.training.step import Trainer

log = logging.getLogger(__name__)


class CheckpointManager:
    """Writes ``step_<N>.pt``, keeps the newest ``keep_last`` (and ``around_best`` around the
    best one's, for averaging), and links ``last.pt`` (and ``best.pt`` if asked) to it."""

    def __init__(self, directory: Path, keep_last: int, around_best: int = 0) -> None:
        self.directory = Path(directory)
        self.keep_last = keep_last
        self.around_best = around_best
        self.last, self.best = self.directory / "last.pt", self.directory / "best.pt"

    def step_file(self, step: int) -> Path:
        return self.directory / f"step_{step:08d}.pt"

    def save(self, state: dict, step: int, is_best: bool, best_step: int | None = None) -> Path:
        path = self.step_file(step)
        # This manager's own names: a fresh run starts without checkpoints and a resume found
        # each one this experiment's, so they may be replaced, but no other kind of output.
        save_checkpoint(state, path, adopt=True)
        io.link(path, self.last, CHECKPOINT, adopt=True)
        if is_best:
            io.link(path, self.best, CHECKPOINT, adopt=True)
        files = step_checkpoints(self.directory)
        kept = set(files[-self.keep_last :])
        if self.around_best and best_step is not None:
            kept.update(around(files, best_step, self.around_best))
        for old in files:
            if old not in kept:
                io.remove(old)
        log.debug("saved %s%s", path, " (best)" if is_best else "")
        return path

    def relink(self, step: int, best_step: int) -> None:
        """Point ``last.pt`` and ``best.pt`` at the step files of the state a run resumed: one
        killed between writing ``step_<N>.pt`` and linking them left them at an older step, and
        a resume already at its limit writes no checkpoint that would mend them."""
        names = {self.last: self.step_file(step), self.best: self.step_file(best_step)}
        for name, target in names.items():
            if target.is_file() and not (name.is_file() and name.samefile(target)):
                log.info("%s: linked to %s, as the resumed state says", name, target.name)
                io.link(target, name, CHECKPOINT, adopt=True)


def checkpoint_state(
    trainer: Trainer,
    progress: Progress,
    config: dict,
    tokenizer: Tokenizer,
    fingerprints: dict[str, str],
) -> dict:
    """Everything a resumed run restores; ``fingerprints`` tell data moved from other data."""
    return {
        "format_version": FORMAT_VERSION,
        **trainer.state_dict(),
        "progress": asdict(progress),
        "rng": rng_state(),
        "config": config,
        "tokenizer": tokenizer.model_proto,
        "data_fingerprints": dict(fingerprints),
        "step": progress.step,
    }
