"""User-facing errors: one readable line, a non-zero exit, no traceback.

Code raises :class:`UserError` for anything the user can fix (config, data, checkpoints,
network). The command-line entry points catch it through
:func:`translate.cli.exit_on_user_error`; set ``HYDRA_FULL_ERROR=1`` or ``TRANSLATE_DEBUG=1``
to see the traceback instead.
"""

from __future__ import annotations

import os

EXIT_USER_ERROR = 2


class UserError(Exception):
    """A problem with the user's input, with a message that says what to do."""


def debug_enabled() -> bool:
    return any(
        os.environ.get(v, "") not in ("", "0") for v in ("HYDRA_FULL_ERROR", "TRANSLATE_DEBUG")
    )
