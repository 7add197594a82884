"""The fields of a JSON file a command reads back (an export's manifest), each checked so that
a hand-edited or damaged file is refused in one line naming the field (``tokenizer.vocab_size``;
one inside an absent object is not looked at: the object's own field says if it must be there).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass

Check = Callable[[object], bool]


@dataclass(frozen=True)
class Field:
    check: Check
    what: str  # what the value must be, in words: "a whole number >= 0"
    required: bool = False


def whole(low: float = -math.inf, high: float = math.inf) -> Check:
    """A whole number (never a boolean) in ``[low, high]``."""
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


def of_type(kind: type) -> Check:
    return lambda v: isinstance(v, kind)


def number(v) -> bool:
    """An int or a float, never a boolean."""
    return isinstance(v, int | float) and not isinstance(v, bool)


def or_null(check: Check) -> Check:
    return lambda v: v is None or check(v)


def field_problem(data: dict, fields: dict[str, Field]) -> str | None:
    """The first failing field of ``fields`` in words (``field 'step' is "abc", not a whole
    number >= 0``); None when all pass."""
    for name, field in fields.items():
        parent, _, key = name.rpartition(".")
        holder = data
        for part in parent.split(".") if parent else ():
            holder = holder.get(part) if isinstance(holder, dict) else None
        if not isinstance(holder, dict):
            continue
        if key not in holder:
            if field.required:
                return f"no field {name!r}"
            continue
        value = holder[key]
        if not field.check(value):
            return f"field {name!r} is {json.dumps(value)}, not {field.what}"
    return None
