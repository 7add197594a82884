"""What every settings group shares: :func:`doc`, which gives a field its help, and the range
checks that make a bad value one readable line."""

from __future__ import annotations

from dataclasses import field
from typing import Any

from translate.errors import UserError


def doc(what: str, unit: str = "", values: str = "", key: bool = True, **kwargs: Any) -> Any:
    """A settings field that says what it means, its unit and its range of values (``python -m
    translate.train --help`` lists them; a group of settings has no unit or range). ``key``:
    False for a field the command fills in, which is no config key. ``kwargs`` go to
    :func:`dataclasses.field`: a default only where an older checkpoint's config lacks the key,
    since defaults live in ``conf/``."""
    metadata = {"help": what, "unit": unit, "range": values, "key": key}
    return field(metadata=metadata, **kwargs)


def positive(name: str, value, allow_none: bool = False, allow_zero: bool = False) -> None:
    if value is None and allow_none:
        return
    if value is None or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise UserError(f"{name}={value} must be {bound}")


def fraction(name: str, value: float) -> None:
    if not 0.0 <= value < 1.0:
        raise UserError(f"{name}={value} must be in [0, 1)")


def choice(name: str, value: str, choices) -> None:
    if value not in choices:
        raise UserError(f"{name}={value} is unknown; choose one of {', '.join(choices)}")
