"""Where a job computes and in what precision: the device, the autocast precision, eval mode,
waiting for the device, and the device's name."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from translate.errors import UserError

PRECISIONS = ("auto", "bf16", "fp16", "32")


_AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def resolve_device(name: str, key: str = "runtime.device") -> torch.device:
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


def check_precision(name: str, key: str = "runtime.precision") -> str:
    """``name`` as one of :data:`PRECISIONS` (a config may give ``32`` as a number); anything
    else is a UserError naming ``key`` and the choices."""
    name = str(name)
    if name not in PRECISIONS:
        raise UserError(f"{key}={name} is unknown; choose one of {', '.join(PRECISIONS)}")
    return name


def resolve_precision(name: str, device: torch.device, key: str = "runtime.precision") -> str:
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


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA kernels run asynchronously); no-op on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_name(device: torch.device, cpu: str = "cpu") -> str:
    """The GPU's name (``NVIDIA H200``), or ``cpu``: what the caller calls the CPU."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu
