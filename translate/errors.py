"""User-facing errors: one readable line, a non-zero exit, no traceback.

Code raises :class:`UserError` for anything the user can fix (config, data, checkpoints,
network). The command-line entry points catch it through
:func:`translate.cli.exit_on_user_error`; set ``HYDRA_FULL_ERROR=1`` or ``TRANSLATE_DEBUG=1``
to see the traceback instead.

A command printed for the user to paste (a resume, an export's ``translate with:``, a re-export)
quotes each path with :func:`override_word`: the shell and then Hydra read back the very path.
A count in a message is :func:`counted` ("1 line", "2 lines").
"""

from __future__ import annotations

import os
import re
import shlex

EXIT_USER_ERROR = 2


class UserError(Exception):
    """A problem with the user's input, with a message that says what to do."""


def debug_enabled() -> bool:
    return any(
        os.environ.get(v, "") not in ("", "0") for v in ("HYDRA_FULL_ERROR", "TRANSLATE_DEBUG")
    )


def hydra_quoted(text: str) -> str:
    """``text`` as a Hydra override value that reads back as exactly ``text``, whatever it
    holds (job dirs of sweeps hold '=' and ','; a user's folder may hold quotes, spaces,
    backslashes or ``${``): single-quoted, with quotes, the backslashes before them or at the
    end, and interpolations escaped."""
    text = re.sub(r"(\\*)'", lambda m: m[1] * 2 + "\\'", text)
    text = re.sub(r"(\\+)$", lambda m: m[1] * 2, text)
    return "'" + text.replace("${", "\\${") + "'"


def override_word(key: str, value: str) -> str:
    """``key=value`` as one shell word that Hydra reads back as exactly ``value``: quoted for
    Hydra, then for the shell."""
    return shlex.quote(f"{key}={hydra_quoted(value)}")


def counted(n: int | None, noun: str) -> str:
    """``1 thread``, ``2 threads``, ``2 processes``, in messages and logs; ``? threads`` for a
    count that was not recorded."""
    plural = noun + ("es" if noun.endswith("s") else "s")
    return f"1 {noun}" if n == 1 else f"{'?' if n is None else n} {plural}"
