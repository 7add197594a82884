"""The fields of a JSON file a command reads back (an export's manifest), each checked against
what the command that wrote it writes there, so that a hand-edited or damaged file is refused
in one line naming the field.

A field is named by its dotted path (``tokenizer.vocab_size``); one inside an object that is
absent is not looked at (the object's own field says whether it must be there).
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


def field_problem(data: dict, fields: dict[str, Field]) -> str | None:
    """What is wrong with ``data`` for the first field of ``fields`` that fails, in words that
    name it (``field 'step' is "abc", not a whole number >= 0``); None when all pass."""
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
