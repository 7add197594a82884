"""What the ``python -m`` entry points share: the user-error exit and Hydra's run facts.

Entry-point layer: like ``train.py`` and ``settings.py`` it may import Hydra; the library
packages below it never do.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import OmegaConf

from translate.errors import EXIT_USER_ERROR, UserError, debug_enabled

T = TypeVar("T")


def record_dir(output_dir: str) -> str:
    """Where Hydra records this command's config in its run dir (``hydra.output_subdir``):
    ``.hydra`` the first time, ``.hydra/runs/<time>`` once a run's record is there, so a
    resume (or a refused second run) never overwrites the config the run was trained with."""
    if (Path(output_dir) / ".hydra" / "config.yaml").exists():
        return f".hydra/runs/{dt.datetime.now():%Y-%m-%d_%H-%M-%S_%f}"
    return ".hydra"


# Registered on import: every entry point imports this module before Hydra composes.
OmegaConf.register_new_resolver("translate_record_dir", record_dir, use_cache=True, replace=True)


def in_multirun() -> bool:
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def sweep_job() -> str | None:
    """A multirun job's name, its overrides as its dir is named (``heads=4,seed=2``); None
    outside a multirun."""
    if not in_multirun():
        return None
    job = HydraConfig.get().job
    return job.override_dirname or f"job {job.num}"


def task_overrides(drop_prefix: str = "trainer.resume") -> list[str]:
    """The command line's overrides (for the resume hint), without ``drop_prefix`` ones."""
    if not HydraConfig.initialized():
        return []
    return [o for o in HydraConfig.get().overrides.task if not o.startswith(drop_prefix)]


def exit_on_user_error(fn: Callable[..., T]) -> Callable[..., T]:
    """Wrap a command's body: a :class:`UserError` prints ``error: <message>`` and exits 2.

    In a Hydra multirun the error is logged and re-raised instead, so Hydra marks only that
    job as failed and the sweep's other jobs still run.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UserError as err:
            if debug_enabled():
                raise
            if in_multirun():
                logging.getLogger(fn.__module__).error("error: %s", err)
                raise
            print(f"error: {err}", file=sys.stderr)
            sys.exit(EXIT_USER_ERROR)

    return wrapper
