"""Files written whole or not at all.

Every file the package writes that another process may read while it is written (checkpoints,
the tokenizer and encoding caches, the ablation report of parallel sweep jobs) goes through
:func:`atomic_write`: a temporary file beside the target, flushed to disk, then renamed over it,
so a reader sees the old file or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from translate.errors import UserError


@contextlib.contextmanager
def _temp_beside(path: Path) -> Iterator[tuple[BinaryIO, Path]]:
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
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError:
        tmp.write_bytes(src.read_bytes())
    os.replace(tmp, dst)


def check_output_file(path: str | os.PathLike, key: str) -> Path:
    """``path`` as an output file that can be written, checked before any work (``key`` names
    the argument): its folder exists and it is not a folder itself."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{key}={path} is a folder; name a file to write")
    if not path.parent.is_dir():
        raise UserError(f"{key}={path}: the folder {path.parent} does not exist; create it first")
    if not os.access(path.parent, os.W_OK):
        raise UserError(f"{key}={path}: the folder {path.parent} is not writable")
    return path
