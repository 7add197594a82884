"""Device, precision, seeds, RNG state, eval mode, timing and peak memory: the run-time
environment a job needs, and the description of the machine it ran on."""

from __future__ import annotations

import contextlib
import ctypes
import datetime as dt
import os
import platform
import random
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch

from translate.errors import UserError

T = TypeVar("T")

PRECISIONS = ("auto", "bf16", "fp16", "32")
_AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def resolve_device(name: str, key: str = "trainer.device") -> torch.device:
    """``auto`` -> CUDA when available, else CPU; an unavailable GPU is a user error.
    ``key`` is the setting's name in the command's messages."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise UserError(f"{key}={name!r} is not a device; use auto, cpu, cuda or cuda:N") from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"{key}={name} but no CUDA GPU is visible; use {key}=cpu")
    return device


def check_precision(name: str, key: str = "trainer.precision") -> str:
    """``name`` as one of :data:`PRECISIONS` (a config may give ``32`` as a number); anything
    else is a UserError naming ``key`` and the choices."""
    name = str(name)
    if name not in PRECISIONS:
        raise UserError(f"{key}={name} is unknown; choose one of {', '.join(PRECISIONS)}")
    return name


def resolve_precision(name: str, device: torch.device, key: str = "trainer.precision") -> str:
    """``auto`` -> ``bf16`` on a GPU that supports it, else ``32``. fp16 needs a GPU.
    ``key`` is the setting's name in the command's messages."""
    name = check_precision(name, key)
    if name == "auto":
        cuda_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
        return "bf16" if cuda_bf16 else "32"
    if name == "fp16" and device.type != "cuda":
        raise UserError(
            f"{key}=fp16 needs a CUDA GPU (fp16 autocast with loss scaling); "
            f"use {key}=bf16 or 32 on the CPU"
        )
    return name


def autocast(device: torch.device, precision: str):
    """``torch.amp`` autocast for bf16/fp16, a no-op context for full precision."""
    if precision == "32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=_AMP_DTYPES[precision])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict:
    """Every generator's state as tensors and plain values, so that a checkpoint holding it
    loads with ``torch.load(weights_only=True)`` (numpy's key array becomes a tensor)."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": (name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    name, keys, pos, has_gauss, cached = state["numpy"]
    keys = np.asarray(keys.numpy() if isinstance(keys, torch.Tensor) else keys, dtype=np.uint32)
    np.random.set_state((name, keys, int(pos), int(has_gauss), float(cached)))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@contextlib.contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """``model`` in eval mode for the block, then back in the mode it was in.

    A model already in eval mode (its top module's flag) is left alone: switching walks every
    submodule, twice per call, which costs a batch-1 decode more than a step (docs/benchmarks.md).
    """
    if not model.training:
        yield model
        return
    model.eval()
    try:
        yield model
    finally:
        model.train()


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


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA kernels run asynchronously); no-op on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], T], device: torch.device) -> tuple[T, float]:
    """``(fn(), wall seconds)``: :func:`timed_cpu` without the CPU time."""
    out, wall, _ = timed_cpu(fn, device)
    return out, wall


def timed_cpu(fn: Callable[[], T], device: torch.device) -> tuple[T, float, float]:
    """``(fn(), wall seconds, CPU seconds)``; on CUDA the queued work is finished before and
    after, since kernels run asynchronously and the clock would otherwise stop before they do.
    CPU seconds are the process's (``time.process_time``: every thread, user + system), which
    other jobs on a shared host barely move; with N busy threads they approach N x wall."""
    synchronize(device)
    cpu, start = time.process_time(), time.perf_counter()
    out = fn()
    synchronize(device)
    wall = time.perf_counter() - start
    return out, wall, time.process_time() - cpu


def rotated(items: list[T], r: int) -> list[T]:
    """Round ``r``'s order when timing ``items`` in turns: A B C, then B C A, then C A B, ...
    Each takes every place in turn, so drift on a shared machine falls on all of them alike."""
    shift = r % len(items)
    return items[shift:] + items[:shift]


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


def device_name(device: torch.device, cpu: str = "cpu") -> str:
    """The GPU's name (``NVIDIA H200``), or ``cpu``: what the caller calls the CPU."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu


def cpu_model() -> str:
    """The processor's model name (``/proc/cpuinfo``), else what ``platform`` knows of it."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


_CHECKOUT = Path(__file__).resolve().parents[1]  # the git checkout, in an editable install


def git_commit() -> str | None:
    """The short commit of the checkout the package runs from; None outside a git checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=_CHECKOUT,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def machine(device: torch.device) -> dict:
    """Where a measurement ran, for the files that report one: the date, the device and its
    name, the software, the threads torch uses, whether freed memory is kept for reuse
    (:func:`keep_freed_memory`) and the commit."""
    return {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "device": str(device),
        "device_name": device_name(device, f"{cpu_model()} ({os.cpu_count()} logical CPUs)"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "keeps_freed_memory": _keeping_freed_memory,
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "git_commit": git_commit(),
    }
