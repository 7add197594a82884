"""A run dir belongs to one run: a lock held while it trains (:class:`RunLock`; the OS frees
it when the process dies), no silent overwrite (:func:`check_fresh`), and the Hydra overrides a
sweep job was started with (:func:`parse_overrides`)."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import shutil
import socket
from pathlib import Path

from translate import io
from translate.errors import UserError, counted
from translate.io import MARKS

log = logging.getLogger(__name__)

LOCK_NAME = ".lock"
# TensorBoard's event files, which its writer names itself (no mark): a run's own.
_EVENTS = re.compile(r"events\.out\.tfevents\..+")
# What a finished or interrupted run leaves that a fresh run would overwrite: its results and
# complete checkpoints. TensorBoard events alone (a run stopped before its first checkpoint)
# are no run to keep: a new run hides them (SummaryWriter's purge_step) and writes its own.
RESULTS = ("results.json", "test.hyp.txt", "test.ref.txt")
# Where files are written through a temporary ``.<name>.<random>.tmp`` (translate.io).
PARTIAL_WRITES = (".", "checkpoints")


def parse_overrides(lines) -> dict[str, str]:
    """Hydra overrides: ``["heads=4", "+x=1"]`` -> ``{"heads": "4", "x": "1"}``."""
    pairs = (str(line).partition("=") for line in lines or [])
    return {key.lstrip("+~"): value for key, sep, value in pairs if sep}


class RunLock:
    """An exclusive ``flock`` on ``<run_dir>/.lock``, which names its holder."""

    def __init__(self, run_dir: Path, key: str = "hydra.run.dir") -> None:
        self.path = Path(run_dir) / LOCK_NAME
        self.key = key
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise UserError(
                f"cannot write to the run dir {self.path.parent} ({err.strerror}); pass a "
                f"writable one with {self.key}=<folder>"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise UserError(
                f"{self.path.parent} is in use by another run ({holder}); wait for it to end, "
                f"or give this run its own {self.key}=<folder>"
            ) from None
        previous = os.pread(fd, 200, 0).decode(errors="replace").strip()
        if previous:  # a holder that released nothing: it died without cleaning up
            log.warning("taking over the lock of a run that is no longer running (%s)", previous)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
            self.path.unlink()
        os.close(self._fd)  # closing the descriptor releases the flock
        self._fd = None


def remove_partial_writes(run_dir: Path) -> None:
    """Remove the temporary files a killed writer left (under the lock no one writes them)."""
    partial = [
        path
        for folder in PARTIAL_WRITES
        for path in (Path(run_dir) / folder).glob(".*.tmp")
        if path.is_file()
    ]
    for path in partial:
        path.unlink()
    if partial:
        log.warning(
            "removed %d partial file(s) of an interrupted write: %s",
            len(partial),
            ", ".join(str(p) for p in partial),
        )


def run_outputs(run_dir: Path) -> list[str]:
    """What of a run ``run_dir`` holds: checkpoints, results (and then its events), or nothing."""
    run_dir = Path(run_dir)
    found = [name for name in RESULTS if (run_dir / name).exists()]
    if any((run_dir / "checkpoints").glob("*.pt")):
        found.insert(0, "checkpoints")
    if found and (run_dir / "tensorboard").exists():
        found.append("tensorboard")
    return found


def training_run_marks(directory: Path) -> list[str]:
    """What in ``directory`` only a training run writes."""
    names = ("checkpoints", "results.json", "train.log")
    return [name for name in names if (directory / name).exists()]


def check_fresh(run_dir: Path, resume: bool | str, overwrite: bool) -> None:
    """A fresh run needs a dir without another run's outputs: refused, or cleared by overwrite."""
    found = [] if resume else run_outputs(run_dir)
    if not found:
        return
    if not overwrite:
        raise UserError(
            f"{run_dir} already holds a run ({', '.join(found)}); continue it with "
            "trainer.resume=true, start a new one with hydra.run.dir=<new folder>, or replace "
            "it with trainer.overwrite=true"
        )
    files = _files_to_remove(Path(run_dir), found)
    log.warning("trainer.overwrite=true: removing %s from %s", ", ".join(found), run_dir)
    for path in files:
        io.remove(path)
    for name in found:  # what is left is folders and the marks of the files removed
        if (Path(run_dir) / name).is_dir():
            shutil.rmtree(Path(run_dir) / name)


def _files_to_remove(run_dir: Path, found: list[str]) -> list[Path]:
    """Every file of ``found``, each one this package wrote and nobody changed since (event
    files by their names); anything else stops the overwrite before a file is removed."""
    files, foreign = [], []
    for name in found:
        path = run_dir / name
        inside = path.rglob("*") if path.is_dir() and not path.is_symlink() else [path]
        for file in inside:
            if MARKS in file.relative_to(run_dir).parts or file.is_dir() and not file.is_symlink():
                continue
            events = file.parent.name == "tensorboard" and _EVENTS.fullmatch(file.name)
            (files if events or io.written_here(file) else foreign).append(file)
    if foreign:
        shown = ", ".join(str(f) for f in foreign[:3]) + (", …" if len(foreign) > 3 else "")
        raise UserError(
            f"trainer.overwrite=true would remove {shown}, which this package did not write "
            f"(or which changed since); nothing was removed; move {counted(len(foreign), 'file')} "
            "away, or train in a new run with hydra.run.dir=<new folder>"
        )
    return files
