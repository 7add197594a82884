"""Side-by-side speed of a sweep's models (``python -m translate.ablation speed``) and the report's
speed columns taken from it."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from conftest import ROOT, assert_one_line_error
from test_ablation import make_job

from translate.ablation import speed
from translate.ablation.report import write_report
from translate.ablation.results import CT2_METRICS, SPEED_FILE, busy_warning
from translate.checkpoint import load_checkpoint, save_checkpoint

TINY_SPEED = ["--rounds", "2", "--sentences", "2", "--batch-sentences", "4", "--train-steps", "1"]


@pytest.fixture(autouse=True)
def quiet_machine(monkeypatch):
    """The speed command's threads back as they were after each test (it sets 1), and no busy
    warning: a few milliseconds timed on a shared test machine spread widely."""
    threads = torch.get_num_threads()
    monkeypatch.setattr("translate.ablation.results.BUSY_SPREAD", float("inf"))
    yield
    torch.set_num_threads(threads)


def _speed_job(sweep: Path, ckpt: dict, heads: int, seed: int, beam: int = 2) -> None:
    """A finished job whose checkpoint is the shared tiny run's weights with ``heads`` heads:
    d_model stays 32, so the same weights fit (only d_k changes); decoding with a ``beam``."""
    job = sweep / f"heads={heads},seed={seed}"
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text(
        yaml.safe_dump([f"heads={heads}", f"seed={seed}"])
    )
    ckpt["config"]["model"].update(num_heads=heads, num_kv_heads=heads)
    ckpt["config"]["decode"].update(beam_size=beam)
    save_checkpoint(ckpt, job / "checkpoints" / "best.pt")
    results = {"status": "completed", "heads": heads, "seed": seed, "params": 1,
               "checkpoint": str(job / "checkpoints" / "best.pt"), "latency_ms": 999.0}  # fmt: skip
    (job / "results.json").write_text(json.dumps(results))


@pytest.fixture
def speed_sweep(tmp_path, trained_run) -> Path:
    """heads 1, 2 (seed 1) and 8 (seeds 1, 2) finished; heads=4 failed (no results.json)."""
    run_dir, results = trained_run
    sweep = tmp_path / "sweep"
    for heads, seed in ((1, 1), (2, 1), (8, 1), (8, 2)):
        _speed_job(sweep, load_checkpoint(results["checkpoint"]), heads, seed)
    (sweep / "heads=4,seed=1" / ".hydra").mkdir(parents=True)
    return sweep


def test_speed_json_has_every_job_and_metric_from_interleaved_rounds(
    speed_sweep, monkeypatch, capsys
):
    visits = []
    measure_one = speed.measure_one

    def recording(sj, metric, settings):
        visits.append((metric, sj.job.name))
        return measure_one(sj, metric, settings)

    monkeypatch.setattr(speed, "measure_one", recording)
    argv = [str(speed_sweep), *TINY_SPEED, "--device", "cpu", "--no-ct2"]
    assert speed.main(argv) == 0
    assert torch.get_num_threads() == 1  # the default, recorded in the file
    out, err = capsys.readouterr()
    data = json.loads((speed_sweep / SPEED_FILE).read_text())
    assert data["machine"]["threads"] == 1
    timed = [m for m in speed.TIMED if m not in CT2_METRICS]
    assert data["metrics"] == timed and data["warnings"] == []

    names = ["heads=1,seed=1", "heads=2,seed=1", "heads=8,seed=1", "heads=8,seed=2"]
    assert [j["name"] for j in data["jobs"]] == names  # the failed heads=4 job is not there
    for job in data["jobs"]:
        for metric in timed:
            assert job[metric] > 0 and len(job["rounds"][metric]) == 2
            # The spread: the lowest and highest of its rounds.
            assert job[f"{metric}_min"] == min(job["rounds"][metric])
            assert job[f"{metric}_max"] == max(job["rounds"][metric])
        assert all(job[m] is None and job["rounds"][m] == [] for m in CT2_METRICS)
        assert job["peak_mem_mb"] is None and job["rounds"]["peak_mem_mb"] == [None, None]
    assert "cannot be attributed" in data["peak_mem_mb"]
    assert [j["heads"] for j in data["jobs"]] == [1, 2, 8, 8]
    assert {"device", "device_name", "torch", "threads", "date"} <= set(data["machine"])
    assert {"git_commit", "cpu_capability", "argv"} <= set(data["machine"])  # provenance
    assert data["settings"]["rounds"] == 2 and data["settings"]["sentences"] == 2

    # Each round visits every job once per metric, in an order rotated by one per round.
    rotated = [names, names[1:] + names[:1]]
    assert data["order"] == rotated
    per_round = len(timed) * len(names)
    # Progress: a line before each turn, counted, with its round, metric and job.
    lines = err.splitlines()
    assert (
        len(lines) == 2 * per_round
        and lines[0] == f"[ 1/{2 * per_round}] round 1, {timed[0]}: {names[0]}"
    )
    assert lines[-1] == f"[{2 * per_round}/{2 * per_round}] round 2, {timed[-1]}: {names[0]}"
    for r, order in enumerate(rotated):
        round_visits = visits[r * per_round : (r + 1) * per_round]
        for m, metric in enumerate(timed):
            turn = round_visits[m * len(names) : (m + 1) * len(names)]
            assert turn == [(metric, name) for name in order]

    rows = {r["heads"]: r for r in data["heads"]}
    assert sorted(rows) == [1, 2, 8] and rows[8]["seeds"] == [1, 2]
    eight = [j for j in data["jobs"] if j["heads"] == 8]
    # The row's spread is its rounds' (each round's median over the seeds), not its seeds'.
    by_round = zip(*(job["rounds"]["latency_greedy_ms"] for job in eight))
    assert rows[8]["latency_greedy_ms_max"] == pytest.approx(max(sum(r) / 2 for r in by_round))
    assert rows[8]["latency_beam_ms"] == pytest.approx(
        (eight[0]["latency_beam_ms"] + eight[1]["latency_beam_ms"]) / 2  # median of two
    )
    for metric in timed:
        assert rows[8][f"{metric}_vs_8"] == 1.0
        assert rows[1][f"{metric}_vs_8"] == pytest.approx(rows[1][metric] / rows[8][metric])
    assert rows[8]["peak_mem_mb_vs_8"] is None
    assert "(1.00x)" in out and f"wrote {speed_sweep / SPEED_FILE}" in out
    assert "CT2" not in out


def test_at_beam_size_1_beam_latency_is_neither_timed_nor_shown(tmp_path, trained_run, capsys):
    """Before, a greedy sweep timed greedy search twice and called one of them beam search
    (one head "6.52x" slower in beam search at a beam of 1)."""
    sweep = tmp_path / "sweep"
    for heads in (1, 8):
        _speed_job(sweep, load_checkpoint(trained_run[1]["checkpoint"]), heads, 1, beam=1)
    argv = [str(sweep), *TINY_SPEED, "--rounds", "1", "--device", "cpu", "--no-ct2"]
    assert speed.main(argv) == 0
    out = capsys.readouterr().out
    data = json.loads((sweep / SPEED_FILE).read_text())
    assert "latency_beam_ms" not in data["metrics"] and "latency_greedy_ms" in data["metrics"]
    assert all(job["latency_beam_ms"] is None for job in data["jobs"])
    assert "beam ms/sent" not in out and "greedy ms/sent" in out
    write_report(sweep, bootstrap_samples=10)
    assert "beam ms/sent" not in (sweep / "ablation.md").read_text()


def _spread_entry(name: str, rounds: list[float]) -> dict:
    return {
        "name": name,
        "latency_greedy_ms_min": min(rounds),
        "latency_greedy_ms_max": max(rounds),
    }


def test_a_busy_machine_is_named_in_one_line_from_the_rounds_spread(monkeypatch):
    monkeypatch.setattr("translate.ablation.results.BUSY_SPREAD", 0.5)
    quiet = [_spread_entry("a", [9.0, 9.5, 10.0]), _spread_entry("b", [9.0, 10.0])]
    assert busy_warning(quiet) is None
    assert busy_warning([{"name": "old file", "latency_greedy_ms": 9.0}]) is None
    busy = busy_warning([*quiet, _spread_entry("c", [48.0, 1547.0])])
    assert "\n" not in busy and "1 of 3 jobs" in busy
    assert "c, latency_greedy_ms from 48 to 1,547" in busy


def test_a_copied_sweep_times_only_its_own_checkpoints_and_lists_the_others(
    speed_sweep, tmp_path, capsys
):
    """Before, a copy whose checkpoint was missing timed the original sweep's, named by the
    absolute path in its results.json, without a word."""
    copy = Path(shutil.copytree(speed_sweep, tmp_path / "copy"))
    (copy / "heads=1,seed=1" / "checkpoints" / "best.pt").unlink()
    (copy / "heads=4,seed=1" / ".hydra" / "overrides.yaml").write_text("- heads=4\n- seed=1\n")
    argv = [str(copy), *TINY_SPEED, "--rounds", "1", "--device", "cpu", "--no-ct2"]
    assert speed.main(argv) == 0
    out = capsys.readouterr().out
    data = json.loads((copy / SPEED_FILE).read_text())
    timed = {j["name"]: j["checkpoint"] for j in data["jobs"]}
    assert sorted(timed) == ["heads=2,seed=1", "heads=8,seed=1", "heads=8,seed=2"]
    assert all(path == str(copy / name / "checkpoints" / "best.pt") for name, path in timed.items())
    gone = copy / "heads=1,seed=1" / "checkpoints" / "best.pt"
    original = speed_sweep / "heads=1,seed=1" / "checkpoints" / "best.pt"
    reasons = {j["name"]: j["reason"] for j in data["not_timed"]}
    assert reasons["heads=1,seed=1"] == (
        f"its checkpoint {gone} does not exist (results.json names {original}, outside this "
        "sweep dir, which is not timed)"
    )
    assert reasons["heads=4,seed=1"].startswith("it did not complete (no results.json")
    assert f"not timed: heads=1,seed=1: its checkpoint {gone} does not exist" in out
    # The report says why that job has no figures: timing it again cannot help (before: it
    # asked whether the job finished after the measurement, and to run speed again).
    warnings = " ".join(write_report(copy, bootstrap_samples=100).warnings)
    assert (
        f"no figures for heads=1,seed=1; it was not timed: its checkpoint {gone} does" in warnings
    )
    assert "finished after it was measured" not in warnings


def test_a_speed_file_of_another_sweep_is_left_out_of_the_report_with_a_warning(
    speed_sweep, tmp_path
):
    """``speed <sweepA> --json <sweepB>/ablation_speed.json``: before, sweep B's report showed
    sweep A's timings without a word."""
    other = Path(shutil.copytree(speed_sweep, tmp_path / "other"))
    argv = [str(speed_sweep), *TINY_SPEED, "--rounds", "1", "--device", "cpu", "--no-ct2"]
    assert speed.main([*argv, "--json", str(other / SPEED_FILE)]) == 0
    report = write_report(other, bootstrap_samples=100)
    assert report.speed is None and "ms/sent" not in (other / "ablation.md").read_text()
    said = [w for w in report.warnings if "speed file of another sweep" in w]
    assert len(said) == 1 and f"(it timed {speed_sweep.resolve()})" in said[0]
    assert f"translate.ablation speed {other}" in said[0]


