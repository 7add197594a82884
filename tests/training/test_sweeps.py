"""Sweeps that survive being stopped: re-running a multirun with trainer.resume=true skips the
finished jobs, resumes the interrupted one and starts the rest; a stop signal reaches the
handler a SLURM launcher installed (its requeue) after the checkpoint is saved. And sweeps
through hydra-submitit-launcher: its local launcher, and the SLURM config (docs/scale_out.md)."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, TINY, compose_config, listing
from hydra import compose, initialize_config_dir

from translate.checkpoint import load_checkpoint
from translate.data.corpus import load_corpus
from translate.settings import data_settings
from translate.train import train
from translate.training.saving import CheckpointManager

MAX_STEPS = 12
# Tiny jobs with short decodes; the job dirs are named by the swept heads alone.
SHRINK = [o for o in TINY if not o.startswith("heads=")] + [
    f"trainer.max_steps={MAX_STEPS}",
    "trainer.checkpoint_every_n_steps=4",
    "trainer.val_every_n_steps=100000",
    "decode.max_len_a=0",
    "decode.max_len_b=4",
]
HIDDEN = ["experiment", "data.cache_dir", "trainer.resume", *(o.split("=")[0] for o in SHRINK)]


def run_sweep(sweep: Path, cache_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [
        sys.executable, "-m", "translate.train", "-m", *SHRINK, "heads=1,2,4",
        f"data.cache_dir={cache_dir}", f"hydra.sweep.dir={sweep}",
        f"hydra.job.config.override_dirname.exclude_keys=[{','.join(HIDDEN)}]", *extra,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )  # fmt: skip


def snapshot(job: Path) -> dict[str, tuple[int, bytes]]:
    """Every file a finished job's training and scoring wrote, with its mtime and bytes."""
    ckpts = [job / "checkpoints" / name for name in listing(job / "checkpoints")]
    files = [*ckpts, job / "results.json", job / "test.hyp.txt"]
    return {f.name: (f.stat().st_mtime_ns, f.read_bytes()) for f in files}


def results(job: Path) -> dict:
    return json.loads((job / "results.json").read_text())


@pytest.mark.slow
def test_a_sweep_stopped_during_job_2_resumes_where_it_stopped(tmp_path, cache_dir):
    sweep = tmp_path / "sweep"
    stop = ["+hydra.callbacks.stop._target_=sweep_stop.StopDuringJob"]
    first = run_sweep(sweep, cache_dir, *stop, "+hydra.callbacks.stop.job_num=1")
    assert first.returncode == 128 + signal.SIGTERM, first.stderr[-3000:]
    job1, job2, job3 = sweep / "heads=1", sweep / "heads=2", sweep / "heads=4"
    assert results(job1)["status"] == "completed" and results(job1)["steps"] == MAX_STEPS
    assert not (job2 / "results.json").exists() and not job3.exists()
    stopped_at = load_checkpoint(job2 / "checkpoints" / "last.pt")["progress"]["step"]
    assert 4 <= stopped_at < MAX_STEPS
    before = snapshot(job1)

    again = run_sweep(sweep, cache_dir, "trainer.resume=true")
    assert again.returncode == 0, again.stderr[-3000:]
    log = again.stderr + again.stdout
    assert "heads=1: completed, skipped" in log
    assert f"at step {stopped_at} " in log and "heads=4: no checkpoint yet, starting" in log
    assert snapshot(job1) == before  # not retrained, not rescored
    for job in (job2, job3):
        assert results(job)["status"] == "completed" and results(job)["steps"] == MAX_STEPS
    rows = list(csv.DictReader((sweep / "ablation.csv").open()))
    assert sorted(int(r["heads"]) for r in rows) == [1, 2, 4]


def test_a_single_run_without_a_checkpoint_does_not_resume(tiny_train_cfg):
    """Outside a sweep, trainer.resume=true on an empty dir is a mistyped dir: one line."""
    from translate.errors import UserError

    with pytest.raises(UserError, match="last.pt does not exist: .* holds no run to resume"):
        train(tiny_train_cfg("trainer.resume=true"))


def test_a_stop_signal_reaches_the_handler_it_replaced_after_the_save(
    tiny_train_cfg, tmp_path, monkeypatch
):
    """hydra-submitit-launcher requeues a SLURM job from its SIGUSR2 handler: training saves
    its checkpoint at the step boundary first, then hands the signal on, then exits."""
    last = tmp_path / "run" / "checkpoints" / "last.pt"
    handed = []

    def requeue(signum, frame):  # what the launcher's handler would see on disk
        handed.append((signum, load_checkpoint(last)["progress"]["step"]))

    save = CheckpointManager.save

    def save_then_signal(manager, *args, **kw):
        path = save(manager, *args, **kw)
        monkeypatch.setattr(CheckpointManager, "save", save)
        signal.raise_signal(signal.SIGUSR2)
        return path

    monkeypatch.setattr(CheckpointManager, "save", save_then_signal)
    previous = signal.signal(signal.SIGUSR2, requeue)
    try:
        cfg = tiny_train_cfg("trainer.max_steps=1000", "trainer.checkpoint_every_n_steps=3")
        with pytest.raises(SystemExit) as stopped:
            train(cfg)
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert stopped.value.code == 128 + signal.SIGUSR2
    step = load_checkpoint(last)["progress"]["step"]
    assert handed == [(signal.SIGUSR2, step)] and 3 <= step < 1000
    assert not (tmp_path / "run" / "results.json").exists()


