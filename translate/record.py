"""A command's record in its run dir (``.hydra/``), made once the command is accepted.

Hydra writes its record before the command has checked anything (a refused ``heads=3``, then
``heads=2`` into the same dir, left a 2-head run whose ``.hydra/config.yaml`` said 3). Here
Hydra writes none (``hydra.output_subdir`` resolves to null); the record is held and
:func:`accept` writes it: a training run once it has claimed its dir and checked its
checkpoints, any other command when its work is done, a multirun job as it starts (the sweep's
report names a failed job by it). A command that stops before leaves its run dir as it found
it. Entry-point layer: it imports Hydra.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from translate import io


@dataclass
class _Before:  # a single run's dir as it was before Hydra made it
    path: Path
    made: list[Path]  # the folders Hydra creates for it, innermost first
    names: set[str]  # the names it already held


@dataclass
class _Pending:
    run_dir: Path
    files: dict[str, str]  # file name -> text, as Hydra's _save_config writes them


_wanted: set[str] = set()  # run dirs whose command keeps a record (the resolver below)
_before: _Before | None = None
_pending: _Pending | None = None


# ``hydra.output_subdir`` of the commands that keep a record (conf/hydra/default.yaml): null,
# the run dir noted for recorded(). Every entry point imports this module before Hydra composes.
OmegaConf.register_new_resolver(
    "translate_record_dir", lambda run_dir: _wanted.add(run_dir), use_cache=True, replace=True
)


def stamp() -> str:
    """Now, to the microsecond: the names of records set beside a run's own."""
    return f"{dt.datetime.now():%Y-%m-%d_%H-%M-%S_%f}"


class RecordCallback(Callback):
    """Notes what a single run's dir held before Hydra's mkdir and log file (``on_run_start``)."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        global _before
        path = Path(os.path.abspath(str(config.hydra.run.dir)))  # as Hydra's output_dir
        made = [p for p in (path, *path.parents) if not p.exists()]
        names = {p.name for p in path.iterdir()} if path.is_dir() else set()
        _before = _Before(path, made, names)


@contextlib.contextmanager
def recorded(cfg: DictConfig | None) -> Iterator[None]:
    """Around a command's body: its record is written when it returns, or earlier through
    :func:`accept`; if it stops before, what it added to its run dir is removed."""
    global _pending
    _pending = None
    hydra_cfg = HydraConfig.get() if cfg is not None and HydraConfig.initialized() else None
    if hydra_cfg is not None and hydra_cfg.runtime.output_dir in _wanted:
        _pending = _Pending(
            Path(hydra_cfg.runtime.output_dir),
            {
                "config.yaml": OmegaConf.to_yaml(cfg),
                "hydra.yaml": OmegaConf.to_yaml(HydraConfig.instance().cfg),
                "overrides.yaml": OmegaConf.to_yaml(hydra_cfg.overrides.task),
            },
        )
    if _pending is not None and hydra_cfg.mode == RunMode.MULTIRUN:
        accept()
    try:
        yield
    except BaseException:
        _withdraw()
        raise
    accept()


def accept(replacing: bool = False) -> None:
    """Write the accepted command's record into its run dir, once. ``replacing``: the run
    replaced another in its dir (``trainer.overwrite``), whose record is set aside in
    ``.hydra/runs/<time>_replaced/``."""
    global _pending, _before
    pending, _pending, _before = _pending, None, None
    if pending is None:
        return
    record, aside = pending.run_dir / ".hydra", f"{stamp()}_replaced"
    for name in pending.files if replacing else ():
        if (record / name).exists():
            io.move(record / name, record / "runs" / aside / name)
    # .hydra/runs/<time> once a run's record is there: a resume keeps the one it trained with.
    place = record / "runs" / stamp() if (record / "config.yaml").exists() else record
    for name, text in pending.files.items():
        io.write(place / name, text, "hydra record")


def _withdraw() -> None:
    """Drop the record of a command stopped before it was accepted, the empty files it added
    to a single run's dir (Hydra's log), and the folders Hydra made for it if empty."""
    global _pending, _before
    pending, before, _pending, _before = _pending, _before, None, None
    if pending is None or before is None or before.path != pending.run_dir:
        return
    with contextlib.suppress(OSError):
        for path in before.path.iterdir():
            if path.name not in before.names and path.is_file() and not path.stat().st_size:
                path.unlink()
        for folder in before.made:
            folder.rmdir()  # stops at the first that holds something
