"""The ``runtime`` group: where and how a command that runs a model computes on this machine."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from translate.errors import UserError, counted
from translate.nn.config import Check, doc

# The keys that were trainer.* in training before this group: the heads study's report still
# ignores them by those names too (translate.ablation.results).
MOVED_KEYS = ("device", "precision", "num_threads", "keep_freed_memory")

PRECISIONS = ("auto", "bf16", "fp16", "32")

# torch accepts any device type it knows of (meta, mps, xpu, ...): a model on one of those cannot
# be trained or decoded here, and fails deep in the first step with a traceback.
device_name = Check(
    "",
    lambda value: value in ("auto", "cpu", "cuda") or re.fullmatch(r"cuda:\d+", value) is not None,
    "auto, cpu, cuda or cuda:N",
)
# Each torch CPU thread takes a stack: 100,000 of them exhausted the memory (a segfault, or
# libgomp's out-of-memory abort). More threads than a few per core only wait on each other.
THREADS_PER_CORE = 4
CORES = os.cpu_count() or 1
MAX_THREADS = THREADS_PER_CORE * CORES
thread_count = Check(
    f"1 to {THREADS_PER_CORE} x the CPU cores",
    lambda value: 1 <= value <= MAX_THREADS,
    f"in 1..{MAX_THREADS} ({THREADS_PER_CORE} x this machine's {counted(CORES, 'CPU core')})",
)


@dataclass(frozen=True)
class RuntimeSettings:
    device: str = doc(
        "where it runs; auto: a CUDA GPU when there is one",
        "device",
        "auto | cpu | cuda | cuda:N",
        check=device_name,
        mechanics=True,
    )
    precision: str = doc(
        "the compute precision; auto: bf16 on a GPU that supports it and, for training, on a "
        "CPU with AMX, else 32; fp16 (with loss scaling) needs a GPU",
        "name",
        " | ".join(PRECISIONS),
    )
    num_threads: int | None = doc(
        "torch CPU threads",
        "threads",
        "; null = torch's default",
        check=thread_count,
        mechanics=True,
    )
    cpu_bf16_padding: bool = doc(
        "training in bf16 on a CPU pads batches to multiples of 8 positions and the loss rows "
        "to 64, masked and outside the loss, so that oneDNN reuses its kernels (about 1.35x "
        "faster on an Intel Xeon with AMX; translate.training.step.SEQ_MULTIPLE)",
        "flag",
        "true | false",
        mechanics=True,
    )
    keep_freed_memory: bool = doc(
        "glibc's malloc keeps freed memory for reuse rather than mapping large tensors afresh "
        "at every step (decoding and CPU training 10-15% faster; the process keeps its peak "
        "memory until it exits; translate.runtime.memory)",
        "flag",
        "true | false",
        mechanics=True,
    )

    def validate(self) -> None:
        check_precision(self.precision)

    def apply_to_process(self) -> None:
        """Torch's CPU threads and glibc's allocator, set before a command loads anything (the
        device and precision are the caller's to resolve: translate.runtime.device)."""
        import torch  # here, when the command starts: its settings are checked without torch

        from translate.runtime.memory import keep_freed_memory

        if self.num_threads:
            torch.set_num_threads(self.num_threads)
        if self.keep_freed_memory:
            keep_freed_memory()


def check_precision(name: str, key: str = "runtime.precision") -> str:
    """``name`` as one of :data:`PRECISIONS` (a config may give ``32`` as a number)."""
    name = str(name)
    if name not in PRECISIONS:
        raise UserError(f"{key}={name} is unknown; choose one of {', '.join(PRECISIONS)}")
    return name
