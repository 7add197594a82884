"""Device, precision and peak-memory helpers."""

import subprocess
import sys

import pytest
import torch

from translate.errors import UserError
from translate.runtime import device as device_module
from translate.runtime.device import precision_reason, resolve_precision

CPU = torch.device("cpu")


def test_precision_auto_is_fp32_on_cpu_and_fp16_needs_a_gpu():
    assert resolve_precision("auto", CPU) == "32"
    assert resolve_precision("bf16", CPU) == "bf16"
    with pytest.raises(UserError, match="fp16 needs a CUDA GPU"):
        resolve_precision("fp16", CPU)


@pytest.mark.parametrize(
    "units,training,expected",
    [
        ("amx", True, "bf16"),  # AMX tiles: bf16 training (docs/benchmarks.md)
        ("amx", False, "32"),  # decoding in bf16 is not measured to pay on a CPU
        ("avx512_bf16", True, "32"),
        ("none", True, "32"),
    ],
)
def test_precision_auto_on_a_cpu_follows_its_bf16_units(monkeypatch, units, training, expected):
    monkeypatch.setattr(device_module, "cpu_bf16_units", lambda: units)
    assert resolve_precision("auto", CPU, training=training) == expected
    reason = precision_reason("auto", expected, CPU)
    assert reason.startswith("auto: ") and ("AMX" in reason)
    assert precision_reason("32", "32", CPU) == "runtime.precision=32"


@pytest.mark.parametrize("units,warned", [("none", True), ("avx512_bf16", False), ("amx", False)])
def test_bf16_on_a_cpu_without_bf16_units_runs_and_says_it_is_emulated(
    monkeypatch, caplog, units, warned
):
    monkeypatch.setattr(device_module, "cpu_bf16_units", lambda: units)
    assert resolve_precision("bf16", CPU, training=True) == "bf16"
    lines = [r.getMessage() for r in caplog.records if "emulated" in r.getMessage()]
    assert len(lines) == int(warned)


# In a fresh process: after the rest of the suite the allocator may hold freed memory that a
# new tensor reuses without the resident set growing, so the peak would not move at all.
PEAK_WINDOW = """
import torch
from translate.runtime.memory import peak_memory_mb, reset_peak_memory
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
    from translate.runtime.device import eval_mode

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


_FAULTS = """
import resource, sys, torch
from translate.runtime.memory import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "keep" else False
def step():  # two 64 MiB tensors made, written and freed, as a large decoding step makes them
    logits = torch.ones(4096, 4096)
    scores = logits * 2
    return scores.sum()
for _ in range(5):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    step()
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux")
    or "glibc" not in " ".join(__import__("platform").libc_ver()),
    reason="keep_freed_memory tunes glibc's malloc",
)
def test_kept_freed_memory_is_reused_not_faulted_in_again():
    """Steps that each make two 64 MiB tensors: with glibc's defaults every tensor maps fresh
    pages (16k page faults each); with freed memory kept, they reuse earlier steps' (the heap
    may still grow once or twice as it settles)."""
    runs = {}
    for mode in ("keep", "system"):
        out = subprocess.run(
            [sys.executable, "-c", _FAULTS, mode], capture_output=True, text=True, check=True
        ).stdout.split()
        runs[mode] = (out[0] == "True", int(out[1]))
    assert runs["keep"][0] and not runs["system"][0]
    assert runs["system"][1] > 20 * 2 * 10_000  # fresh pages every time
    assert runs["keep"][1] < runs["system"][1] / 10  # the same memory again


@pytest.mark.parametrize("keep", [True, False])
def test_commands_apply_the_runtime_group_before_loading(monkeypatch, keep):
    """``runtime.num_threads`` and ``runtime.keep_freed_memory`` reach the engine loader of
    translate and evaluate, which applies them before it loads anything (and only when asked)."""
    from conftest import compose_config

    from translate.decoding import engine_switch
    from translate.runtime import memory
    from translate.schema.commands import EngineCommand
    from translate.settings import command_settings

    calls = []
    monkeypatch.setattr(memory, "keep_freed_memory", lambda: calls.append("kept"))
    monkeypatch.setattr(torch, "set_num_threads", lambda n: calls.append(f"threads {n}"))
    monkeypatch.setitem(engine_switch.ENGINES, "torch", lambda *args: calls.append("loaded"))
    for command in ("translate", "evaluate"):
        overrides = [f"runtime.keep_freed_memory={keep}", "runtime.num_threads=3"]
        cfg = compose_config(command, ["checkpoint=c.pt", *overrides])
        engine_switch.load_engine(command_settings(EngineCommand, cfg), {})
    applied = ["threads 3", "kept"] if keep else ["threads 3"]
    assert calls == [*applied, "loaded"] * 2
