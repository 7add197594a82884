"""``python -m translate.bench.scale``'s machinery on a small generated corpus: the data stages run
in processes of their own and land in the JSON, a second run of other stages keeps the first's
sections, and the host-side arithmetic (where an update's time goes, growth exponents). No timing
assertions: numbers from a shared CPU mean nothing here."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from scale_fixture import ROOT, make_corpus

from translate.bench import scale_host, scale_report


def rehearse(corpus, work, out, *stages: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable, "-m", "translate.bench.scale", "--data", str(corpus),
        "--work", str(work), "--json", str(out), "--stages", ",".join(stages),
        "--threads", "1", "--sample-sentences", "1000", "--sync-updates", "2",
        "--override", "data.tokenizer.vocab_size=600",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.mark.slow
def test_data_stages_then_syncs_fill_one_json(tmp_path):
    corpus = make_corpus(tmp_path / "corpus", pairs=1500, test_pairs=30)
    out = tmp_path / "scale.json"
    rehearse(corpus, tmp_path / "work", out, "tokenizer", "data")
    stages = json.loads(out.read_text())["stages"]
    full, sampled = stages["tokenizer"]["all"], stages["tokenizer"]["sampled"]
    assert (full["input_sentence_size"], sampled["input_sentence_size"]) == (0, 1000)
    assert full["sentences"] == 3000 and full["vocab_size"] == 600
    for run in (full, sampled):
        assert run["peak_rss_mb"] >= run["rss_before_training_mb"] > 0
        assert set(run["dev_subwords_per_sentence"]) == {"de", "en"}
    cold, cached = stages["data"]["cold"], stages["data"]["cached"]
    # The data stage reused the tokenizer stage's model and encoded every split itself once.
    assert cold["tokenizer_cached"] and cold["encoded_files_cached"] == 0
    assert cached["encoded_files_cached"] == 3
    assert cold["splits"]["train"]["pairs"] == 1500 and cold["splits"]["test"]["pairs"] == 30
    assert cold["encoded_mb"] > 0 and cold["batches_per_epoch"] > 0

    proc = rehearse(corpus, tmp_path / "work", out, "syncs")
    document = json.loads(out.read_text())
    assert {"tokenizer", "data", "syncs"} <= set(document["stages"])  # the first run's kept
    rows = document["stages"]["syncs"]["rows"]
    in_step = [r for r in rows if r["where"].startswith("translate/training/step.py")]
    assert in_step and all(r["sync_on_cuda"] for r in in_step)
    # The loss, NLL and gradient norm the loop must read, in one read.
    assert [(r["op"], r["per_update"]) for r in in_step] == [("tolist", 1)]
    copies = [r for r in rows if r["where"].endswith(" to_device")]  # pinned on a GPU
    assert copies and not any(r["sync_on_cuda"] for r in copies)
    assert not any(r["sync_on_cuda"] for r in rows if r["op"] == "nonzero")  # on the host
    summary = document["summary"]
    assert summary["syncs_per_update"] == sum(r["per_update"] for r in rows if r["sync_on_cuda"])
    assert summary["data_peak_rss_mb"] == max(run["peak_rss_mb"] for run in (full, sampled, cold))
    assert "first_update_cold_s = -" in proc.stdout  # not run: said, not made up


def test_where_an_update_goes_is_the_steady_window_split_by_part():
    host = scale_host
    events = []
    for i in range(6):  # update i: 1 ms of batches (0.5 of it collate), then 8 ms of step
        t = 10.0 * i
        events += [("batches", t, 0.001), ("collate", t + 0.0002, 0.0005)]
        events += [("step", t + 0.002, 0.008), ("log", t + 0.0101, 0.0002)]
    out = host._breakdown(events, skip=1)
    assert out["updates"] == 4  # updates 2..5, from the end of update 1 to the end of the last
    assert out["updates_per_s"] == pytest.approx(0.1)
    parts = {r["part"]: r["ms_per_update"] for r in out["rows"]}
    assert parts["step"] == pytest.approx(8.0) and parts["batches"] == pytest.approx(1.0)
    assert parts["collate"] == pytest.approx(0.5)  # inside batches: not counted twice
    assert parts["other (the loop itself)"] == pytest.approx(10_000 - 8 - 1 - 0.2)
    assert out["loop_updates_per_s"] == pytest.approx(4 / (40 - 0.032))
    with pytest.raises(ValueError, match="too few"):
        host._breakdown(events, skip=5)


def test_growth_exponent_is_one_for_a_linear_stage_and_two_for_a_quadratic_one():
    report = scale_report
    scaling = {
        str(n): {"tokenizer": {"train_s": 0.01 * n}, "data": {"load_s": 1e-6 * n * n}}
        for n in (1000, 4000, 8000)
    }
    scaling["meta"] = {"date": "today"}
    assert [e for *_, e in report.growth(scaling, "tokenizer", "train_s")] == pytest.approx([1, 1])
    assert [e for *_, e in report.growth(scaling, "data", "load_s")] == pytest.approx([2, 2])
    assert report.summarize({"scaling": scaling})["scaling_worst_exponent"] == pytest.approx(2)
