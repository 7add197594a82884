"""The heads-ablation report: rows, seeds statistics, significance, failed and missing jobs."""

from __future__ import annotations

import csv
import json
import logging
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, TINY
from omegaconf import OmegaConf

from translate.ablation.report import expected_jobs, write_report
from translate.ablation.results import build_report
from translate.io import MARKS
from translate.sweeps import AblationReportCallback

REFS = [f"the cat number {i} sits on the mat near house {i % 7} today ." for i in range(40)]
BAD = [f"dog {i} runs" for i in range(40)]


def make_job(
    sweep: Path,
    heads: int,
    seed: int,
    bleu: float | None,
    params: int = 1000,
    *,
    kv_heads: int | None = None,
    extra_overrides: tuple[str, ...] = (),
    **kw,
):
    """A job dir as a training job leaves it; ``bleu=None`` makes a failed job. Without
    ``kv_heads`` it is a job of a plain heads sweep from before GQA (no ``kv_heads`` key)."""
    kv = [] if kv_heads is None else [f"kv_heads={kv_heads}"]
    job = sweep / ",".join([f"heads={heads}", *kv, f"seed={seed}"])
    (job / ".hydra").mkdir(parents=True)
    overrides = [f"heads={heads}", *kv, f"seed={seed}", "experiment=quickstart", *extra_overrides]
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    if bleu is None:
        (job / "train.log").write_text("[2026][translate.train][ERROR] - error: out of memory\n")
        return job
    results = {
        "status": "completed",
        "heads": heads,
        "d_k": 64 // heads,
        "params": params,
        "seed": seed,
        "bleu": bleu,
        "chrf": bleu + 20,
        "dev_bleu": bleu + 1,
        "latency_ms": 10.0 * heads,
        "sentences_per_s": 100.0 / heads,
        "tokens_per_s": 5000.0,
        "peak_mem_mb": 300.0,
        "train_minutes": 13.0,
        "steps": 1000,
        "device": "cpu",
        "precision": "32",
        "test_split": "test",
        "beam_size": 5,
        "head_summary": {
            "entropy": {"encoder": 1.0 + heads, "decoder_self": 0.5, "decoder_cross": 2.0},
            "degenerate_heads": heads // 4,
            "total_heads": 6 * heads,
        },
        **({} if kv_heads is None else {"kv_heads": kv_heads}),
        **kw,
    }
    (job / "results.json").write_text(json.dumps(results))
    # The baseline (8 heads, multi-head) translates perfectly, every other row worse.
    hyps = [r if i % 3 else b for i, (r, b) in enumerate(zip(REFS, BAD))]
    if heads == 8 and kv_heads in (None, 8):
        hyps = REFS
    (job / "test.hyp.txt").write_text("".join(h + "\n" for h in hyps))
    (job / "test.ref.txt").write_text("".join(r + "\n" for r in REFS))
    return job


def write_multirun_yaml(sweep: Path, params: dict, task: list[str]) -> None:
    cfg = {
        "hydra": {
            "sweeper": {
                "_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
                "params": params,
            },
            "overrides": {"task": task},
        }
    }
    (sweep / "multirun.yaml").write_text(yaml.safe_dump(cfg))


