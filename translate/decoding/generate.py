"""The one way the package decodes a batch with our model: the search ``decode.strategy`` names
in :data:`STRATEGIES` (a new one: a function, an entry, a ``conf/decode/`` file)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from translate.data.batching import Batch
from translate.data.tokenizer import Tokenizer
from translate.decoding.search import beam_search, greedy_search
from translate.schema import DecodeSettings

SPECIAL_IDS = {"bos_id": Tokenizer.BOS, "eos_id": Tokenizer.EOS, "pad_id": Tokenizer.PAD}


@functools.cache  # generate runs for every batch
def _parameters(search: Callable) -> frozenset[str]:
    return frozenset(inspect.signature(search).parameters)


def taken_by(search: Callable, settings: DecodeSettings) -> dict[str, Any]:
    """The decode settings ``search`` has a parameter for (test_search.py: each reaches one)."""
    params = _parameters(search)
    return {f.name: getattr(settings, f.name) for f in fields(settings) if f.name in params}


def _run(search: Callable, model, batch: Batch, settings: DecodeSettings) -> list[list[int]]:
    taken = taken_by(search, settings)
    return search(model, batch.src, batch.src_padding_mask, **taken, **SPECIAL_IDS)


def _greedy(model, batch: Batch, settings: DecodeSettings) -> list[list[int]]:
    return _run(greedy_search, model, batch, settings)


def _beam(model, batch: Batch, settings: DecodeSettings) -> list[list[int]]:
    if settings.beam_size == 1:  # the same output (tested) without the beams' bookkeeping
        return _greedy(model, batch, settings)
    return _run(beam_search, model, batch, settings)


# decode.strategy -> the search that runs it: hypothesis ids per row of the batch, in order.
STRATEGIES: dict[str, Callable[[Any, Batch, DecodeSettings], list[list[int]]]] = {
    "beam": _beam,
    "greedy": _greedy,
}


def generate(model, batch: Batch, settings: DecodeSettings) -> list[list[int]]:
    return STRATEGIES[settings.strategy](model, batch, settings)
