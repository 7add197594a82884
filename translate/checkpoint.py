"""The checkpoint file: self-contained (weights, training state, resolved config, SentencePiece
model), of tensors and plain values only, read with ``weights_only=True``: never runs code."""

from __future__ import annotations

import errno
import re
import shutil
import zipfile
from pathlib import Path
from pickle import UnpicklingError
from zipfile import BadZipFile

import torch

from translate import io
from translate.errors import UserError
from translate.io import WriteFailed

FORMAT_VERSION = 3
# What the one door for writes (translate.io) knows a training checkpoint and an average as.
CHECKPOINT = "training checkpoint"
AVERAGE = "averaged checkpoint"
REQUIRED_KEYS = ("format_version", "model", "config", "tokenizer", "step")
# What each field must be: a crafted or damaged file with another type failed later, deep in a
# command, with a traceback. bool is no integer here, though Python's int it is.
_FIELDS = {
    "format_version": (int, "an integer"),
    "step": (int, "an integer"),
    "model": (dict, "a table of weights"),
    "config": (dict, "a group of settings"),
    "tokenizer": (bytes, "the bytes of a SentencePiece model"),
    "progress": (dict, "a group of counters"),
    "optimizer": (dict, "an optimizer state"),
    "scheduler": (dict, "a scheduler state"),
    "scaler": (dict, "an AMP scaler state"),
    "rng": (dict, "a group of RNG states"),
    "data_fingerprints": (dict, "a group of fingerprints"),
    "averaged_from": (list, "a list of files"),
}
_CONFIG_GROUPS = ("model", "data", "decode", "optim", "trainer", "runtime", "analysis")
# How torch.load fails on a damaged file, or (UnpicklingError naming a GLOBAL) refuses one.
_LOAD_ERRORS = (UnpicklingError, RuntimeError, EOFError, BadZipFile, ValueError, OSError)


def save_checkpoint(state: dict, path: Path, kind: str = CHECKPOINT, adopt: bool = False) -> None:
    """``torch.save`` through :func:`translate.io.write`; a full disk: one line with the size."""
    try:
        io.write(path, lambda f: torch.save(state, f), kind, adopt=adopt)
    except WriteFailed as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise
        count = _ByteCount()  # the file's size: its tensors alone leave out the rest
        torch.save(state, count)
        need = f"a checkpoint needs {count.bytes / 2**20:,.2f} MiB"
        if err.errno == errno.EFBIG:  # a file-size limit, not the disk: free space is no cure
            why, todo = f"{need}, more than this process may write (ulimit -f)", "raise the limit"
        else:
            free = shutil.disk_usage(path.parent).free / 2**20
            why, todo = f"no space left ({free:,.1f} MiB free, {need})", "free some space"
        # Training adds how to resume the run (translate.train); averaging has none to resume.
        raise WriteFailed(
            f"could not save {path.name} in {path.parent}: {why}; the checkpoints already "
            f"there are intact; {todo}",
            err.errno,
        ) from None


class _ByteCount:  # a file that only counts the bytes written into it
    bytes = 0

    def write(self, data) -> int:
        self.bytes += len(data)
        return len(data)

    def flush(self) -> None:
        pass


def load_checkpoint(path: str | Path, map_location="cpu") -> dict:
    """Every way a checkpoint can be bad is one UserError line."""
    path = Path(path)
    if not path.is_file():
        raise UserError(
            f"checkpoint not found: {path}; pass checkpoint=<run_dir>/checkpoints/best.pt"
        )
    try:
        _check_zip(path)
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except _LOAD_ERRORS as err:
        # The safe unpickler names the global it refused; anything else is a damaged file.
        found = re.search(r"GLOBAL ([\w.]+)", str(err))
        if found is None or not isinstance(err, UnpicklingError):
            raise UserError(
                f"checkpoint {path} is truncated or corrupt ({type(err).__name__}); "
                f"use another one, e.g. an earlier checkpoints/step_*.pt"
            ) from None
        raise UserError(
            f"checkpoint {path} holds Python objects ({found[1]}) that loading would have to "
            "run code for; refused, since translate loads tensors and plain values only. Use a "
            "checkpoint written by translate, or re-save the weights from a source you trust"
        ) from None
    if not isinstance(ckpt, dict) or any(k not in ckpt for k in REQUIRED_KEYS):
        raise UserError(f"{path} is not a translate checkpoint (missing model/config/tokenizer)")
    problem = _field_problem(ckpt)
    if problem is not None:
        key, value, what = problem
        raise UserError(
            f"{path} is not a usable translate checkpoint: its {key} is {_shown(value)}, not "
            f"{what}; use another one, e.g. an earlier checkpoints/step_*.pt"
        )
    version = ckpt["format_version"]
    if version > FORMAT_VERSION:
        raise UserError(f"{path} was written by a newer translate; upgrade to read it")
    if version < FORMAT_VERSION:
        raise UserError(
            f"{path} is a checkpoint of format {version}, which this translate no longer reads "
            f"(it reads format {FORMAT_VERSION}); train the model again"
        )
    return ckpt


def _field_problem(ckpt: dict) -> tuple[str, object, str] | None:
    """``(key, value, what it should be)`` of the first field of ``ckpt`` that is not so."""
    for key, (kind, what) in _FIELDS.items():
        value = ckpt.get(key, kind())
        if not isinstance(value, kind) or isinstance(value, bool):
            return key, value, what
    if ckpt["step"] < 0:
        return "step", ckpt["step"], "a step count (>= 0)"
    for key, value in ckpt["model"].items():
        if not isinstance(value, torch.Tensor):
            return f"model.{key}", value, "a tensor"
    for key, value in ckpt["config"].items():
        if key in _CONFIG_GROUPS and not isinstance(value, dict):
            return f"config.{key}", value, "a group of settings"
    for key, value in ckpt.get("progress", {}).items():
        if not isinstance(value, (int, float, type(None))):
            return f"progress.{key}", value, "a number"
    return None


def _shown(value) -> str:
    if isinstance(value, (str, int, float, bool, type(None))) and len(repr(value)) <= 40:
        return repr(value)
    return f"a {type(value).__name__}"


def _check_zip(path: Path) -> None:
    """Refuse a file that is no zip archive, as every checkpoint torch.save writes is (torch
    reads any other bytes as a pickle of its old format, failing in any way: a text file named
    .pt raised a KeyError), and a zip entry that fails its CRC (torch.load does not check them:
    wrong weights)."""
    try:
        archive = zipfile.ZipFile(path)
    except BadZipFile:
        raise UserError(
            f"checkpoint {path} is truncated or corrupt, or no checkpoint at all (not a zip "
            "archive, as every checkpoint translate writes is); use another one, e.g. an "
            "earlier checkpoints/step_*.pt"
        ) from None
    with archive:
        bad = archive.testzip()
    if bad is not None:
        raise BadZipFile(f"CRC check failed for {bad}")


def non_finite(weights: dict) -> str | None:
    """The first float tensor in ``weights`` holding NaN or infinity (and how many do), or None."""
    bad = [k for k, v in weights.items() if v.is_floating_point() and not torch.isfinite(v).all()]
    return None if not bad else bad[0] + (f" and {len(bad) - 1} more" if len(bad) > 1 else "")