def _sweep_record(overrides: list[str]) -> dict:
    """What Hydra's basic sweeper records in multirun.yaml, as far as the job list goes."""
    sweeper = {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"}
    return {"hydra": {"overrides": {"task": overrides}, "sweeper": {**sweeper, "params": None}}}


def test_a_later_sweep_into_the_dir_keeps_the_earlier_job_list(tmp_path):
    """Re-running a subset (heads=2) into a heads=2,4 sweep's dir: Hydra writes multirun.yaml
    over the earlier one, and the report then counted missing jobs against heads=2 alone
    (the probe: '0 missing' with heads=4 never run). The earlier list is set aside first and
    the expected jobs are all of them; the same command again sets nothing aside."""
    from omegaconf import OmegaConf

    from translate.ablation.report import expected_jobs
    from translate.io import write
    from translate.sweeps import _keep_earlier_sweep

    first = ["experiment=quickstart", "heads=2,4"]
    write(tmp_path / "multirun.yaml", yaml.safe_dump(_sweep_record(first)), "hydra record")
    _keep_earlier_sweep(tmp_path, OmegaConf.create(_sweep_record(first)))
    assert not list(tmp_path.glob("multirun.*.yaml"))  # the same sweep: nothing to keep
    subset = ["experiment=quickstart", "heads=2"]
    _keep_earlier_sweep(tmp_path, OmegaConf.create(_sweep_record(subset)))
    (aside,) = tmp_path.glob("multirun.*.yaml")
    assert yaml.safe_load(aside.read_text()) == _sweep_record(first)
    (tmp_path / "multirun.yaml").write_text(yaml.safe_dump(_sweep_record(subset)))  # as Hydra
    assert expected_jobs(tmp_path) == (["heads"], [{"heads": "2"}, {"heads": "4"}])


# ---------------------------------------------------------------- hydra-submitit-launcher

# Short decoding: validation, test scoring and latency are not what these tests are about.
FAST = [
    *TINY,
    "trainer.val_bleu_sentences=4",
    "trainer.latency_sentences=1",
    "decode.max_len_a=0",
    "decode.max_len_b=8",
]


@pytest.mark.slow
def test_submitit_local_sweep_runs_one_job_per_head_count(tmp_path, cache_dir):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    overrides = [o for o in FAST if not o.startswith("heads=")]
    overrides += [f"data.cache_dir={cache_dir}", "trainer.max_steps=2", "runtime.num_threads=1"]
    load_corpus(data_settings(compose_config("train", overrides).data))  # a warm shared cache
    sweep = tmp_path / "sweep"
    cmd = [
        sys.executable, "-m", "translate.train", "-m", "hydra/launcher=local",
        f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=job${hydra.job.num}", *overrides,
        "heads=1,4",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "TRANSLATE_DEBUG")}
    proc = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**env, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    results = [json.loads(p.read_text()) for p in sweep.glob("*/results.json")]
    assert sorted(r["heads"] for r in results) == [1, 4]
    assert all(r["steps"] == 2 for r in results)
    assert any((sweep / ".submitit").iterdir())  # the jobs went through submitit
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        hydra_cfg = compose("train", overrides, return_hydra_config=True).hydra
    if "ablation_report" in (hydra_cfg.get("callbacks") or {}):
        assert (sweep / "ablation.csv").is_file()  # the sweep's callback ran at its end


def test_slurm_launcher_config_fits_the_plugin_and_requires_a_partition():
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    from dataclasses import fields

    from hydra_plugins.hydra_submitit_launcher.config import LocalQueueConf, SlurmQueueConf
    from omegaconf import OmegaConf

    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        slurm = compose("train", ["hydra/launcher=slurm"], return_hydra_config=True)
        local = compose("train", ["hydra/launcher=local"], return_hydra_config=True)
    launcher = slurm.hydra.launcher
    # slurm.yaml spells the plugin's config out (see its header): no key the plugin lacks
    assert set(launcher) <= {f.name for f in fields(SlurmQueueConf)}
    assert launcher._target_ == SlurmQueueConf._target_
    assert launcher.gpus_per_task == 1 and launcher.tasks_per_node == 1
    assert OmegaConf.is_missing(launcher, "partition")
    assert local.hydra.launcher._target_ == LocalQueueConf._target_
