"""User-facing errors: one readable line, a non-zero exit, no traceback.

Code raises :class:`UserError` for anything the user can fix (config, data, checkpoints,
network). The command-line entry points catch it through :func:`exit_on_user_error`; set
``HYDRA_FULL_ERROR=1`` or ``TRANSLATE_DEBUG=1`` to see the traceback instead.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

EXIT_USER_ERROR = 2


class UserError(Exception):
    """A problem with the user's input, with a message that says what to do."""


def debug_enabled() -> bool:
    return any(
        os.environ.get(v, "") not in ("", "0") for v in ("HYDRA_FULL_ERROR", "TRANSLATE_DEBUG")
    )


def _in_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


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
            if _in_multirun():
                logging.getLogger(fn.__module__).error("error: %s", err)
                raise
            print(f"error: {err}", file=sys.stderr)
            sys.exit(EXIT_USER_ERROR)

    return wrapper