@pytest.fixture
def sweep(tmp_path) -> Path:
    """heads 1/4/8 x seeds 1/2 finished, heads=16 seed 1 failed, heads=16 seed 2 never ran."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    write_multirun_yaml(sweep, {"heads": "1,4,8,16", "seed": "1,2"}, ["experiment=quickstart"])
    for heads, bleus in ((1, (20.0, 22.0)), (4, (25.0, 26.0)), (8, (27.0, 27.5))):
        for seed, bleu in zip((1, 2), bleus):
            make_job(sweep, heads, seed, bleu)
    make_job(sweep, 16, 1, None)
    return sweep


def test_report_rows_means_std_and_missing_and_failed_jobs(sweep):
    report = write_report(sweep, bootstrap_samples=200)
    assert [r["heads"] for r in report.rows] == [1, 4, 8]
    one = report.rows[0]
    assert one["n"] == 2 and one["d_k"] == 64 and one["params"] == 1000
    assert one["bleu_mean"] == pytest.approx(21.0)
    assert one["bleu_std"] == pytest.approx(statistics.stdev([20.0, 22.0]))
    assert (one["bleu_seed1"], one["bleu_seed2"]) == (20.0, 22.0)
    assert one["chrf_mean"] == 41.0 and one["bleu_greedy_mean"] is None  # beam-only runs
    assert "latency_ms_mean" not in one  # speed comes from ablation_speed.json only
    assert one["entropy_encoder"] == pytest.approx(2.0) and one["degenerate_heads"] == 0
    assert [j.name for j in report.failed] == ["heads=16,seed=1"]
    assert report.jobs[-1].name == "heads=16,seed=1"  # by number: 1, 4, 8, 16, not as text
    assert "out of memory" in report.failed[0].error
    assert report.missing == ["heads=16,seed=2"]
    assert report.params_equal and "1,000" in report.params_message
    # Significance against the 8-head run of the same seed: far worse output -> small p.
    assert report.rows[2]["p_vs_8"] == "baseline"
    assert 0 < one["p_vs_8"] < 0.05 and 0 < one["p_vs_8_seed1"] < 0.05

    rows = list(csv.DictReader((sweep / "ablation.csv").open()))
    assert [r["heads"] for r in rows] == ["1", "4", "8"]
    assert float(rows[1]["bleu_mean"]) == pytest.approx(25.5)
    assert rows[1]["bleu_seed2"] == "26"
    md = (sweep / "ablation.md").read_text()
    assert "21.00 ± 1.41" in md and "heads=16,seed=1`: failed" in md
    assert "heads=16,seed=2`: not run" in md and "WARNING" not in md
    assert (sweep / "ablation.png").stat().st_size > 0


def test_the_report_counts_degenerate_heads_as_integers(sweep):
    """A mean over seeds of whole counts: "0 of 6", not "0.0 of 6"."""
    write_report(sweep, bootstrap_samples=10)
    md = (sweep / "ablation.md").read_text()
    assert "| 0 of 6 |" in md and "| 1 of 24 |" in md and "| 2 of 48 |" in md
    assert ".0 of " not in md


def test_single_seed_rows_have_no_std(tmp_path):
    make_job(tmp_path, 4, 1, 25.0)
    make_job(tmp_path, 8, 1, 27.0)
    report = build_report(tmp_path, bootstrap_samples=100)
    assert report.rows[0]["bleu_std"] is None and report.missing == [] and not report.failed


def test_dev_bleu_is_the_scored_checkpoints(tmp_path):
    """The test set was scored with averaged.pt where it won on dev: the row's dev BLEU is then
    averaged.pt's, not best.pt's, so both columns describe the same weights."""
    averaged = {"scored_checkpoint": "averaged", "averaged_dev_bleu": 40.0}
    make_job(tmp_path, 8, 1, 27.0, **averaged)  # dev_bleu (best.pt's) = 28.0
    make_job(tmp_path, 8, 2, 27.0, scored_checkpoint="best", averaged_dev_bleu=20.0)
    row = build_report(tmp_path, bootstrap_samples=100).rows[0]
    assert row["dev_bleu_mean"] == pytest.approx((40.0 + 28.0) / 2)


def test_jobs_differing_beyond_the_axes_warn_but_not_in_how_they_ran(tmp_path):
    """A study split over commands with other thread counts or caches is one experiment (the
    settings' mechanics keys, also by their older trainer.* names); a job trained with another
    learning rate is not, and the report says so."""
    make_job(tmp_path, 4, 1, 25.0, extra_overrides=("runtime.num_threads=1", "trainer.device=cpu"))
    make_job(tmp_path, 8, 1, 27.0, extra_overrides=("data.cache_dir=/tmp/c", "trainer.resume=true"))
    assert build_report(tmp_path, bootstrap_samples=100).warnings == []
    make_job(tmp_path, 16, 1, 26.0, extra_overrides=("optim.lr=1e-3",))
    (warning,) = build_report(tmp_path, bootstrap_samples=100).warnings
    assert "differ in more than heads and seed" in warning and "optim.lr" in warning


def test_unequal_parameter_counts_fail_loudly(tmp_path, caplog, capsys):
    make_job(tmp_path, 4, 1, 25.0, params=1000)
    make_job(tmp_path, 8, 1, 27.0, params=1200)
    with caplog.at_level(logging.WARNING, logger="translate.ablation.report"):
        report = write_report(tmp_path, bootstrap_samples=100)
    assert not report.params_equal
    assert "PARAMETER COUNTS DIFFER" in caplog.text and "heads=8: 1,200" in caplog.text
    assert "> **WARNING: PARAMETER COUNTS DIFFER" in (tmp_path / "ablation.md").read_text()
    # The command-line report says so on stderr and exits non-zero (after writing the report).
    from translate.ablation import report as script

    assert script.main([str(tmp_path), "--bootstrap-samples", "100"]) == 1
    assert "PARAMETER COUNTS DIFFER" in capsys.readouterr().err
    assert script.main([str(tmp_path / "nope")]) == 2


def test_expected_jobs_expand_config_and_command_line_sweeps(tmp_path):
    write_multirun_yaml(tmp_path, {"heads": "1,4,8,16", "seed": "1,2,3,4,5"}, ["seed=1", "x=2"])
    keys, jobs = expected_jobs(tmp_path)
    assert keys == ["heads"]  # seed=1 on the command line overrides the config's sweep
    assert [j["heads"] for j in jobs] == ["1", "4", "8", "16"]


def _hydra_config(tmp_path, mode="MULTIRUN", config_name="train", job="heads=4,seed=1"):
    return OmegaConf.create(
        {
            "hydra": {
                "mode": mode,
                "job": {"config_name": config_name},
                "runtime": {"cwd": str(tmp_path), "output_dir": str(tmp_path / "sweep" / job)},
                "sweep": {"dir": "sweep", "subdir": job},
            }
        }
    )


def test_callback_records_a_failed_job_and_writes_the_report(tmp_path):
    from hydra.core.utils import JobReturn, JobStatus

    make_job(tmp_path / "sweep", 8, 1, 27.0)
    failed = make_job(tmp_path / "sweep", 4, 1, None)
    callback = AblationReportCallback(bootstrap_samples=100)
    ret = JobReturn(status=JobStatus.FAILED, _return_value=ValueError("heads=3 is bad"))
    callback.on_job_end(_hydra_config(tmp_path), ret)
    assert ret.status == JobStatus.FAILED  # not a user error: Hydra's traceback stays
    assert "ValueError: heads=3 is bad" in (failed / "error.txt").read_text()
    md = (tmp_path / "sweep" / "ablation.md").read_text()
    assert "heads=4,seed=1`: failed: ValueError: heads=3 is bad" in md
    # Single runs and other commands' multiruns are left alone.
    (tmp_path / "sweep" / "ablation.md").unlink()
    callback.on_multirun_end(_hydra_config(tmp_path, "RUN"))
    callback.on_multirun_end(_hydra_config(tmp_path, config_name="evaluate"))
    assert not (tmp_path / "sweep" / "ablation.md").exists()
    with pytest.raises(SystemExit) as stopped:  # the failed job: the sweep's one closing line
        callback.on_multirun_end(_hydra_config(tmp_path))
    assert stopped.value.code == 2
    assert (tmp_path / "sweep" / "ablation.md").exists()


def test_heads_ablation_preset_declares_the_sweep_on_the_iwslt_recipe():
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose("train", ["experiment=heads_ablation"], return_hydra_config=True)
        iwslt = compose("train", ["experiment=iwslt2017"])
    assert dict(cfg.hydra.sweeper.params) == {"heads": "1,4,8,16", "seed": "1,2,3,4,5"}
    assert cfg.data.source == "iwslt2017" and cfg.model.d_model == 512
    assert cfg.trainer.max_steps == iwslt.trainer.max_steps and cfg.optim == iwslt.optim
    callbacks = cfg.hydra.callbacks.ablation_report
    assert callbacks._target_ == "translate.sweeps.AblationReportCallback"


@pytest.mark.slow
def test_a_tiny_real_sweep_writes_the_report_despite_a_failed_job(tmp_path, cache_dir):
    """heads=1,3,4 through Hydra's multirun: heads=3 does not divide d_model=32 and fails;
    heads=4 still runs, the report has 2 rows, and the sweep ends with one line naming the
    failed job and why, exit 2 (before: Hydra's 25-line traceback of the UserError, exit 1)."""
    # An untrained model decodes to the length limit: keep that short (4 tokens).
    shrink = [o for o in TINY if not o.startswith("heads=")]
    shrink += ["trainer.max_steps=4", "decode.max_len_a=0", "decode.max_len_b=4"]
    # Name the job dirs as a real sweep's (heads=1, ...): leave the shrinking out of the names.
    hidden = ["experiment", "data.cache_dir", *(o.split("=")[0] for o in shrink)]
    command = [
        sys.executable,
        "-m",
        "translate.train",
        "-m",
        *shrink,
        "heads=1,3,4",
        f"data.cache_dir={cache_dir}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"hydra.job.config.override_dirname.exclude_keys=[{','.join(hidden)}]",
    ]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]  # the failed job fails the sweep
    assert "Traceback" not in done.stderr + done.stdout
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [line for line in done.stderr.splitlines() if line.strip()][-1:]
    assert errors[0].startswith("error: 1 of 3 sweep jobs failed (heads=3: model.d_model=32 is")
    assert str(tmp_path / "sweep" / "ablation.md") in errors[0]
    sweep = tmp_path / "sweep"
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir() and p.name != MARKS) == [
        "heads=1",
        "heads=3",
        "heads=4",
    ]
    rows = list(csv.DictReader((sweep / "ablation.csv").open()))
    assert [r["heads"] for r in rows] == ["1", "4"], done.stderr[-2000:]
    assert all(r["params"] == rows[0]["params"] for r in rows)
    md = (sweep / "ablation.md").read_text()
    assert "not divisible by heads=3" in md and "failed" in md
    assert "entropy" in md and (sweep / "ablation.png").is_file()
    _speed_then_report_again(sweep)