def test_ctranslate2_latency_is_timed_beside_ours(speed_sweep, capsys):
    """Every job's checkpoint exported and timed in the same rounds, right after our latency;
    its medians, ratios to 8 heads and columns beside ours."""
    pytest.importorskip("ctranslate2")
    argv = [str(speed_sweep), *TINY_SPEED, "--rounds", "1", "--device", "cpu"]
    assert speed.main(argv) == 0
    data = json.loads((speed_sweep / SPEED_FILE).read_text())
    assert data["metrics"] == list(speed.TIMED)
    assert data["metrics"][2:4] == list(CT2_METRICS)  # right after our latency
    assert data["warnings"] == [] and data["machine"]["ctranslate2"]
    for job in data["jobs"]:
        assert all(job[m] > 0 and len(job["rounds"][m]) == 1 for m in CT2_METRICS)
    rows = {r["heads"]: r for r in data["heads"]}
    assert rows[8]["ct2_latency_beam_ms_vs_8"] == 1.0
    assert rows[1]["ct2_latency_greedy_ms_vs_8"] == pytest.approx(
        rows[1]["ct2_latency_greedy_ms"] / rows[8]["ct2_latency_greedy_ms"]
    )
    header = capsys.readouterr().out.splitlines()[1]
    assert "beam ms/sent (batch 1)  CT2 greedy ms/sent (batch 1)  CT2 beam" in header


