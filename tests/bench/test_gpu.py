"""``python -m translate.bench.gpu``'s plumbing on the CPU (``--device cpu --quick``): every part
runs or says why it cannot, the report is written, and a failed part fails the command without
stopping the others. What it checks on a GPU is in docs/gpu.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from translate.bench import gpu

ROOT = Path(__file__).resolve().parents[2]
PARTS = {"cuda_tests", "train_bf16", "train_fp16", "train_compile"}
PARTS |= {"bench_attention", "bench_train", "bench_decode"}


@pytest.mark.slow
def test_cpu_quick_check_passes_or_says_why(tmp_path, monkeypatch, capsys):
    """In this process (every part is a subprocess of its own still). The attention part at
    L=16 alone: its CPU grid with L=2048 as well, whose memory is measured in a fresh process
    per implementation, is test_bench.py's test_bench_attention_tiny, and took a third of this
    test."""
    attention = gpu.QUICK_BENCH["attention"].replace("--lengths 16 2048 ", "--lengths 16 ")
    assert attention != gpu.QUICK_BENCH["attention"]
    monkeypatch.setitem(gpu.QUICK_BENCH, "attention", attention)
    status = gpu.main(["--device", "cpu", "--quick", "--out", str(tmp_path)])
    assert status == 0, capsys.readouterr().out
    doc = json.loads((tmp_path / "gpu_acceptance.json").read_text())
    parts = doc["parts"]
    assert set(parts) == PARTS and doc["passed"] is True
    # What only a GPU can do is skipped, saying so; the rest of the plumbing really ran.
    skipped = {name for name, part in parts.items() if part["status"] == "skipped"}
    assert skipped == {"cuda_tests", "train_fp16", "train_compile"}
    assert all(parts[name]["reason"] == "needs a CUDA GPU" for name in skipped)
    assert all(parts[name]["status"] == "passed" for name in PARTS - skipped)
    bf16 = parts["train_bf16"]
    assert bf16["precision"] == "bf16" and bf16["steps"] == 4 and bf16["tokens_per_s"] > 0
    assert "experiment=iwslt2017" in bf16["command"] and "data=sample" in bf16["command"]
    # validated every quarter of the updates: a curve the report can flag
    assert [step for step, _ in bf16["dev_loss_curve"]] == [1, 2, 3, 4]
    assert isinstance(bf16["dev_loss_rose"], bool)
    assert "greedy_cache_speedup" in parts["bench_decode"]
    assert "train_matmul_efficiency" in parts["bench_train"]
    assert "mha_fwd_bwd_time_sdpa_vs_torch" in parts["bench_attention"]
    machine = doc["machine"]
    assert machine["torch"] == torch.__version__ and machine["device"] == "cpu"
    assert machine["command"].startswith("python -m translate.bench.gpu --device cpu --quick")


def test_a_failed_part_fails_the_command_after_the_others_ran(tmp_path, monkeypatch, capsys):
    python = [sys.executable, "-c"]
    parts = {
        "fails": [*python, "raise SystemExit(3)"],
        "hangs": [*python, "import time; time.sleep(60)"],
        "runs": [*python, "print('ran')"],
    }
    monkeypatch.setattr(gpu, "commands", lambda args: parts)
    # 1 s per part: the hanging one is stopped after it, the others (no imports) end in ~50 ms
    assert gpu.main(["--device", "cpu", "--out", str(tmp_path), "--timeout", "1"]) == 1
    doc = json.loads((tmp_path / "gpu_acceptance.json").read_text())
    status = {name: (part["status"], part["exit"]) for name, part in doc["parts"].items()}
    assert status == {"fails": ("failed", 3), "hangs": ("failed", 124), "runs": ("passed", 0)}
    assert doc["passed"] is False and "FAILED" in capsys.readouterr().out
    assert "ran" in (tmp_path / "logs" / "runs.log").read_text()


@pytest.mark.parametrize(("losses", "rose"), [((2.0, 1.5, 1.6), True), ((2.0, 1.5, 1.505), False)])
def test_a_training_part_reports_its_dev_loss_curve_and_flags_a_rise(tmp_path, losses, rose):
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(tmp_path / "tensorboard")) as writer:
        for step, loss in zip((50, 100, 150), losses, strict=True):
            writer.add_scalar("dev/loss", loss, step)
    report = gpu.dev_loss_report(tmp_path)
    assert [step for step, _ in report["dev_loss_curve"]] == [50, 100, 150]
    assert [loss for _, loss in report["dev_loss_curve"]] == pytest.approx(losses)
    assert report["dev_loss_rose"] is rose


# ---------------------------------------------------------------- scripts/make_wheelhouse.sh

WHEELHOUSE = ROOT / "scripts" / "make_wheelhouse.sh"


def wheelhouse(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(WHEELHOUSE), *args], capture_output=True, text=True, timeout=60
    )


def test_make_wheelhouse_parses_and_lists_every_dependency_but_torch():
    """The download itself needs PyPI and ~150 MB (docs/gpu.md); its inputs are checked here."""
    assert subprocess.run(["bash", "-n", str(WHEELHOUSE)]).returncode == 0
    listed = wheelhouse("--list")
    assert listed.returncode == 0, listed.stderr
    reqs = listed.stdout.split()
    names = {r.split(">")[0].split("=")[0].split("<")[0] for r in reqs}
    assert "torch" not in names
    # runtime, the dev and slurm extras, and what `pip install -e .` builds with
    expected = {"datasets", "hydra-core", "sentencepiece", "pytest", "ruff"}
    assert expected | {"hydra-submitit-launcher", "setuptools"} <= names
    assert "hydra-core>=1.3.2" in reqs and len(reqs) == len(set(reqs))
    bad = wheelhouse("--bogus")
    assert bad.returncode == 2 and "unknown option --bogus" in bad.stderr
    assert wheelhouse().returncode == 2  # no DIR
