"""What ``python -m translate.<command> --help`` lists: every key the command reads, with its
value in the composed config, what it means, its unit and its range, all read from the settings
dataclasses' :func:`~translate.nn.config.doc` fields (so the list cannot drift from the code).
The composed config reaches :func:`settings_help` as a lookup (``translate.settings`` reads
OmegaConf; this module never does).
"""

from __future__ import annotations

import dataclasses
import json
import textwrap
import typing
from collections.abc import Callable
from typing import Any

# A dotted key -> (its value, the interpolation it is written as, or ""); None: not in the config.
Lookup = Callable[[str], "tuple[Any, str] | None"]


def settings_help(cls, value_of: Lookup, prefix: str = "") -> list[str]:
    """Every config key of ``cls`` (a settings dataclass): ``key=value`` as ``value_of`` gives
    it (the field's default where the config lacks it), what it means, its unit and its range;
    a base class's keys and groups first, then the class's own (``EvaluateCommand``: the
    engine's, then evaluate's)."""
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


def group_type(hint: Any):
    """The settings dataclass a field of type ``hint`` holds (also when optional), or None."""
    args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    return args[0] if len(args) == 1 and dataclasses.is_dataclass(args[0]) else None


def _shown(value: Any) -> str:
    """A value as a command-line override writes it."""
    if isinstance(value, (list, dict)) or value is None or isinstance(value, bool):
        return json.dumps(value)
    return str(value)