def _speed_then_report_again(sweep: Path) -> None:
    """What the report says to do next, on a sweep without an 8-head job: time the models side
    by side, then write the report again (issue 31: a log-scale ValueError from the figure,
    and ablation.md/.csv not rewritten). The 4-head row is the baseline, and says so."""
    import torch
    from test_speed import TINY_SPEED

    from translate.ablation import report, speed

    threads = torch.get_num_threads()  # the speed command sets 1 (its default)
    assert speed.main([str(sweep), *TINY_SPEED, "--device", "cpu", "--no-ct2"]) == 0
    torch.set_num_threads(threads)
    speed = json.loads((sweep / "ablation_speed.json").read_text())
    assert speed["baseline_heads"] == 4
    assert [r["latency_greedy_ms_vs_4"] for r in speed["heads"]][1] == 1.0
    for name in ("ablation.csv", "ablation.md", "ablation.png"):
        (sweep / name).unlink()
    assert report.main([str(sweep), "--bootstrap-samples", "100"]) == 0
    rows = list(csv.DictReader((sweep / "ablation.csv").open()))
    assert [(r["heads"], r["p_vs_4_welch"]) for r in rows] == [("1", ""), ("4", "baseline")]
    assert float(rows[0]["latency_greedy_ms_vs_4"]) > 0 and rows[0]["p_vs_4"]
    md = (sweep / "ablation.md").read_text()
    assert "**Baseline:** no finished 8-head run: the 4-head row, the largest head count" in md
    assert "(x) = ratio to the 4-head row" in md and "p vs 8" not in md
    assert (sweep / "ablation.png").stat().st_size > 0


def test_a_report_written_again_tests_only_the_pairs_that_changed(tmp_path, monkeypatch):
    """The sweep writes the report after every job: each paired bootstrap is run once per
    pair of hypothesis files, and a changed file is tested anew."""
    import translate.metrics
    from translate.ablation import stats

    stats._paired_p.cache_clear()  # a test before this one may have run these pairs
    calls = []
    real = translate.metrics.paired_bootstrap
    monkeypatch.setattr(
        translate.metrics, "paired_bootstrap", lambda *a, **kw: calls.append(1) or real(*a, **kw)
    )
    for heads in (4, 8):
        make_job(tmp_path, heads, 1, 25.0 + heads)
    first = write_report(tmp_path, bootstrap_samples=97).rows[0]["p_vs_8"]
    assert len(calls) == 1
    assert write_report(tmp_path, bootstrap_samples=97).rows[0]["p_vs_8"] == first
    assert len(calls) == 1
    hyp = tmp_path / "heads=4,seed=1" / "test.hyp.txt"
    hyp.write_text("".join(r + "\n" for r in REFS))  # now as good as the baseline
    assert write_report(tmp_path, bootstrap_samples=97).rows[0]["p_vs_8"] == 1.0
    assert len(calls) == 2
