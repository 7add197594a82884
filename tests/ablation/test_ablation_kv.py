"""The heads-ablation report of a grouped-query sweep (``-m heads=8 kv_heads=1,2,4,8``): one
row per (heads, kv_heads), parameter counts that rightly depend on kv_heads, the multi-head
8-head row as the baseline, and the plain heads sweep's report left as it was."""

from __future__ import annotations

import csv
import json

import pytest
from test_ablation import make_job
from test_speed import SPEED

from translate.ablation import speed as speed_command
from translate.ablation.report import write_report
from translate.ablation.results import SPEED_FILE, SPEED_METRICS, build_report
from translate.ablation.speed import heads_rows

# kv_heads -> (params, BLEU of seeds 1 and 2): fewer K/V heads, smaller k_proj / v_proj.
KV_SWEEP = {
    1: (912_896, (25.0, 25.4)),
    2: (925_184, (26.0, 26.2)),
    4: (949_760, (26.8, 27.0)),
    8: (998_912, (27.0, 27.5)),
}


@pytest.fixture
def kv_sweep(tmp_path):
    for kv, (params, bleus) in KV_SWEEP.items():
        for seed, bleu in zip((1, 2), bleus):
            make_job(tmp_path, 8, seed, bleu, params, kv_heads=kv)
    return tmp_path


def test_a_kv_sweep_has_one_row_per_kv_heads_with_its_parameters(kv_sweep):
    report = write_report(kv_sweep, bootstrap_samples=200)
    assert [(r["heads"], r["kv_heads"]) for r in report.rows] == [(8, 1), (8, 2), (8, 4), (8, 8)]
    assert [r["params"] for r in report.rows] == [p for p, _ in KV_SWEEP.values()]
    assert [r["n"] for r in report.rows] == [2, 2, 2, 2] and report.kv_axis
    assert report.rows[0]["bleu_mean"] == pytest.approx(25.2)
    # Counts that differ by kv_heads are what GQA does: no alarm, no other warning.
    assert report.params_equal and report.warnings == []
    assert "heads=8,kv_heads=1: 912,896" in report.params_message
    assert "depends on kv_heads, as grouped-query attention intends" in report.params_message
    # p-values against the multi-head row (kv_heads=8) of the same seed.
    assert report.rows[3]["p_vs_8"] == "baseline"
    for row in report.rows[:3]:
        assert 0 < row["p_vs_8"] < 0.05 and 0 < row["p_vs_8_seed2"] < 0.05

    md = (kv_sweep / "ablation.md").read_text()
    assert "| heads | kv heads | d_k | params | BLEU |" in md
    assert "| 8 | 2 | 8 | 925,184 | 26.10 ± 0.14 |" in md
    assert "WARNING" not in md and "PARAMETER COUNTS DIFFER" not in md
    assert "**Against the 8-head multi-head (kv_heads=8) row, across seeds" in md
    assert "| job | heads | kv heads | seed | status |" in md
    assert "| `heads=8,kv_heads=4,seed=2` | 8 | 4 | 2 | completed |" in md
    rows = list(csv.DictReader((kv_sweep / "ablation.csv").open()))
    assert [(r["heads"], r["kv_heads"]) for r in rows] == [("8", str(kv)) for kv in KV_SWEEP]
    assert list(rows[0])[:3] == ["heads", "kv_heads", "d_k"]
    assert (kv_sweep / "ablation.png").stat().st_size > 0


def test_an_old_results_json_without_kv_heads_is_multi_head(tmp_path):
    make_job(tmp_path, 8, 1, 27.0, params=998_912)  # written before GQA: no kv_heads key
    make_job(tmp_path, 8, 1, 26.0, params=925_184, kv_heads=2)
    report = build_report(tmp_path, bootstrap_samples=100)
    assert [(r["heads"], r["kv_heads"]) for r in report.rows] == [(8, 2), (8, 8)]
    assert report.rows[1]["p_vs_8"] == "baseline" and 0 < report.rows[0]["p_vs_8"] < 0.05
    assert report.params_equal and report.warnings == []  # not "several jobs, same seed"


def test_a_kv_sweep_without_the_multi_head_row_has_no_p_values(tmp_path):
    for kv in (1, 2):
        make_job(tmp_path, 8, 1, 25.0 + kv, params=KV_SWEEP[kv][0], kv_heads=kv)
    report = write_report(tmp_path, bootstrap_samples=100)
    assert report.baseline_heads is None
    assert "p_vs" not in (tmp_path / "ablation.csv").read_text()  # no columns, empty or not
    md = (tmp_path / "ablation.md").read_text()
    assert (
        "**Baseline:** no finished 8-head multi-head (kv_heads=8) run and no other multi-head "
        "row (kv_heads = heads): no p-values." in md
    )
    assert "p vs" not in md and "p seeds" not in md


