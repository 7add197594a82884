"""Where a job computes and in what precision."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import torch

from translate.errors import UserError
from translate.schema.runtime import check_precision

log = logging.getLogger(__name__)

_AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def resolve_device(name: str, key: str = "runtime.device") -> torch.device:
    """``auto`` -> CUDA when available, else CPU; an unavailable GPU is a user error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise UserError(f"{key}={name!r} is not a device; use auto, cpu, cuda or cuda:N") from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"{key}={name} but no CUDA GPU is visible; use {key}=cpu")
    return device


def cpu_bf16_units() -> str:
    """This CPU's bf16 matmul units as torch reads them: ``amx``, ``avx512_bf16`` or ``none``."""
    cpu = torch.cpu
    if getattr(cpu, "_is_amx_tile_supported", lambda: False)():
        return "amx"
    if getattr(cpu, "_is_avx512_bf16_supported", lambda: False)():
        return "avx512_bf16"
    return "none"


def resolve_precision(
    name: str, device: torch.device, key: str = "runtime.precision", training: bool = False
) -> str:
    """``auto``: ``bf16`` on a GPU that has it and for ``training`` on an AMX CPU, else ``32``."""
    name = check_precision(name, key)
    if name == "auto":
        gpu = device.type == "cuda"
        bf16 = torch.cuda.is_bf16_supported() if gpu else training and cpu_bf16_units() == "amx"
        return "bf16" if bf16 else "32"
    if name == "fp16" and device.type != "cuda":
        raise UserError(
            f"{key}=fp16 needs a CUDA GPU (fp16 autocast with loss scaling); "
            f"use {key}=bf16 or 32 on the CPU"
        )
    if name == "bf16" and device.type == "cpu" and cpu_bf16_units() == "none":
        log.warning(
            "%s=bf16: this CPU has no bf16 instructions (AVX512-BF16 or AMX), so bf16 is "
            "emulated and slower than 32; use %s=32 or auto",
            key,
            key,
        )
    return name


def precision_reason(name: str, resolved: str, device: torch.device) -> str:
    """Why a training run computes in ``resolved``: the setting, and for ``auto`` what it found."""
    if str(name) != "auto":
        return f"runtime.precision={name}"
    if device.type == "cuda":
        found = "supports bf16" if resolved == "bf16" else "has no bf16"
        return f"auto: this GPU {found}"
    units = cpu_bf16_units()
    if units == "amx":
        return "auto: this CPU has AMX bf16 matrix units"
    return f"auto: no AMX on this CPU (bf16 units: {units}), where fp32 is kept"


def autocast(device: torch.device, precision: str):
    if precision == "32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=_AMP_DTYPES[precision])


@contextlib.contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """``model`` in eval mode for the block, then back; left alone if already (switching walks
    every submodule, which costs a batch-1 decode more than a step)."""
    if not model.training:
        yield model
        return
    model.eval()
    try:
        yield model
    finally:
        model.train()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_name(device: torch.device, cpu: str = "cpu") -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu
