"""``python -m translate.bench.gpu``'s plumbing on the CPU (``--device cpu --quick``): every part
runs or says why it cannot, the reports are written, and a failed part fails the command without
stopping the others. What it checks on a GPU is in docs/gpu.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
PARTS = {
    "cuda_tests", "train_bf16", "train_fp16", "train_compile",
    "bench_attention", "bench_train", "bench_decode", "torchrun",
}  # fmt: skip


def accept(out: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    cmd = [sys.executable, "-m", "translate.bench.gpu", "--device", "cpu", "--quick"]
    cmd += ["--out", str(out), *extra]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=400)
    report = out / "gpu_acceptance.json"
    assert report.is_file(), proc.stdout + proc.stderr
    return proc, json.loads(report.read_text())


@pytest.mark.slow
def test_cpu_quick_acceptance_passes_or_says_why(tmp_path):
    proc, doc = accept(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "gpu_acceptance.md").is_file()
    assert set(doc["parts"]) == PARTS and doc["passed"] is True
    for name, status in doc["parts"].items():
        assert status in ("passed", "skipped"), (name, doc["details"][name])
        assert doc["details"][name]["status"] == status
        if status == "skipped":
            assert doc["details"][name]["reason"], name
    # What only a GPU can do is skipped, saying so; the rest of the plumbing really ran.
    assert {n for n, s in doc["parts"].items() if s == "skipped"} == {
        "cuda_tests", "train_fp16", "train_compile",
    }  # fmt: skip
    assert "no CUDA GPU" in doc["details"]["cuda_tests"]["reason"]
    assert "needs a CUDA GPU" in doc["details"]["train_fp16"]["reason"]
    bf16 = doc["details"]["train_bf16"]
    assert bf16["precision"] == "bf16" and bf16["steps"] == doc["settings"]["steps"]
    assert bf16["loss_last"] > 0 and bf16["params"] > 0
    assert [step for step, _ in bf16["dev_loss_curve"]] == [1, 2, 3, 4]  # 4 validations
    assert bf16["dev_loss_rose"] in (True, False)
    assert "experiment=iwslt2017" in bf16["command"] and "data=sample" in bf16["command"]
    assert doc["details"]["torchrun"]["process_group"] == "gloo"
    assert all(doc["details"][f"bench_{b}"]["summary"] for b in ("attention", "train", "decode"))

    machine = doc["machine"]
    assert machine["torch"] == torch.__version__
    assert machine["command"].startswith("python -m translate.bench.gpu --device cpu --quick")
    assert machine["date"] and machine["device"] == "cpu"
    table = (tmp_path / "gpu_acceptance.md").read_text()
    assert all(f"| {name} | {doc['parts'][name]} |" in table for name in PARTS)


@pytest.mark.parametrize(
    "losses,rose", [([3.0, 2.5, 2.4, 2.6], True), ([3.0, 2.5, 2.4, 2.405], False)]
)
def test_a_dev_loss_that_rises_at_the_end_is_flagged(tmp_path, losses, rose):
    from torch.utils.tensorboard import SummaryWriter

    from translate.bench.gpu import dev_loss_curve

    writer = SummaryWriter(str(tmp_path / "tensorboard"))
    for i, loss in enumerate(losses):
        writer.add_scalar("dev/loss", loss, 50 * (i + 1))
    writer.close()
    curve = dev_loss_curve(tmp_path)
    assert curve["dev_loss_rose"] is rose
    assert curve["dev_loss_curve"] == [
        (50 * (i + 1), pytest.approx(v)) for i, v in enumerate(losses)
    ]


def test_a_failed_part_fails_the_command_after_the_others_ran(tmp_path):
    # heads=3 does not divide d_model=32: the training run stops with a config error.
    proc, doc = accept(tmp_path, "--parts", "train_bf16", "bench_decode", "--override", "heads=3")
    assert proc.returncode == 1
    assert doc["parts"]["train_bf16"] == "failed" and doc["passed"] is False
    assert "not divisible" in doc["details"]["train_bf16"]["reason"]
    assert doc["parts"]["bench_decode"] == "passed"  # ran after the failure
    assert doc["parts"]["torchrun"] == "skipped"
    assert doc["details"]["torchrun"]["reason"] == "not selected (--parts)"
    assert "FAILED" in proc.stdout


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
