"""Files written whole or not at all, and the one rule for where a command may write.

Every file the package writes that another process may read while it is written (checkpoints,
the tokenizer and encoding caches, the ablation report of parallel sweep jobs) goes through
:func:`atomic_write`: a temporary file beside the target, flushed to disk, then renamed over it,
so a reader sees the old file or the new one, never half of one.

Every file or folder a user names as a command's output goes through :func:`check_output_file`
or :func:`check_output_folder` before any work, and is written through :meth:`Output.write`.
The rule: never one of the command's own inputs, never a file a run keeps as its record (a
checkpoint, results, config, an export), never over a folder or a non-regular file by renaming
(a device or pipe such as ``/dev/null`` is written through; ``-`` is stdout), never into a
non-empty folder; a symbolic link is followed and its target replaced, the link kept.

A write the system refuses (a full disk, a file-size limit, no permission) is
:class:`WriteFailed`, a :class:`UserError` with one line that names the file and what to do;
torch's zip writer reports such a failure as a ``RuntimeError`` raised while handling the
``OSError``, which is found in its context.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from translate.errors import UserError

STDOUT = "-"
# A folder holding one of these is a run's dir (or an export's): files already in it are its
# record, which no output replaces; so is everything in a run's checkpoints/ and .hydra/.
_RUN_MARKERS = (".hydra", "checkpoints", "results.json", "translate.json")
_RUN_FOLDERS = (".hydra", "checkpoints")
# Torch checkpoints (and every zip archive): a text output never replaces one.
_ZIP_MAGIC = b"PK\x03\x04"
# Errors of the system refusing a write, as opposed to a bug.
_WRITE_ERRORS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EFBIG: "the file is larger than this process may write (ulimit -f)",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
}


class WriteFailed(UserError):
    """The system refused a write; ``errno`` says why (``errno.ENOSPC``: the disk is full)."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.errno = code


