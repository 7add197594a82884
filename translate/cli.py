"""What the ``python -m`` entry points share: the user-error exit and Hydra's run facts.

Entry-point layer: like ``train.py`` and ``settings.py`` it may import Hydra; the library
packages below it never do.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from typing import TypeVar

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from translate.errors import EXIT_USER_ERROR, UserError, debug_enabled

T = TypeVar("T")


def in_multirun() -> bool:
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


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
