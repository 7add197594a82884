"""What ``python -m translate.<command> --help`` lists: every key the command reads, its value
in the composed config (a lookup: this module never reads OmegaConf), meaning, unit and range,
all from the settings dataclasses' :func:`~translate.nn.config.doc` fields: it cannot drift.
"""

from __future__ import annotations

import dataclasses
import json
import textwrap
import typing
from collections.abc import Callable, Iterator
from typing import Any

# A dotted key -> (its value, the interpolation it is written as, or ""); None: not in the config.
Lookup = Callable[[str], "tuple[Any, str] | None"]


def settings_help(cls, value_of: Lookup, prefix: str = "") -> list[str]:
    """Every config key of ``cls``: ``key=value`` as ``value_of`` gives it (else the field's
    default), meaning, unit and range; a base class's keys and groups first, then its own."""
    bases = [base for base in cls.__bases__ if dataclasses.is_dataclass(base)]
    inherited = {field.name for base in bases for field in dataclasses.fields(base)}
    lines = [line for base in bases for line in settings_help(base, value_of, prefix)]
    hints, keys, groups = typing.get_type_hints(cls), [], []
    for field in (f for f in dataclasses.fields(cls) if f.name not in inherited):
        meta, key = field.metadata, f"{prefix}{field.name}"
        if not meta["key"]:
            continue
        group = group_type(hints[field.name])
        if group is not None:
            groups += ["", f"{key}: {meta['help']}", *settings_help(group, value_of, f"{key}.")]
            continue
        default = None if field.default is dataclasses.MISSING else field.default
        value, origin = value_of(key) or (default, "")
        keys += [
            f"{key}={_shown(value)}" + (f"  (from {origin})" if origin else ""),
            *textwrap.wrap(meta["help"], 96, initial_indent="    ", subsequent_indent="    "),
            f"    unit: {meta['unit']}; range: {meta['range']}",
        ]
    return lines + keys + groups


def leaf_fields(cls, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field]]:
    """``(dotted key, field)`` of each field of ``cls`` that holds a value, its groups walked."""
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        group = group_type(hints[field.name])
        if group is None:
            yield prefix + field.name, field
        else:
            yield from leaf_fields(group, f"{prefix}{field.name}.")


def group_type(hint: Any):
    """The settings dataclass a field of type ``hint`` holds (also when optional), or None."""
    args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    return args[0] if len(args) == 1 and dataclasses.is_dataclass(args[0]) else None


def _shown(value: Any) -> str:
    if isinstance(value, (list, dict)) or value is None or isinstance(value, bool):
        return json.dumps(value)
    return str(value)
