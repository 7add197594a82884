"""What the settings groups' ``validate()`` share: :func:`choice`. A field's own range is
declared with it (:func:`translate.nn.config.doc`, ``check=positive``)."""

from __future__ import annotations

from translate.errors import UserError


def choice(name: str, value: str, choices) -> None:
    if value not in choices:
        raise UserError(f"{name}={value} is unknown; choose one of {', '.join(choices)}")
