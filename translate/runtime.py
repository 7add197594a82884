"""Device, precision, seeds, RNG state, eval mode, timing and peak memory: the run-time
environment a job needs, and the description of the machine it ran on."""

from __future__ import annotations

import contextlib
import ctypes
import datetime as dt
import functools
import importlib.metadata
import os
import platform
import random
import re
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


def use_deterministic_algorithms(on: bool) -> None:
    """``trainer.deterministic``: torch's deterministic kernels where an operation has both
    (``torch.use_deterministic_algorithms``), else torch's default. Set either way: the flag is
    global, and the jobs of a multirun share one process."""
    if on:
        # cuBLAS is deterministic only with a fixed workspace, read when it starts (a GPU's
        # first GEMM, after this).
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(on)


def refuse_nondeterministic(err: RuntimeError, key: str = "trainer.deterministic") -> None:
    """Raise a one-line UserError naming ``key`` for torch's error about an operation that has
    no deterministic kernel (under :func:`use_deterministic_algorithms`); return for others."""
    message = str(err)
    if not (torch.are_deterministic_algorithms_enabled() and "deterministic" in message):
        return
    what = message.split(", but you set", 1)[0].splitlines()[0]
    raise UserError(f"{key}=true, but {what}; set {key}=false to run it") from err


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


_PACKAGE_DIR = Path(__file__).resolve().parent


def _git(folder: Path, *args: str) -> str | None:
    """``git args`` run in ``folder`` (never the cwd: a command may run from anywhere); its
    output, or None where git fails or is absent."""
    try:
        out = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


@functools.cache
def git_state(folder: Path = _PACKAGE_DIR) -> tuple[str | None, bool | None]:
    """``(commit, dirty)`` of the code in ``folder`` (default: this package's own folder, the
    code that runs): the full commit, and whether tracked files differ from it (untracked
    files do not count, as in ``git describe --dirty``).

    ``(None, None)`` unless git tracks this very file there: an installed copy has no checkout,
    even when its site-packages lies inside one (a virtual environment in a repository).
    Read once per process: it runs the modules it imported at its start, whatever the checkout
    does later (the jobs of a multirun share one process).
    """
    if _git(folder, "ls-files", "--error-unmatch", "--", Path(__file__).name) is None:
        return None, None
    commit = _git(folder, "rev-parse", "HEAD")
    status = _git(folder, "status", "--porcelain", "--untracked-files=no")
    return commit, (None if status is None else status != "")


def package_version() -> str | None:
    """This package's installed version (its metadata, also in an editable install)."""
    try:
        return importlib.metadata.version("translate")
    except importlib.metadata.PackageNotFoundError:
        return None


def code_version() -> str:
    """The code that runs, in words: ``translate 0.1.0, commit 1a2b3c4d5 with uncommitted
    changes`` (or ``..., no git checkout`` for an installed copy)."""
    commit, dirty = git_state()
    where = "no git checkout" if commit is None else f"commit {commit[:9]}"
    return f"translate {package_version()}, {where}" + (" with uncommitted changes" * bool(dirty))


# torch.__config__.show()'s lines naming the libraries that compute a CPU result.
_MATH_LIBRARIES = re.compile(r"Math Kernel Library|MKL-DNN|oneDNN|OpenBLAS|OpenMP|LAPACK")


def torch_build() -> dict:
    """The CPU kernels torch runs: the instruction set it dispatches to (``AVX2``,
    ``AVX512``, ...), its BLAS, and the math libraries it was built with (MKL, oneDNN,
    OpenMP): other kernels sum in another order, so they give other last bits."""
    shown = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=([^,\s]+)", shown)
    return {
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "blas": blas[1] if blas else None,
        "math_libraries": [  # not the build settings' line, which names them all
            line.strip(" -")
            for line in shown.splitlines()
            if _MATH_LIBRARIES.search(line) and "Build settings" not in line
        ],
    }


def provenance(device: torch.device) -> dict:
    """What produced a result, recorded beside it (``results.json``, ``scores.json``, the
    benchmarks' and speed files' ``machine``): the code (commit, uncommitted changes, package
    version), torch and its CPU kernels, the CPU, the threads, the device and the command line.
    Floating-point results depend on all of them: the same run on another CPU family or
    thread count trains other weights (README, "Reproducibility")."""
    commit, dirty = git_state()
    cpu = cpu_model()
    return {
        "git_commit": commit,
        "git_dirty": dirty,
        "package_version": package_version(),
        "torch": torch.__version__,
        **torch_build(),
        "cpu_model": cpu,
        "threads": torch.get_num_threads(),
        "device": str(device),
        "device_name": device_name(device, f"{cpu} ({os.cpu_count()} logical CPUs)"),
        "argv": list(sys.argv),
    }


def machine(device: torch.device) -> dict:
    """Where a measurement ran, for the files that report one: the date, :func:`provenance`,
    the Python and platform, and whether freed memory is kept for reuse
    (:func:`keep_freed_memory`)."""
    return {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        **provenance(device),
        "python": platform.python_version(),
        "keeps_freed_memory": _keeping_freed_memory,
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
    }
