"""The one way the package decodes a batch with our model: :func:`generate` runs the search that
``decode.strategy`` names in :data:`STRATEGIES`.

A new decoding strategy is a function here (its search in :mod:`translate.decoding.search`),
one :data:`STRATEGIES` entry and one ``conf/decode/<name>.yaml`` (docs/extending.md).
"""

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

# The special ids of every model we train (our tokenizer's), as the searches take them.
SPECIAL_IDS = {"bos_id": Tokenizer.BOS, "eos_id": Tokenizer.EOS, "pad_id": Tokenizer.PAD}


@functools.cache
def _parameters(search: Callable) -> frozenset[str]:
    """``search``'s parameter names, read once: generate runs for every batch."""
    return frozenset(inspect.signature(search).parameters)


def taken_by(search: Callable, settings: DecodeSettings) -> dict[str, Any]:
    """The decode settings ``search`` has a parameter for, by name (``max_len_a``, ...): a new
    setting that a search takes reaches it with no change here, and one that no search takes
    is caught by a test (tests/decoding/test_search.py)."""
    params = _parameters(search)
    return {f.name: getattr(settings, f.name) for f in fields(settings) if f.name in params}


def _greedy(model, batch: Batch, settings: DecodeSettings) -> list[list[int]]:
    return greedy_search(
        model,
        batch.src,
        batch.src_padding_mask,
        **taken_by(greedy_search, settings),
        **SPECIAL_IDS,
    )


def _beam(model, batch: Batch, settings: DecodeSettings) -> list[list[int]]:
    if settings.beam_size == 1:  # the same output (tested) without the beams' bookkeeping
        return _greedy(model, batch, settings)
    return beam_search(
        model,
        batch.src,
        batch.src_padding_mask,
        **taken_by(beam_search, settings),
        **SPECIAL_IDS,
    )


# decode.strategy -> the search that runs it: hypothesis ids per row of the batch, in order.
# A new strategy is one function here, one entry, and a conf/decode/<name>.yaml.
STRATEGIES: dict[str, Callable[[Any, Batch, DecodeSettings], list[list[int]]]] = {
    "beam": _beam,
    "greedy": _greedy,
}


def generate(model, batch: Batch, settings: DecodeSettings) -> list[list[int]]:
    """Hypothesis ids (no BOS/EOS) for each row of ``batch``, by ``settings.strategy``."""
    return STRATEGIES[settings.strategy](model, batch, settings)
