"""What every settings group shares: :func:`doc`, which gives a field its help, and the range
checks that make a bad value one readable line."""

from __future__ import annotations

from translate.errors import UserError

# doc lives with the model's config, which declares its fields with it and, in translate.nn,
# imports nothing above it; every settings group imports it from here.
from translate.nn.config import doc as doc


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
