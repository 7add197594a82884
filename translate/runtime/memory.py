"""Memory: glibc's malloc kept from returning freed memory (``keep_freed_memory``), and the
peak memory a measurement reports (the device's allocator, the process's resident set)."""

from __future__ import annotations

import contextlib
import ctypes
import resource
import sys
from pathlib import Path

import torch

# glibc's mallopt() parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4


_INT_MAX = 2**31 - 1


_keeping_freed_memory = False


def keep_freed_memory() -> bool:
    """Have glibc's malloc keep freed memory in the process for reuse (``keep_freed_memory``
    in conf/): no allocation is served by its own ``mmap``, and the heap is not trimmed.

    By default glibc maps each allocation of more than 32 MiB (and adaptively smaller ones)
    afresh and unmaps it when it is freed, so a tensor of that size made at every step (a
    beam step's logits, a training step's activations) faults in every page each time. Kept
    memory is reused instead: beam search over a test set 15% faster, CPU training 10%
    (docs/benchmarks.md), what preloading jemalloc or tcmalloc does for PyTorch on CPUs. The
    price: the process holds its peak memory until it exits. Applies to the whole process;
    returns whether it did, False where the C library is not glibc (macOS, musl).
    """
    global _keeping_freed_memory
    if not _keeping_freed_memory:
        try:
            mallopt = ctypes.CDLL("libc.so.6").mallopt
        except (OSError, AttributeError):
            return False
        mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        _keeping_freed_memory = bool(
            mallopt(_M_MMAP_MAX, 0) and mallopt(_M_TRIM_THRESHOLD, _INT_MAX)
        )
    return _keeping_freed_memory


def keeps_freed_memory() -> bool:
    """Whether :func:`keep_freed_memory` has taken effect in this process."""
    return _keeping_freed_memory


_PROC_CLEAR_REFS = Path("/proc/self/clear_refs")


def reset_peak_memory(device: torch.device) -> None:
    """Start a new peak-memory window (CUDA allocator stats, or Linux's peak RSS).

    The CPU reset matters for sequential Hydra multiruns, whose jobs share one process: writing
    5 to ``/proc/self/clear_refs`` resets ``VmHWM``, so each job reports its own peak.
    """
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    with contextlib.suppress(OSError):
        _PROC_CLEAR_REFS.write_text("5")


def peak_memory_mb(device: torch.device) -> float:
    """Peak CUDA memory allocated, or the process's peak resident set size on the CPU
    (since the last :func:`reset_peak_memory` where Linux allows it)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    peak = peak_rss_mb("self")
    if peak is not None:
        return peak
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return rss / (2**20 if sys.platform == "darwin" else 2**10)


def peak_rss_mb(pid: int | str) -> float | None:
    """Linux's peak resident set size (``VmHWM``) of process ``pid`` (or ``"self"``) in MiB;
    None where ``/proc`` cannot tell (another system, a process gone)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**10  # kB -> MiB
    return None
