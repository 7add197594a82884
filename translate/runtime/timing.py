"""Timing: one call's wall time with the device waited for, and the rotated order
the benchmarks time their variants in."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import torch

from translate.runtime.device import synchronize

T = TypeVar("T")


def timed(fn: Callable[[], T], device: torch.device) -> tuple[T, float]:
    """``(fn(), wall seconds)``; on CUDA the queued work is finished before and after, since
    kernels run asynchronously and the clock would otherwise stop before they do."""
    synchronize(device)
    start = time.perf_counter()
    out = fn()
    synchronize(device)
    return out, time.perf_counter() - start


def rotated(items: list[T], r: int) -> list[T]:
    """Round ``r``'s order when timing ``items`` in turns: A B C, then B C A, then C A B, ...
    Each takes every place in turn, so drift on a shared machine falls on all of them alike."""
    shift = r % len(items)
    return items[shift:] + items[:shift]
