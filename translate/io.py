"""The one door every file the package writes goes through: :func:`write`.

- a new path is written;
- an existing file is replaced only when this package wrote it as the same kind of output and
  it is unchanged since (its *mark*), or when the writer derived the path itself and vouches
  for what is there (``adopt``: a cache file named by its key, found unusable);
- never a file the command reads (``inputs``, also through a link), a folder, a device, or a
  symbolic link (writing through one replaces a file it did not name);
- always atomically (a temporary file beside the target, fsynced, renamed over it), so a full
  disk, a crash or a signal leaves the old file whole;
- a refusal is one :class:`UserError` line naming the path, what is there and what to do; a
  write the system refuses is :class:`WriteFailed` (torch's zip writer raises a
  ``RuntimeError`` while handling the ``OSError``: it is found in the context).

A mark, ``<folder>/.translate-marks/<name>.json``, holds the kind and the SHA-256 of what was
written: a copy, a hand edit or another program's file is not ours to replace. Marks are written
under a lock on the marks folder, so parallel sweep jobs rewriting one report never refuse each
other. tests/test_write_door.py finds no other write in the package.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from translate.errors import UserError

STDOUT = "-"
MARKS = ".translate-marks"
Data = bytes | str | Callable[[BinaryIO], None]
# A folder holding one of these is a run's dir (or an export's): named in a refusal.
_RUN_MARKERS = (".hydra", "checkpoints", "results.json", "translate.json", "multirun.yaml")
_RUN_FOLDERS = (".hydra", "checkpoints")
# Torch checkpoints (and every zip archive).
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
    """The system refused a write; ``errno`` says why."""

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


def write_error_reason(err: OSError) -> str:
    return _WRITE_ERRORS.get(err.errno, err.strerror or str(err))


@contextlib.contextmanager
def mapped_write_errors(path: Path) -> Iterator[None]:
    """A write the system refuses (an ``OSError`` in the chain) as :class:`WriteFailed`."""
    try:
        yield
    except WriteFailed:
        raise
    except (OSError, RuntimeError) as exc:
        err = _os_error(exc)
        if err is None or err.errno not in _WRITE_ERRORS:
            raise
        where, todo = "", "write elsewhere or fix the permissions, then run the command again"
        if err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            todo = "free some space (or write elsewhere) and run the command again"
            with contextlib.suppress(OSError):
                free = shutil.disk_usage(path.parent).free / 2**20
                where = f" ({free:,.1f} MiB free in {path.parent})"
        raise WriteFailed(
            f"could not write {path}: {write_error_reason(err)}{where}; nothing was replaced; "
            f"{todo}",
            err.errno,
        ) from None


def write(
    path: str | os.PathLike,
    data: Data,
    kind: str,
    *,
    inputs: Iterable[str | os.PathLike] = (),
    key: str | None = None,
    adopt: bool = False,
) -> Path:
    """Write ``data`` (bytes, text as UTF-8, or a function writing into a binary file) to
    ``path`` as an output of ``kind``. ``key``: the setting that chose the path (for the
    refusal); ``adopt``: an unmarked or changed file there is an earlier copy of this output."""
    path = Path(path)
    with _claimed(path, kind, inputs, key, adopt):
        _mark(path, kind, _atomic(path, data))
    return path


def link(src: Path, dst: Path, kind: str, adopt: bool = False) -> None:
    """Make ``dst`` the same file as ``src`` (a hard link, else a copy), by :func:`write`'s rule."""
    with _claimed(dst, kind, adopt=adopt):
        tmp = dst.with_name(f".{dst.name}.link.tmp")
        with mapped_write_errors(dst):
            tmp.unlink(missing_ok=True)
            try:
                os.link(src, tmp)
            except OSError:
                shutil.copyfile(src, tmp)
            os.replace(tmp, dst)
        _mark(dst, kind, file_sha256(dst))


def move(src: Path, dst: Path) -> None:
    """Rename ``src`` (ours, or a record Hydra made) to a new path ``dst``, with its mark."""
    if dst.exists() or dst.is_symlink():
        _refuse(dst, None, "already there")
    with mapped_write_errors(dst):
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dst)
        if _mark_path(src).exists():
            _mark_path(dst).parent.mkdir(exist_ok=True)
            os.replace(_mark_path(src), _mark_path(dst))


def remove(path: Path) -> None:
    """Delete ``path``, an output this package wrote, and its mark."""
    path.unlink(missing_ok=True)
    _mark_path(path).unlink(missing_ok=True)


