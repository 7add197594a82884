"""Device, precision and peak-memory helpers."""

import sys

import pytest
import torch

from translate.errors import UserError
from translate.runtime import peak_memory_mb, reset_peak_memory, resolve_precision

CPU = torch.device("cpu")


def test_precision_auto_is_fp32_on_cpu_and_fp16_needs_a_gpu():
    assert resolve_precision("auto", CPU) == "32"
    assert resolve_precision("bf16", CPU) == "bf16"
    with pytest.raises(UserError, match="fp16 needs a CUDA GPU"):
        resolve_precision("fp16", CPU)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak-RSS reset is Linux-only")
def test_peak_memory_window_resets_between_jobs():
    big = torch.ones(64 * 2**20 // 4 * 4)  # 256 MiB
    big.add_(1)
    with_big = peak_memory_mb(CPU)
    del big
    reset_peak_memory(CPU)
    assert peak_memory_mb(CPU) < with_big - 200