def test_a_kv_sweep_still_alarms_when_equal_models_differ_in_size(tmp_path):
    make_job(tmp_path, 8, 1, 26.0, params=900, kv_heads=2)
    make_job(tmp_path, 8, 2, 26.0, params=950, kv_heads=2)  # same pair, other size
    make_job(tmp_path, 4, 1, 26.0, params=1000, kv_heads=4)
    make_job(tmp_path, 8, 1, 27.0, params=1200, kv_heads=8)  # multi-head, other size
    report = write_report(tmp_path, bootstrap_samples=100)
    assert not report.params_equal
    assert report.params_message.startswith(
        "PARAMETER COUNTS DIFFER (heads=4,kv_heads=4: 1,000; heads=8,kv_heads=2: 900, 950; "
        "heads=8,kv_heads=8: 1,200)"
    )
    assert "> **WARNING: PARAMETER COUNTS DIFFER" in (tmp_path / "ablation.md").read_text()


def test_a_plain_heads_sweep_shows_no_kv_column(tmp_path):
    for heads in (1, 4, 8):
        make_job(tmp_path, heads, 1, 20.0 + heads)
    make_job(tmp_path, 8, 2, 28.5, kv_heads=8)  # a GQA-era job, multi-head
    report = write_report(tmp_path, bootstrap_samples=100)
    assert [(r["heads"], r["kv_heads"]) for r in report.rows] == [(1, 1), (4, 4), (8, 8)]
    assert not report.kv_axis and report.params_equal
    md = (tmp_path / "ablation.md").read_text()
    assert "kv heads" not in md and "| heads | d_k | params | BLEU |" in md
    assert "| job | heads | seed | status |" in md and "every run has the same" in md
    assert "kv_heads" not in (tmp_path / "ablation.csv").read_text()


def _entry(name: str, heads: int, kv: int | None, scale: float) -> dict:
    entry = {"name": name, "heads": heads, "seed": 1}
    if kv is not None:  # files from before GQA have no kv_heads
        entry["kv_heads"] = kv
    return entry | {m: v * scale for m, v in SPEED[8].items()}


def test_speed_rows_are_per_kv_heads_with_ratios_to_the_multi_head_row():
    entries = [_entry("kv=1", 8, 1, 0.5), _entry("kv=2", 8, 2, 0.75), _entry("mha", 8, 8, 1.0)]
    rows = heads_rows(entries)
    assert [(r["heads"], r["kv_heads"], r["jobs"]) for r in rows] == [
        (8, 1, ["kv=1"]),
        (8, 2, ["kv=2"]),
        (8, 8, ["mha"]),
    ]
    assert rows[0]["latency_beam_ms_vs_8"] == pytest.approx(0.5)
    assert rows[2]["latency_beam_ms_vs_8"] == 1.0
    # Entries without kv_heads (older files) are multi-head and make the baseline.
    old = heads_rows([_entry("a", 4, None, 2.0), _entry("b", 8, None, 1.0)])
    assert [(r["heads"], r["kv_heads"]) for r in old] == [(4, 4), (8, 8)]
    assert old[0]["sentences_per_s_vs_8"] == pytest.approx(2.0)
    no_base = heads_rows([_entry("kv=1", 8, 1, 0.5)])
    assert no_base[0]["latency_beam_ms_vs_8"] is None


def _payload(entries: list[dict]) -> dict:
    machine = {"device_name": "Test GPU", "threads": 4, "date": "2026-11-30"}
    settings = {"rounds": 5, "sentences": 20, "batch_sentences": 200, "train_steps": 3}
    return {"machine": machine, "settings": {**settings, "precision": "bf16"},
            "peak_mem_mb": "CUDA allocator", "baseline_heads": 8, "jobs": entries,
            "heads": heads_rows(entries)}  # fmt: skip


def test_the_speed_table_and_report_columns_follow_kv_heads(kv_sweep):
    script = speed_command
    scale = {1: 0.5, 2: 0.6, 4: 0.8, 8: 1.0}
    entries = [_entry(f"heads=8,kv_heads={kv},seed={s}", 8, kv, x) for kv, x in scale.items()
               for s in (1, 2)]  # fmt: skip
    payload = _payload(entries)
    table = script.print_speed_table(payload)
    assert "with 8 kv heads" in table and "kv heads  jobs" in table
    plain = script.print_speed_table(_payload([_entry("a", 4, None, 2.0), _entry("b", 8, 8, 1.0)]))
    assert "kv" not in plain

    (kv_sweep / SPEED_FILE).write_text(json.dumps(payload))
    report = write_report(kv_sweep, bootstrap_samples=100)
    assert report.warnings == []
    assert [r["latency_beam_ms_vs_8"] for r in report.rows] == pytest.approx([0.5, 0.6, 0.8, 1])
    assert report.rows[0]["latency_beam_ms"] == pytest.approx(40.0)
    md = (kv_sweep / "ablation.md").read_text()
    assert "ratio to the 8-head multi-head (kv_heads=8) row" in md
    assert "| 12.5 (0.50x) | 40.0 (0.50x) |" in md
    assert set(SPEED_METRICS) <= set(report.rows[0])
