"""Device, precision and peak-memory helpers."""

import subprocess
import sys

import pytest
import torch

from translate.errors import UserError
from translate.runtime import resolve_precision

CPU = torch.device("cpu")


def test_precision_auto_is_fp32_on_cpu_and_fp16_needs_a_gpu():
    assert resolve_precision("auto", CPU) == "32"
    assert resolve_precision("bf16", CPU) == "bf16"
    with pytest.raises(UserError, match="fp16 needs a CUDA GPU"):
        resolve_precision("fp16", CPU)


# In a fresh process: after the rest of the suite the allocator may hold freed memory that a
# new tensor reuses without the resident set growing, so the peak would not move at all.
PEAK_WINDOW = """
import torch
from translate.runtime import peak_memory_mb, reset_peak_memory
cpu = torch.device("cpu")
big = torch.ones(64 * 2**20)  # 256 MiB
big.add_(1)
with_big = peak_memory_mb(cpu)
del big
reset_peak_memory(cpu)
print(with_big, peak_memory_mb(cpu))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak-RSS reset is Linux-only")
def test_peak_memory_window_resets_between_jobs():
    proc = subprocess.run(
        [sys.executable, "-c", PEAK_WINDOW], capture_output=True, text=True, check=True
    )
    with_big, after_reset = map(float, proc.stdout.split())
    assert after_reset < with_big - 200


def test_eval_mode_restores_a_training_model_and_leaves_an_eval_model_alone():
    from translate.runtime import eval_mode

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5)).train()
    with eval_mode(model):
        assert not any(m.training for m in model.modules())
    assert all(m.training for m in model.modules())

    model.eval()
    calls = []
    model.train = lambda mode=True: calls.append(mode)  # a switch would walk every submodule
    with eval_mode(model):
        assert not any(m.training for m in model.modules())
    assert calls == [] and not model.training
