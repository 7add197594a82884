"""The ``runtime`` group: where and how a command computes on this machine. Every command that
runs a model reads it (train, evaluate, translate, analyze), from ``conf/runtime/default.yaml``."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from translate.runtime.device import PRECISIONS, check_precision
from translate.runtime.memory import keep_freed_memory
from translate.schema.checks import doc, positive

# The keys that were trainer.* in training (and, but num_threads, evaluate's, translate's and
# analyze's own) before this group: an old checkpoint's config is read with them moved here, and
# the old names on a command line get a pointer to the new ones.
MOVED_KEYS = ("device", "precision", "num_threads", "keep_freed_memory")


@dataclass(frozen=True)
class RuntimeSettings:
    device: str = doc(
        "where it runs; auto: a CUDA GPU when there is one",
        "device",
        "auto | cpu | cuda | cuda:N",
        mechanics=True,
    )
    precision: str = doc(
        "the compute precision; auto: bf16 on a GPU that supports it, else 32; fp16 (with loss "
        "scaling) needs a GPU",
        "name",
        " | ".join(PRECISIONS),
    )
    num_threads: int | None = doc(
        "torch CPU threads", "threads", "; null = torch's default", check=positive, mechanics=True
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
        """What this process takes from the group before a command loads anything: torch's CPU
        threads (None: torch's default) and glibc's allocator; the device and precision are
        the caller's to resolve (translate.runtime.device)."""
        if self.num_threads:
            torch.set_num_threads(self.num_threads)
        if self.keep_freed_memory:
            keep_freed_memory()