def test_without_ctranslate2_the_speed_file_says_why(speed_sweep, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # as if it were not installed
    settings = speed.SpeedSettings(rounds=1, sentences=1, batch_sentences=2, device="cpu")
    payload, _ = speed.run_speed(speed_sweep, settings)
    assert "no CTranslate2 latency" in payload["warnings"][0]
    assert 'pip install -e ".[ct2]"' in payload["warnings"][0]
    assert CT2_METRICS.keys().isdisjoint(payload["metrics"])
    assert all(row["ct2_latency_greedy_ms"] is None for row in payload["heads"])
    assert "CT2" not in speed.print_speed_table(payload)


def test_training_steps_run_on_a_copy_of_the_decoding_model(speed_sweep):
    settings = speed.SpeedSettings(rounds=1, sentences=1, batch_sentences=2, device="cpu")
    jobs = speed.load_jobs(speed_sweep, settings, [])[:1]
    speed.prepare_inputs(jobs, settings, [])
    model = jobs[0].loaded.model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    speed.measure(jobs, settings)
    assert not model.training
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert jobs[0].values["train_tokens_per_s"][0] > 0


SPEED = {
    1: {"latency_greedy_ms": 40.0, "latency_beam_ms": 120.0, "sentences_per_s": 50.0,
        "train_tokens_per_s": 9000.0, "peak_mem_mb": 700.0},
    8: {"latency_greedy_ms": 25.0, "latency_beam_ms": 80.0, "sentences_per_s": 75.0,
        "train_tokens_per_s": 7000.0, "peak_mem_mb": 650.0},
}  # fmt: skip


# What a file written with CTranslate2's latency adds (none in an older one).
CT2_SPEED = {
    1: {"ct2_latency_greedy_ms": 12.0, "ct2_latency_beam_ms": 30.0},
    8: {"ct2_latency_greedy_ms": 10.0, "ct2_latency_beam_ms": 24.0},
}


def _speed_file(sweep: Path, heads: list[int], jobs: list[str], ct2: bool = False) -> None:
    rows, base = [], {**SPEED[8], **CT2_SPEED[8]}
    for h in heads:
        values = {**SPEED[h], **(CT2_SPEED[h] if ct2 else {})}
        row = {"heads": h, "jobs": [], "seeds": [], **values}
        row.update({f"{m}_vs_8": v / base[m] for m, v in values.items()})
        rows.append(row)
    machine = {"device_name": "Test GPU", "threads": 4, "date": "2026-11-30"}
    settings = {"rounds": 5, "sentences": 20, "batch_sentences": 200, "train_steps": 3}
    data = {"machine": machine, "settings": {**settings, "precision": "bf16"}, "heads": rows,
            "peak_mem_mb": "CUDA allocator", "baseline_heads": 8,
            "jobs": [{"name": n} for n in jobs]}  # fmt: skip
    (sweep / SPEED_FILE).write_text(json.dumps(data))


def test_report_takes_its_speed_columns_from_the_speed_file(tmp_path):
    for heads, bleu in ((1, 20.0), (8, 27.0)):
        make_job(tmp_path, heads, 1, bleu, bleu_greedy=bleu - 1)
    make_job(tmp_path, 8, 2, 27.5, bleu_greedy=26.5)
    _speed_file(tmp_path, [1, 8], ["heads=1,seed=1", "heads=8,seed=1"])
    report = write_report(tmp_path, bootstrap_samples=100)

    md = (tmp_path / "ablation.md").read_text()
    assert "| 40.0 (1.60x) | 120.0 (1.50x) | 50.0 (0.67x) | 9,000 (1.29x) | 700 (1.08x) |" in md
    assert "| 25.0 (1.00x) | 80.0 (1.00x) |" in md and "Test GPU" in md
    assert "10.0" not in md and "80.0 ± " not in md  # results.json's latency_ms: 10 x heads
    assert "| 700 (1.08x) | - |" in md  # a file from before the spread was recorded
    assert (
        "heads=8,seed=2" in report.warnings[0] and "translate.ablation speed" in report.warnings[0]
    )
    rows = list(csv.DictReader((tmp_path / "ablation.csv").open()))
    assert float(rows[0]["latency_beam_ms"]) == 120.0
    assert float(rows[0]["latency_greedy_ms_vs_8"]) == pytest.approx(1.6)
    assert float(rows[1]["train_tokens_per_s_vs_8"]) == 1.0
    assert not {"latency_ms_mean", "sentences_per_s_mean", "tokens_per_s_mean"} & set(rows[0])
    assert float(rows[1]["bleu_greedy_mean"]) == pytest.approx(26.25)
    # A file from before CTranslate2 was timed: no CT2 columns, not even empty ones.
    assert "CT2" not in md and not any("ct2" in column for column in rows[0])
    assert rows[0]["bleu_greedy_std"] == "" and float(rows[1]["bleu_greedy_std"]) > 0
    assert (tmp_path / "ablation.png").stat().st_size > 0


def test_report_shows_each_rows_round_spread_and_says_when_the_machine_was_busy(
    tmp_path, monkeypatch
):
    monkeypatch.setattr("translate.ablation.results.BUSY_SPREAD", 0.5)
    for heads, bleu in ((1, 20.0), (8, 27.0)):
        make_job(tmp_path, heads, 1, bleu)
    _speed_file(tmp_path, [1, 8], ["heads=1,seed=1", "heads=8,seed=1"])
    data = json.loads((tmp_path / SPEED_FILE).read_text())
    data["heads"][0] |= {"latency_greedy_ms_min": 36.0, "latency_greedy_ms_max": 45.0}
    data["jobs"][1] |= _spread_entry("heads=8,seed=1", [24.0, 80.0])
    (tmp_path / SPEED_FILE).write_text(json.dumps(data))
    report = write_report(tmp_path, bootstrap_samples=10)
    md = (tmp_path / "ablation.md").read_text()
    assert "| 700 (1.08x) | 25% |" in md  # 45 / 36 - 1
    (busy,) = [w for w in report.warnings if "machine was busy" in w]
    assert busy.startswith(SPEED_FILE) and "heads=8,seed=1, latency_greedy_ms from 24 to 80" in busy
    rows = list(csv.DictReader((tmp_path / "ablation.csv").open()))
    assert (
        float(rows[0]["latency_greedy_ms_max"]) == 45.0 and rows[1]["latency_greedy_ms_max"] == ""
    )


def test_report_shows_ctranslate2_latency_beside_ours_where_the_file_has_it(tmp_path):
    for heads, bleu in ((1, 20.0), (8, 27.0)):
        make_job(tmp_path, heads, 1, bleu, bleu_greedy=bleu - 1)
    _speed_file(tmp_path, [1, 8], ["heads=1,seed=1", "heads=8,seed=1"], ct2=True)
    write_report(tmp_path, bootstrap_samples=100)
    md = (tmp_path / "ablation.md").read_text()
    header = "beam ms/sent (batch 1) | CT2 greedy ms/sent (batch 1) | CT2 beam ms/sent (batch 1) |"
    assert header + " sent/s" in md
    assert "| 40.0 (1.60x) | 120.0 (1.50x) | 12.0 (1.20x) | 30.0 (1.25x) | 50.0 (0.67x) |" in md
    assert "CT2: CTranslate2 ? (float32)." in md  # what CT2 is: docs/ablation.md
    rows = list(csv.DictReader((tmp_path / "ablation.csv").open()))
    assert float(rows[0]["ct2_latency_beam_ms"]) == 30.0
    assert float(rows[0]["ct2_latency_greedy_ms_vs_8"]) == pytest.approx(1.2)


def test_without_a_speed_file_the_report_says_how_to_get_one(tmp_path):
    make_job(tmp_path, 4, 1, 25.0)
    make_job(tmp_path, 8, 1, 27.0)
    report = write_report(tmp_path, bootstrap_samples=100)
    md = (tmp_path / "ablation.md").read_text()
    assert report.speed is None and "No speed columns" in md
    assert f"`python -m translate.ablation speed {tmp_path}`" in md
    assert "ms/sent" not in md and "sent/s" not in md and "peak mem" not in md
    assert "latency_greedy_ms" not in (tmp_path / "ablation.csv").read_text()
    assert (tmp_path / "ablation.png").stat().st_size > 0


def test_a_bad_sweep_dir_is_one_line(tmp_path, capsys):
    proc = subprocess.run(
        [sys.executable, "-m", "translate.ablation", "speed", str(tmp_path / "nope")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert_one_line_error(proc, "does not exist")
    make_job(tmp_path, 4, 1, None)  # a failed job only
    assert speed.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no completed job" in err