def check(path: Path, kind: str) -> None:
    """Refuse what :func:`write` would: for a writer that checks all its files first."""
    _check_replace(Path(path), kind)


def written_here(path: Path) -> bool:
    """Whether ``path`` is a file this package wrote and nobody changed since."""
    found = _read_mark(path)
    return (
        found is not None
        and path.is_file()
        and not path.is_symlink()
        and found.get("sha256") == file_sha256(path)
    )


def _check_replace(
    path: Path,
    kind: str,
    inputs: Iterable = (),
    key: str | None = None,
    adopt: bool = False,
    content: bool = True,
) -> None:
    """``content=False`` leaves out whether a marked file changed (a read of the whole file)."""
    if path.is_symlink():
        _refuse(path, key, "a symbolic link (only the file it points to may be named)")
    if not path.exists():
        return
    if path.is_dir():
        _refuse(path, key, "a folder; name a file to write")
    if not stat.S_ISREG(path.stat().st_mode):
        _refuse(path, key, "a device or another special file, not a regular file")
    for source in inputs:
        if Path(source).exists() and os.path.samefile(path, source):
            _refuse(path, key, f"also this command's input ({source}): writing it would destroy it")
    found = _read_mark(path)
    if found is None:
        if not adopt:
            _refuse(path, key, _what_is(path))
        return
    if found.get("kind") != kind:
        _refuse(path, key, f"the {found.get('kind')} output of an earlier command")
    if content and not adopt and found.get("sha256") != file_sha256(path):
        article = "an" if kind[:1] in "aeiou" else "a"
        _refuse(path, key, f"{article} {kind} output changed since it was written")


def _refuse(path: Path, key: str | None, what: str) -> None:
    named = f"{key}={path}" if key else str(path)
    todo = f"pass another {key}=<file>" if key else "move it away and run the command again"
    raise UserError(f"{named} is {what}; nothing was written; {todo}")


def _what_is(path: Path) -> str:
    with open(path, "rb") as f:
        if f.read(len(_ZIP_MAGIC)) == _ZIP_MAGIC:
            return "a checkpoint (or another zip archive) this command did not write"
    folder = path.parent
    if folder.name in _RUN_FOLDERS or _RUN_FOLDERS[0] in folder.parts:
        return f"a file of a run's {folder.name}/ folder"
    if any((folder / marker).exists() for marker in _RUN_MARKERS):
        return f"a file of the run, sweep or export in {folder}"
    return "a file this command did not write (delete it first to replace it)"


def _atomic(path: Path, data: Data) -> str:
    """Write ``data`` to a temporary file beside ``path``, fsynced, renamed over it; its SHA-256."""
    with mapped_write_errors(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                if callable(data):
                    data(f)
                    f.flush()
                    digest = file_sha256(tmp)
                else:
                    payload = data.encode("utf-8") if isinstance(data, str) else data
                    f.write(payload)
                    digest = hashlib.sha256(payload).hexdigest()
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o644)  # mkstemp makes it owner-only; shared caches should be readable
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return digest


def _mark_path(path: Path) -> Path:
    return path.parent / MARKS / f"{path.name}.json"


