"""What produced a result: code, torch and its CPU kernels, CPU, command line."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import importlib.metadata
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import torch

from translate.runtime.device import cpu_bf16_units, device_name
from translate.runtime.memory import keeps_freed_memory


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


_PACKAGE_DIR = Path(__file__).resolve().parents[1]  # translate/
# This file, as git names it from the package folder: runtime/provenance.py.
_THIS_FILE = Path(__file__).resolve().relative_to(_PACKAGE_DIR).as_posix()


def _git(folder: Path, *args: str) -> str | None:
    """``git args``'s output in ``folder`` (never the cwd), or None where git fails."""
    try:
        out = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


@functools.cache
def git_state(folder: Path = _PACKAGE_DIR) -> tuple[str | None, bool | None]:
    """``(commit, dirty)`` of the code in ``folder`` (untracked files do not count); ``(None,
    None)`` unless git tracks this very file there (not an installed copy in a repository's
    venv). Read once: the process runs the modules it imported, whatever the checkout does."""
    if _git(folder, "ls-files", "--error-unmatch", "--", _THIS_FILE) is None:
        return None, None
    commit = _git(folder, "rev-parse", "HEAD")
    status = _git(folder, "status", "--porcelain", "--untracked-files=no")
    return commit, (None if status is None else status != "")


def package_version(package: str = "translate") -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def code_version() -> str:
    """``translate 0.1.0, commit 1a2b3c4d5 with uncommitted changes`` (or ``no git checkout``)."""
    commit, dirty = git_state()
    where = "no git checkout" if commit is None else f"commit {commit[:9]}"
    return f"translate {package_version()}, {where}" + (" with uncommitted changes" * bool(dirty))


# torch.__config__.show()'s lines naming the libraries that compute a CPU result.
_MATH_LIBRARIES = re.compile(r"Math Kernel Library|MKL-DNN|oneDNN|OpenBLAS|OpenMP|LAPACK")


def torch_build() -> dict:
    """The CPU kernels torch runs: other kernels sum in another order, so give other last bits."""
    shown = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=([^,\s]+)", shown)
    return {
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_bf16_units": cpu_bf16_units(),
        "blas": blas[1] if blas else None,
        "math_libraries": [  # not the build settings' line, which names them all
            line.strip(" -")
            for line in shown.splitlines()
            if _MATH_LIBRARIES.search(line) and "Build settings" not in line
        ],
    }


def provenance(device: torch.device) -> dict:
    """What produced a result: its floating-point bits depend on all of it (docs/training.md)."""
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
    """Where a measurement ran: the date, :func:`provenance`, Python, platform, allocator."""
    return {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        **provenance(device),
        "python": platform.python_version(),
        "keeps_freed_memory": keeps_freed_memory(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
    }
