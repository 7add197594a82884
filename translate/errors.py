"""User-facing errors: one readable line, a non-zero exit, no traceback.

Code raises :class:`UserError` for anything the user can fix; the entry points catch it
(:func:`translate.cli.exit_on_user_error`), or show the traceback under ``HYDRA_FULL_ERROR=1``
or ``TRANSLATE_DEBUG=1``. Ctrl-C ends a command with one line and exit 130.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import sys
from collections.abc import Iterator
from typing import NoReturn

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 128 + signal.SIGINT


class UserError(Exception):
    """A problem with the user's input, with a message that says what to do."""


def choice(name: str, value: str, choices) -> None:
    if value not in choices:
        raise UserError(f"{name}={value} is unknown; choose one of {', '.join(choices)}")


def debug_enabled() -> bool:
    return any(
        os.environ.get(v, "") not in ("", "0") for v in ("HYDRA_FULL_ERROR", "TRANSLATE_DEBUG")
    )


def _interrupted(*_) -> NoReturn:
    argv = sys.orig_argv  # python [options] -m translate.<command> ...
    command = f"python -m {argv[argv.index('-m') + 1]}" if "-m" in argv[:-1] else "the command"
    print(
        f"error: interrupted by SIGINT: {command} stopped before it finished; no file was left "
        "half-written",
        file=sys.stderr,
    )
    raise SystemExit(EXIT_INTERRUPTED)


def stop_in_one_line_while_starting() -> None:
    """Ctrl-C while a command loads (``import torch`` takes seconds): one line and exit 130, not
    the traceback of whichever import it hit. Nothing is written before the command starts,
    which then takes Ctrl-C back (:func:`interrupt_in_one_line`)."""
    # Not when SIGINT is ignored: a shell starts a background job so, and so it stays.
    if debug_enabled() or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return
    signal.signal(signal.SIGINT, _interrupted)


@contextlib.contextmanager
def interrupt_in_one_line() -> Iterator[None]:
    """Ctrl-C in the block (where no handler of the command's waits for a step boundary) stops
    it with one line and exit 130; :mod:`translate.io` leaves no file half-written. Call it in
    the main thread, as a command's entry."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # from the start's handler
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    except KeyboardInterrupt:
        if debug_enabled():
            raise
        _interrupted()


def hydra_quoted(text: str) -> str:
    """``text`` as a Hydra override value that reads back as exactly ``text`` (sweep job dirs
    hold '=' and ','; a folder may hold quotes, backslashes or ``${``): single-quoted, with
    quotes, the backslashes before them or at the end, and interpolations escaped."""
    text = re.sub(r"(\\*)'", lambda m: m[1] * 2 + "\\'", text)
    text = re.sub(r"(\\+)$", lambda m: m[1] * 2, text)
    return "'" + text.replace("${", "\\${") + "'"


def override_word(key: str, value: str) -> str:
    """``key=value`` as one shell word (to paste) that Hydra reads back as exactly ``value``,
    quoted only where Hydra or the shell needs it."""
    plain = _PLAIN.fullmatch(value) and not _reads_as_a_scalar(value)
    word = f"{key}={value if plain else hydra_quoted(value)}"
    if shlex.quote(word) != word and not re.search(r"[\"$`\\!]", word):
        return f'"{word}"'  # "model_dir='my model'" reads better than shlex's '"'"'
    return shlex.quote(word)


# Characters Hydra reads unquoted as part of a string (no spaces, quotes, '=', ',', '$', brackets).
_PLAIN = re.compile(r"[\w./-]+", re.ASCII)


def _reads_as_a_scalar(value: str) -> bool:
    """Whether Hydra would read ``value`` unquoted as a number, a boolean or null."""
    try:
        float(value)
    except ValueError:
        return value.lower() in ("true", "false", "null")
    return True


def plain_text(doc: str) -> str:
    """A docstring as ``--help`` prints it: reST literals and roles (:mod:`x`) as plain words."""
    return re.sub(r":\w+:`~?([^`]*)`", r"\1", doc).replace("``", "")


def counted(n: int | None, noun: str) -> str:
    """``1 thread``, ``2 threads``, ``2 processes``; ``? threads`` for a count not recorded."""
    plural = noun + ("es" if noun.endswith("s") else "s")
    return f"1 {noun}" if n == 1 else f"{'?' if n is None else n} {plural}"