def _os_error(exc: BaseException) -> OSError | None:
    """The ``OSError`` behind ``exc``: itself, or one it was raised from or while handling."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, OSError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def _write_failed(path: Path, err: OSError) -> WriteFailed:
    """One line for a refused write of ``path``: why, the free space where it matters."""
    why = _why(err)
    if err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        free = _free_mib(path.parent)
        where = f" ({free:,.1f} MiB free in {path.parent})" if free is not None else ""
        todo = "free some space (or write elsewhere) and run the command again"
    else:
        where, todo = "", "write elsewhere or fix the permissions, then run the command again"
    return WriteFailed(
        f"could not write {path}: {why}{where}; nothing was replaced; {todo}", err.errno
    )


def _why(err: OSError) -> str:
    return _WRITE_ERRORS.get(err.errno, err.strerror or str(err))


def _free_mib(folder: Path) -> float | None:
    try:
        return shutil.disk_usage(folder).free / 2**20
    except OSError:
        return None


@contextlib.contextmanager
def mapped_write_errors(path: Path) -> Iterator[None]:
    """A write the system refuses (an ``OSError`` in the exception's chain) as
    :class:`WriteFailed`; every other exception as it is."""
    try:
        yield
    except WriteFailed:
        raise
    except (OSError, RuntimeError) as exc:
        err = _os_error(exc)
        if err is None or err.errno not in _WRITE_ERRORS:
            raise
        raise _write_failed(path, err) from None


@contextlib.contextmanager
def _temp_beside(path: Path) -> Iterator[tuple[BinaryIO, Path]]:
    with mapped_write_errors(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                yield f, Path(tmp)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o644)  # mkstemp makes it owner-only; shared caches should be readable
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def atomic_write(path: str | os.PathLike, data: bytes | str) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` atomically."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    with _temp_beside(Path(path)) as (f, _):
        f.write(payload)


def atomic_write_with(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> None:
    """``write(file)`` into a temporary file, then rename it over ``path`` (e.g. torch.save)."""
    with _temp_beside(Path(path)) as (f, _):
        write(f)


def atomic_link(src: Path, dst: Path) -> None:
    """Make ``dst`` the same file as ``src`` (hard link; a copy where links are unsupported)."""
    tmp = dst.with_name(f".{dst.name}.link.tmp")
    with mapped_write_errors(dst):
        tmp.unlink(missing_ok=True)
        try:
            os.link(src, tmp)
        except OSError:
            tmp.write_bytes(src.read_bytes())
        os.replace(tmp, dst)


def make_folder(path: str | os.PathLike, key: str) -> Path:
    """``path`` as a folder, created with its parents if missing; one line where it cannot be
    (a file in the way, no permission, a read-only or virtual file system)."""
    path = _no_file_in_the_way(Path(path), key)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(
            f"{key}={path}: cannot create the folder ({err.strerror}); pass another {key}"
        ) from None
    if not os.access(path, os.W_OK):
        raise UserError(f"{key}={path}: the folder is not writable; pass another {key}")
    return path


def file_in_the_way(path: Path) -> Path | None:
    """``path`` or the folder above it that exists as something other than a folder, if any:
    what stops ``path`` from becoming a folder."""
    return next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)


def _no_file_in_the_way(path: Path, key: str) -> Path:
    blocker = file_in_the_way(path)
    if blocker is not None:
        raise UserError(f"{key}={path}: {blocker} is a file, not a folder; pass a folder")
    return path


@dataclasses.dataclass(frozen=True)
class Output:
    """Where a command writes one output file, as :func:`check_output_file` allows."""

    path: Path | None  # None: standard output
    through: bool = False  # a device or pipe: written in place, never renamed over

    def write(self, data: str | bytes) -> None:
        payload = data.encode("utf-8") if isinstance(data, str) else data
        if self.path is None:
            _write_stdout(payload)
        elif self.through:
            with mapped_write_errors(self.path), open(self.path, "wb") as f:
                f.write(payload)
        else:
            atomic_write(self.path, payload)


def _write_stdout(payload: bytes) -> None:
    try:
        sys.stdout.flush()
        sys.stdout.buffer.write(payload)
        sys.stdout.flush()
    except OSError as err:
        # Nothing more can reach stdout: point it at /dev/null so Python's own flush at exit
        # does not print a second error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise WriteFailed(f"could not write to standard output: {_why(err)}", err.errno) from None


def check_output_file(
    path: str | os.PathLike,
    key: str,
    inputs: Iterable[str | os.PathLike] = (),
    may_replace: Callable[[Path], bool] | None = None,
) -> Output:
    """``path`` (``key=path`` on the command line) as an output file, checked before any work
    against the rule in this module's docstring. ``inputs`` are the files the command reads;
    ``may_replace(file)`` allows replacing a run's record the command itself wrote (an earlier
    average)."""
    if str(path) == STDOUT:
        return Output(None)
    given = Path(path)
    real = Path(os.path.realpath(given))  # a link's target is written; the link stays
    if real.is_dir():
        raise UserError(f"{key}={given} is a folder; name a file to write")
    if real.exists():
        _refuse_replacing(given, real, key, inputs, may_replace)
        if not stat.S_ISREG(real.stat().st_mode):
            return Output(real, through=True)  # _refuse_replacing let only devices and pipes by
    if not real.parent.is_dir():
        raise UserError(f"{key}={given}: the folder {real.parent} does not exist; create it first")
    if not os.access(real.parent, os.W_OK):
        raise UserError(f"{key}={given}: the folder {real.parent} is not writable")
    return Output(real)


def _refuse_replacing(
    given: Path, real: Path, key: str, inputs: Iterable, may_replace: Callable | None
) -> None:
    """One line if the existing ``real`` is something ``key`` must not replace."""
    mode = real.stat().st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
        raise UserError(f"{key}={given} is not a regular file, a device or a pipe; name a file")
    if not stat.S_ISREG(mode):
        if not os.access(real, os.W_OK):
            raise UserError(f"{key}={given} is not writable")
        return
    for source in inputs:
        if Path(source).exists() and os.path.samefile(real, source):
            raise UserError(
                f"{key}={given} is also this command's input ({source}): writing it would "
                f"destroy what is read; pass another {key}=<file>"
            )
    what = run_record(real)
    if what and not (may_replace and may_replace(real)):
        raise UserError(
            f"{key}={given} would replace {what}; nothing was written; pass another {key}=<file>"
        )


def run_record(path: Path) -> str | None:
    """What ``path`` (an existing file) is, if it is a file a run keeps: a checkpoint or other
    archive, a file of a run's or an export's folder, or of its checkpoints/ or .hydra/. None
    for any other file."""
    with open(path, "rb") as f:
        if f.read(len(_ZIP_MAGIC)) == _ZIP_MAGIC:
            return f"{path}, a checkpoint (or another zip archive)"
    folder = path.parent
    if folder.name in _RUN_FOLDERS or _RUN_FOLDERS[0] in folder.parts:
        return f"{path}, a file of a run's {folder.name}/ folder"
    if any((folder / marker).exists() for marker in _RUN_MARKERS):
        return f"{path}, a file of the run or export in {folder}"
    return None


def check_output_folder(path: str | os.PathLike, key: str) -> Path:
    """``path`` as a folder for a command's files, checked before any work: new or empty
    (files already there are not this command's), no file in the way. :func:`make_folder`
    creates it when the files are ready."""
    path = _no_file_in_the_way(Path(path), key)
    if path.is_dir() and any(path.iterdir()):
        raise UserError(
            f"{key}={path} is not empty; its files would be replaced or mixed with new ones; "
            f"pass a new or empty folder"
        )
    return path
