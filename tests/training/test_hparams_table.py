"""The sweep's HParams table as the page reads it, from a real ``tensorboard`` process: the swept
keys, heads, kv_heads and seed come first (the page ticks the first five), the constant columns
after them, and each row is named by its job's overrides.

The jobs' summaries are written by the training run's own writer (``_log_hparams``) into a sweep
dir laid out as Hydra's multirun leaves it, without training: the table depends on the
settings and the overrides only."""

from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from torch.utils.tensorboard import SummaryWriter

from translate.settings import train_settings
from translate.training.report import _log_hparams

# As typed after -m; Hydra writes a job's own false as False (.hydra/overrides.yaml).
SWEEP = ["heads=2,16", "optim.warmup_steps=10,20", "trainer.max_steps=50",
         "trainer.progress_bar=false"]  # fmt: skip
JOBS = [(2, 10), (16, 20)]
STARTUP_S = 120  # a loaded 2-core machine takes tens of seconds to import and load tensorboard


def write_job(sweep_dir: Path, tiny_train_cfg, heads: int, warmup: int) -> None:
    """One finished job's HParams summaries, in a dir named by its overrides as Hydra names it."""
    overrides = [f"heads={heads}", f"optim.warmup_steps={warmup}", "trainer.max_steps=50",
                 "trainer.progress_bar=False"]  # fmt: skip
    name = ",".join(overrides[:3])  # hydra/default.yaml leaves trainer.progress_bar out
    job = sweep_dir / name
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    settings = train_settings(tiny_train_cfg(*overrides), name)  # run.run_dir is the job dir
    writer = SummaryWriter(job / "tensorboard")
    run = SimpleNamespace(settings=settings, run_dir=job, writer=writer)
    _log_hparams(run, {"precision": "32", "bleu": 1.0, "dev_bleu": 2.0, "latency_ms": 3.0})
    writer.close()


class TensorBoard:
    """``tensorboard --logdir`` on 127.0.0.1 at a port it picks itself (``--port 0``, read back
    from its stderr: no other process can take it between choosing and binding)."""

    def __init__(self, logdir: Path):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir),
             "--host", "127.0.0.1", "--port", "0", "--load_fast", "false"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        lines: queue.Queue[str] = queue.Queue()  # read on, so that a full pipe never blocks it
        drain = threading.Thread(target=lambda: [lines.put(x) for x in self.proc.stderr])
        drain.daemon = True
        drain.start()
        self.url = f"http://127.0.0.1:{self._port(lines)}"

    def _port(self, lines: queue.Queue) -> str:
        said, deadline = [], time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            try:
                said.append(lines.get(timeout=1))
            except queue.Empty:
                if self.proc.poll() is not None:
                    break  # it stopped: what it said is in the failure below
                continue
            if match := re.search(r"http://127\.0\.0\.1:(\d+)/", said[-1]):
                return match.group(1)
        self.close()
        pytest.fail(f"tensorboard did not say its port within {STARTUP_S} s: {''.join(said)}")

    def post(self, endpoint: str, body: dict) -> dict:
        request = urllib.request.Request(
            f"{self.url}/data/plugin/hparams/{endpoint}", json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)

    def experiment(self, runs: int) -> dict:
        """The experiment the page reads, once tensorboard has loaded ``runs`` sessions."""
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            if len(self.session_groups()) == runs:
                return self.post("experiment", {"experimentName": ""})
            time.sleep(1)
        pytest.fail(f"tensorboard did not load {runs} runs within {STARTUP_S} s")

    def session_groups(self) -> list[dict]:
        body = {"experimentName": "", "allowedStatuses": ["STATUS_SUCCESS"],
                "startIndex": 0, "sliceSize": 100}  # fmt: skip
        return self.post("session_groups", body).get("sessionGroups", [])

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def test_sweep_table_leads_with_swept_keys_heads_and_seed_and_names_rows(tmp_path, tiny_train_cfg):
    sweep = tmp_path / "multirun" / "2026-11-29_18-00-00_123456"
    sweep.mkdir(parents=True)
    (sweep / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {"overrides": {"task": SWEEP}}}))
    for heads, warmup in JOBS:
        write_job(sweep, tiny_train_cfg, heads, warmup)
    tensorboard = TensorBoard(tmp_path)  # as `--logdir outputs` sees a sweep: paths cut short
    try:
        columns = [h["name"] for h in tensorboard.experiment(len(JOBS))["hparamInfos"]]
        groups = tensorboard.session_groups()
    finally:
        tensorboard.close()
    leading = {"heads", "kv_heads", "seed", "optim.warmup_steps"}
    assert set(columns[: len(leading)]) == leading, columns  # the page ticks the first five
    assert {"d_model", "attention_impl", "lr"} <= set(columns[len(leading) :])
    shared = {"trainer.max_steps", "trainer.progress_bar"}  # every job's: not what sets it apart
    assert not shared & set(columns)
    trials = [g["name"] for g in groups]  # in the page's order: by name
    swept = [f"heads={heads:02d},optim.warmup_steps={warmup}" for heads, warmup in JOBS]
    assert [t.split(" · ")[0] for t in trials] == swept  # what sets the job apart, first
    # Rows in numeric order (not 16 before 2), swept integers logged as numbers, not text.
    assert [g["hparams"]["heads"] for g in groups] == [2, 16]
    assert [g["hparams"]["optim.warmup_steps"] for g in groups] == [10, 20]
    assert all(str(sweep) in t for t in trials)  # and another sweep's job is another row
