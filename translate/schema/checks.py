"""What every settings group shares: :func:`doc`, which gives a field its help and its range
check (``positive``, ``non_negative``, ``fraction``), and :func:`choice` for ``validate()``."""

from __future__ import annotations

from translate.errors import UserError

# They live with the model's config, which declares its fields with them and, in translate.nn,
# imports nothing above it; every settings group imports them from here.
from translate.nn.config import Check as Check
from translate.nn.config import doc as doc
from translate.nn.config import fraction as fraction
from translate.nn.config import non_negative as non_negative
from translate.nn.config import positive as positive


def choice(name: str, value: str, choices) -> None:
    if value not in choices:
        raise UserError(f"{name}={value} is unknown; choose one of {', '.join(choices)}")