@contextlib.contextmanager
def _claimed(
    path: Path, kind: str, inputs: Iterable = (), key: str | None = None, adopt: bool = False
) -> Iterator[None]:
    """The lock on ``path``'s marks folder, held once ``path`` may be replaced."""
    # First without the lock, which makes the marks folder: a refusal leaves nothing behind.
    # Whether a marked file changed is asked once, under the lock: its marks folder is there.
    _check_replace(path, kind, inputs, key, adopt, content=False)
    marks = path.parent / MARKS
    with mapped_write_errors(marks):
        marks.mkdir(parents=True, exist_ok=True)
        fd = os.open(marks / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        _check_replace(path, kind, inputs, key, adopt)  # again: another writer may have come
        yield
    finally:
        os.close(fd)


def _mark(path: Path, kind: str, digest: str) -> None:
    _atomic(_mark_path(path), json.dumps({"kind": kind, "sha256": digest}))


def _read_mark(path: Path) -> dict | None:
    try:
        found = json.loads(_mark_path(path).read_bytes())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes, read in blocks (a checkpoint may not fit twice)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclasses.dataclass(frozen=True)
class Output:
    path: Path | None  # None: standard output
    kind: str = ""
    key: str = "output"
    inputs: tuple = ()
    through: bool = False  # a named pipe: written in place, never renamed over

    def write(self, data: str | bytes) -> None:
        payload = data.encode("utf-8") if isinstance(data, str) else data
        if self.path is None:
            _write_stdout(payload)
        elif self.through:
            with mapped_write_errors(self.path), open(self.path, "wb") as f:
                f.write(payload)
        else:
            write(self.path, payload, self.kind, inputs=self.inputs, key=self.key)


def _write_stdout(payload: bytes) -> None:
    try:
        sys.stdout.flush()
        sys.stdout.buffer.write(payload)
        sys.stdout.flush()
    except OSError as err:
        # Nothing more can reach stdout: so Python's own flush at exit prints no second error.
        point_at_devnull(sys.stdout)
        why = write_error_reason(err)
        raise WriteFailed(f"could not write to standard output: {why}", err.errno) from None


def point_at_devnull(stream) -> None:
    """Point ``stream``'s fd at /dev/null: after the system refused a write, nothing more is."""
    with contextlib.suppress(OSError, ValueError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stream.fileno())
        os.close(null)


def check_output_file(
    path: str | os.PathLike,
    key: str,
    kind: str,
    inputs: Iterable[str | os.PathLike] = (),
) -> Output:
    """``key=path`` as an output file of ``kind``, checked before any work by :func:`write`'s
    rule; ``-`` is standard output, a named pipe is written through."""
    if str(path) == STDOUT:
        return Output(None)
    given, inputs = Path(path), tuple(inputs)
    if given.exists() and stat.S_ISFIFO(given.stat().st_mode) and not given.is_symlink():
        return Output(given, kind, key, inputs, through=True)
    _check_replace(given, kind, inputs, key)
    if not given.parent.is_dir():
        raise UserError(f"{key}={given}: the folder {given.parent} does not exist; create it first")
    if not os.access(given.parent, os.W_OK):
        raise UserError(f"{key}={given}: the folder {given.parent} is not writable")
    return Output(given, kind, key, inputs)


def write_folder(path: Path, fill: Callable[[str], dict[str, bytes | str]], key: str) -> Path:
    """A new (or empty) folder ``path`` made whole or not at all: ``fill(folder)`` writes into
    a temporary folder beside it and returns files of ours to add (name: content); then it is
    renamed to ``path``."""
    check_output_folder(path, key)
    make_folder(path.parent, key)
    for found in path.parent.iterdir():  # the partial folders of writers that died
        match = _PARTIAL.fullmatch(found.name)
        if match and match[1] == path.name and not _alive(int(match[2])):
            shutil.rmtree(found, ignore_errors=True)
    partial = path.parent / f".{path.name}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)  # left by an earlier process with our pid
    try:
        with mapped_write_errors(path):
            partial.mkdir()
            for name, content in fill(str(partial)).items():
                _atomic(partial / name, content)
            shutil.rmtree(path / MARKS, ignore_errors=True)  # all an empty output may hold
            os.replace(partial, path)  # rename(2) replaces an empty folder
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return path


# Where process PID writes folder NAME until it is complete: .NAME.partial-PID.
_PARTIAL = re.compile(r"\.(.+)\.partial-([0-9]{1,9})")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, as another user's process
    return True


def summary_writer(folder: Path, **kwargs):
    """TensorBoard's writer: each event file gets a new name, so none is replaced."""
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(str(make_folder(folder, "tensorboard")), **kwargs)


def make_folder(path: str | os.PathLike, key: str) -> Path:
    """``path`` as a folder, created with its parents if missing; one line where it cannot be."""
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
    """``path`` or a folder above it that exists as something other than a folder."""
    return next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)


def _no_file_in_the_way(path: Path, key: str) -> Path:
    if path.is_symlink() and not path.exists():
        raise UserError(
            f"{key}={path} is a symbolic link to {os.path.realpath(path)}, which does not "
            f"exist; create it or pass another {key}"
        )
    blocker = file_in_the_way(path)
    if blocker is not None:
        what = "a file" if blocker.is_file() else "a device or another special file"
        raise UserError(f"{key}={path}: {blocker} is {what}, not a folder; pass a folder")
    return path


def check_output_folder(path: str | os.PathLike, key: str) -> Path:
    """``path`` as a folder for a command's files, checked before any work: new or empty, no
    file in the way (:func:`make_folder` creates it)."""
    path = _no_file_in_the_way(Path(path), key)
    if path.is_symlink():  # its files would land in a folder the command was not given
        raise UserError(f"{key}={path} is a symbolic link; pass the folder it points to")
    if path.is_dir() and any(p.name != MARKS for p in path.iterdir()):
        raise UserError(
            f"{key}={path} is not empty; its files would be replaced or mixed with new ones; "
            f"pass a new or empty folder"
        )
    return path
