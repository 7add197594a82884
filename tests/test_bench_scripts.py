"""The benchmark scripts' machinery at tiny sizes: they run, print and write well-formed JSON
with the ``summary`` ratios. No timing assertions: numbers from a shared CPU mean nothing here."""

from __future__ import annotations

import importlib
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@pytest.fixture(scope="module")
def scripts():
    sys.path.insert(0, str(SCRIPTS))
    try:
        yield {
            name: importlib.import_module(name)
            for name in ("bench_attention", "bench_train", "bench_decode")
        }
    finally:
        sys.path.remove(str(SCRIPTS))


def check_report(path: Path, result: dict, keys: set[str], script: str) -> dict:
    written = json.loads(path.read_text())
    assert written["summary"] == pytest.approx(result["summary"])
    assert set(written["summary"]) == keys
    for key, value in written["summary"].items():
        assert isinstance(value, float) and math.isfinite(value) and value > 0, (key, value)
    machine = written["machine"]
    assert machine["torch"] == torch.__version__
    assert {"date", "device_name", "threads"} <= set(machine)
    assert written["command"].startswith(f"python scripts/{script}.py")
    assert written["rows"]
    return written


def test_bench_attention_tiny(scripts, tmp_path, capsys):
    out = tmp_path / "attention.json"
    threads = torch.get_num_threads()
    result = scripts["bench_attention"].main(
        [
            "--d-model", "32", "--heads", "2", "--lengths", "16", "2048", "--tokens", "64",
            "--repeats", "1", "--warmup", "0", "--threads", "1", "--json", str(out),
        ]
    )  # fmt: skip
    assert torch.get_num_threads() == threads  # restored for the rest of the session
    written = check_report(
        out,
        result,
        {"mha_fwd_bwd_time_sdpa_vs_torch", "peak_mem_2048_sdpa_vs_manual"},
        "bench_attention",
    )
    impls = {row["impl"] for row in written["rows"]}
    assert {"torch", "manual", "sdpa", "sdpa:math"} <= impls
    # The CPU offers no memory-efficient kernel: the row says why instead of failing the run.
    assert all("error" in r or "fwd_bwd_ms" in r for r in written["rows"])
    at_2048 = [r for r in written["rows"] if r["length"] == 2048 and "fwd_bwd_ms" in r]
    assert all(r["fwd_bwd_mb"] > 0 for r in at_2048)
    assert "fwd+bwd MiB" in capsys.readouterr().out


def test_bench_train_tiny(scripts, tmp_path, capsys):
    out = tmp_path / "train.json"
    result = scripts["bench_train"].main(
        [
            "--d-model", "32", "--heads", "2", "--layers", "1", "--d-ff", "64", "--vocab", "100",
            "--max-tokens", "128", "--batches", "2", "--rounds", "2", "--warmup", "1",
            "--threads", "1", "--json", str(out),
        ]
    )  # fmt: skip
    written = check_report(
        out,
        result,
        {"train_tokens_per_s_sdpa_vs_torch", "train_tokens_per_s_manual_vs_torch"},
        "bench_train",
    )
    rows = {row["impl"]: row for row in written["rows"]}
    assert set(rows) == {"torch", "manual", "sdpa"}
    # Same architecture: the nn.Transformer baseline has exactly our parameter count.
    assert len({row["params"] for row in rows.values()}) == 1
    assert all(len(row["tokens_per_s_runs"]) == 2 for row in rows.values())
    assert "vs torch" in capsys.readouterr().out


def test_bench_decode_tiny(scripts, tmp_path):
    out = tmp_path / "decode.json"
    result = scripts["bench_decode"].main(
        [
            "--d-model", "32", "--heads", "2", "--layers", "1", "--d-ff", "64", "--vocab", "100",
            "--sentences", "5", "--batch-size", "2", "--rounds", "1", "--warmup", "0",
            "--impls", "sdpa", "manual", "--threads", "1", "--json", str(out),
        ]
    )  # fmt: skip
    written = check_report(out, result, {"greedy_cache_speedup"}, "bench_decode")
    cached = [r for r in written["rows"] if r["mode"] == "greedy_cache"]
    assert len(cached) == 2 and all(r["same_output"] for r in cached)
    assert {r["mode"] for r in written["rows"]} == {"greedy_no_cache", "greedy_cache", "beam5"}


def test_scripts_run_from_the_command_line(tmp_path):
    out = tmp_path / "decode.json"
    cmd = [
        sys.executable, str(SCRIPTS / "bench_decode.py"), "--d-model", "16", "--heads", "2",
        "--layers", "1", "--d-ff", "32", "--vocab", "50", "--sentences", "2", "--rounds", "1",
        "--threads", "1", "--json", str(out),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "greedy_cache_speedup" in json.loads(out.read_text())["summary"]
