"""Random state: seeding, every generator's state for a checkpoint and back, and torch's
deterministic kernels (``trainer.deterministic``)."""

from __future__ import annotations

import os
import random

import numpy as np
import torch

from translate.errors import UserError


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict:
    """Every generator's state as tensors and plain values (for ``weights_only`` loading)."""
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


def use_deterministic_algorithms(on: bool) -> None:
    """Set either way: the flag is global, and the jobs of a multirun share one process."""
    if on:
        # cuBLAS is deterministic only with a fixed workspace, read when it starts (a GPU's
        # first GEMM, after this).
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(on)


def refuse_nondeterministic(err: RuntimeError, key: str = "trainer.deterministic") -> None:
    """A one-line UserError for torch's error about an op without a deterministic kernel."""
    message = str(err)
    if not (torch.are_deterministic_algorithms_enabled() and "deterministic" in message):
        return
    what = message.split(", but you set", 1)[0].splitlines()[0]
    raise UserError(f"{key}=true, but {what}; set {key}=false to run it") from err
