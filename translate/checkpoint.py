"""Checkpoints: atomic writes, the last K kept, clear errors on bad files.

A checkpoint is self-contained: model, optimizer, scheduler, AMP scaler, counters, RNG states,
the resolved config and the SentencePiece model bytes, so ``evaluate`` and ``translate`` need
nothing else. Files are written to a temporary name in the same folder, flushed to disk and
renamed, so a crash while saving never leaves a truncated ``last.pt`` or ``best.pt``.
"""

from __future__ import annotations

import logging
import os
import pickle
import tempfile
import zipfile
from pathlib import Path

import torch
from omegaconf import OmegaConf

from translate.config import model_settings
from translate.errors import UserError
from translate.tokenizer import Tokenizer

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
REQUIRED_KEYS = ("format_version", "model", "config", "tokenizer", "step")


def atomic_torch_save(obj: dict, path: Path) -> None:
    """``torch.save`` to a temp file beside ``path``, fsync, then rename over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _atomic_link(src: Path, dst: Path) -> None:
    """Make ``dst`` the same file as ``src`` (hard link, copy if links are unsupported)."""
    tmp = dst.with_name(f".{dst.name}.link.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError:
        tmp.write_bytes(src.read_bytes())
    os.replace(tmp, dst)


def load_checkpoint(path: str | Path, map_location="cpu") -> dict:
    """Load a checkpoint, turning every way it can be bad into one readable UserError."""
    path = Path(path)
    if not path.is_file():
        raise UserError(
            f"checkpoint not found: {path}; pass checkpoint=<run_dir>/checkpoints/best.pt"
        )
    try:
        # weights_only=False: the file holds RNG states and the config, written by this program.
        ckpt = torch.load(path, map_location=map_location, weights_only=False)
    except (RuntimeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile, ValueError) as err:
        raise UserError(
            f"checkpoint {path} is truncated or corrupt ({type(err).__name__}); "
            f"use another one, e.g. an earlier checkpoints/step_*.pt"
        ) from err
    if not isinstance(ckpt, dict) or any(k not in ckpt for k in REQUIRED_KEYS):
        raise UserError(f"{path} is not a translate checkpoint (missing model/config/tokenizer)")
    if ckpt["format_version"] > FORMAT_VERSION:
        raise UserError(f"{path} was written by a newer translate; upgrade to read it")
    return ckpt


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
        atomic_torch_save(state, path)
        _atomic_link(path, self.last)
        if is_best:
            _atomic_link(path, self.best)
        for old in sorted(self.directory.glob("step_*.pt"))[: -self.keep_last]:
            old.unlink()
        log.debug("saved %s%s", path, " (best)" if is_best else "")
        return path


def restore_model(ckpt: dict, device: torch.device):
    """``(model, tokenizer, train_config)`` from a loaded checkpoint, in eval mode on ``device``."""
    config = OmegaConf.create(ckpt["config"])
    tokenizer = Tokenizer.from_model_proto(ckpt["tokenizer"])
    model = model_settings(config.model).build(tokenizer.vocab_size, tokenizer.PAD)
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError as err:
        raise UserError(
            f"the checkpoint's weights do not fit its own model config ({str(err).splitlines()[0]})"
        ) from err
    return model.to(device).eval(), tokenizer, config
