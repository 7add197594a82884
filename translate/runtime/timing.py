"""Timing: one call's wall time, and the rotated order benchmarks time variants in."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import torch

from translate.runtime.device import synchronize

T = TypeVar("T")


def timed(fn: Callable[[], T], device: torch.device) -> tuple[T, float]:
    """``(fn(), wall seconds)``, the device's queued work finished before and after."""
    synchronize(device)
    start = time.perf_counter()
    out = fn()
    synchronize(device)
    return out, time.perf_counter() - start


def rotated(items: list[T], r: int) -> list[T]:
    """Round ``r``'s order (A B C, B C A, ...): drift on a shared machine falls on all alike."""
    shift = r % len(items)
    return items[shift:] + items[:shift]
