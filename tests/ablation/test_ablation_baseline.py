"""The heads-ablation report of a sweep without an 8-head row (issue 31 case 1): the baseline is
the largest head count the sweep has, the report says so, the p-value columns are named for
it, the figure leaves out the panels with nothing to show, and the tables are written whatever
the figure does."""

from __future__ import annotations

import csv
import json

import pytest
from test_ablation import make_job

from translate.ablation import report as report_command
from translate.ablation.figure import ablation_figure
from translate.ablation.report import write_report
from translate.ablation.results import SPEED_FILE, build_report
from translate.ablation.speed import heads_rows
from translate.ablation.stats import permutation_p, welch_p

SEEDS = (1, 2, 3)
# Test BLEU per head count, seeds 1-3.
BLEUS = {
    1: [20.0, 21.0, 20.5],
    2: [23.0, 22.0, 22.5],
    4: [25.0, 26.0, 25.5],
    16: [26.0, 27.5, 26.5],
}


def _sweep(root, heads: list[int]):
    for h in heads:
        for seed, bleu in zip(SEEDS, BLEUS[h]):
            make_job(root, h, seed, bleu)
    return root


def _csv(sweep) -> dict[str, dict]:
    return {r["heads"]: r for r in csv.DictReader((sweep / "ablation.csv").open())}


def _speed_file(sweep, heads: list[int], baseline: int | None) -> None:
    """ablation_speed.json with its rows' ratios to ``baseline`` heads: 8, as the speed script
    wrote it before, leaves a sweep without 8 heads with no ratio at all."""
    entries = [
        {"name": f"heads={h},seed={s}", "heads": h, "seed": s,
         "latency_greedy_ms": 10.0 + h, "latency_beam_ms": 30.0 + h, "sentences_per_s": 100.0,
         "train_tokens_per_s": 5000.0 / h, "peak_mem_mb": None}
        for h in heads for s in SEEDS
    ]  # fmt: skip
    payload = {
        "machine": {"device_name": "Test CPU", "threads": 1, "date": "2026-12-02"},
        "settings": {"rounds": 2, "sentences": 2, "batch_sentences": 4, "train_steps": 1,
                     "precision": "32"},
        "peak_mem_mb": "not measured on the CPU", "baseline_heads": baseline, "jobs": entries,
        "heads": heads_rows(entries, baseline),
    }  # fmt: skip
    (sweep / SPEED_FILE).write_text(json.dumps(payload))


def _titles(report) -> list[str]:
    import matplotlib.pyplot as plt

    fig = ablation_figure(report)
    plt.close(fig)
    return [ax.get_title() for ax in fig.axes]


def test_a_sweep_of_1_and_4_heads_compares_with_4_heads_and_says_so(tmp_path):
    """The issue's sweep: heads=1,4 with a speed file from before, whose ratios to 8 heads are
    all empty (before: a log-scale ValueError from the figure, and no .md or .csv)."""
    _speed_file(_sweep(tmp_path, [1, 4]), [1, 4], baseline=8)
    report = write_report(tmp_path, bootstrap_samples=100)
    assert report.baseline_heads == 4
    one, four = report.rows
    assert four["p_vs_4_welch"] == four["p_vs_4_permutation"] == four["p_vs_4"] == "baseline"
    assert one["p_vs_4_welch"] == pytest.approx(welch_p(BLEUS[1], BLEUS[4]))
    assert one["p_vs_4_permutation"] == pytest.approx(permutation_p(BLEUS[1], BLEUS[4]))
    assert one["p_vs_4"] == 1.0  # the bootstrap ran: make_job gives both the same output
    columns = next(csv.reader((tmp_path / "ablation.csv").open()))
    assert {"p_vs_4_welch", "p_vs_4_permutation", "p_vs_4", "p_vs_4_seed1"} <= set(columns)
    assert not [c for c in columns if c.startswith("p_vs_8")]
    assert _csv(tmp_path)["4"]["p_vs_4_welch"] == "baseline"

    md = (tmp_path / "ablation.md").read_text()
    assert "**Baseline:** no finished 8-head run: the 4-head row, the largest head count" in md
    assert "(`p_vs_4_welch`)" in md and "--baseline-heads N" in md
    assert "**Against the 4-head row, across seeds" in md and "- 1 head: -5.00 BLEU" in md
    assert "p vs 4 heads, seeds" in md and "p vs 8" not in md
    assert "no ratios: the file has no 8-head row" in md  # measured before: run it again
    assert (tmp_path / "ablation.png").stat().st_size > 0
    # Nothing to divide the latency by: that panel is left out, the others drawn.
    assert _titles(report) == ["Test BLEU (mean ± std over seeds)"]  # parameters: all equal


def test_a_speed_file_with_ratios_to_4_heads_draws_the_latency_panel(tmp_path):
    _speed_file(_sweep(tmp_path, [1, 4]), [1, 4], baseline=4)
    report = write_report(tmp_path, bootstrap_samples=100)
    assert report.rows[1]["latency_beam_ms_vs_4"] == 1.0
    assert report.rows[0]["latency_beam_ms_vs_4"] == pytest.approx(31.0 / 34.0)
    md = (tmp_path / "ablation.md").read_text()
    assert "(x) = ratio to the 4-head row" in md and "| 34.0 (1.00x) |" in md
    assert "Decoding latency, batch 1" in _titles(report)


def test_a_sweep_of_16_heads_alone_is_its_own_baseline(tmp_path):
    report = write_report(_sweep(tmp_path, [16]), bootstrap_samples=100)
    assert report.baseline_heads == 16 and report.warnings == []
    (row,) = report.rows
    assert row["p_vs_16_welch"] == "baseline"
    assert row["bleu_mean"] == pytest.approx(sum(BLEUS[16]) / 3)
    md = (tmp_path / "ablation.md").read_text()
    assert "**Baseline:** no finished 8-head run: the 16-head row" in md
    assert "Against the" not in md  # no other row to compare
    assert "| baseline | baseline |" in md
    assert (tmp_path / "ablation.png").stat().st_size > 0


def test_a_sweep_of_2_4_and_16_heads_compares_with_16_or_the_head_count_asked(tmp_path):
    report = write_report(_sweep(tmp_path, [2, 4, 16]), bootstrap_samples=100)
    assert report.baseline_heads == 16
    two, four, _ = report.rows
    assert two["p_vs_16_welch"] == pytest.approx(welch_p(BLEUS[2], BLEUS[16]))
    assert four["p_vs_16_welch"] == pytest.approx(welch_p(BLEUS[4], BLEUS[16]))
    md = (tmp_path / "ablation.md").read_text()
    assert "- 2 heads: -4.17 BLEU (3 against 3 seeds)" in md and "- 4 heads: -1.17 BLEU" in md

    script = report_command
    assert script.main([str(tmp_path), "--baseline-heads", "4", "--bootstrap-samples", "100"]) == 0
    rows = _csv(tmp_path)
    assert rows["4"]["p_vs_4_welch"] == "baseline" and "p_vs_16_welch" not in rows["4"]
    expected = welch_p(BLEUS[16], BLEUS[4])
    assert float(rows["16"]["p_vs_4_welch"]) == pytest.approx(expected, rel=1e-5)  # 6 digits
    md = (tmp_path / "ablation.md").read_text()
    assert "**Baseline:**" not in md  # the one asked for is there: nothing to explain
    assert "- 16 heads: +1.17 BLEU" in md and "- 2 heads: -3.00 BLEU" in md


def test_the_8_head_row_stays_the_baseline_where_the_sweep_has_it(tmp_path):
    make_job(tmp_path, 8, 1, 24.0)
    make_job(tmp_path, 16, 1, 26.0)
    report = build_report(tmp_path, bootstrap_samples=100)
    assert report.baseline_heads == 8 and report.rows[0]["p_vs_8_welch"] == "baseline"
    assert "p_vs_16" not in report.rows[1]


def test_without_anything_to_plot_the_tables_are_written_and_say_so(tmp_path, capsys):
    make_job(tmp_path, 4, 1, None)  # failed: no row, nothing to plot
    make_job(tmp_path, 16, 1, None)
    script = report_command
    assert script.main([str(tmp_path)]) == 0
    wrote = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("wrote ")]
    assert wrote == [f"wrote {tmp_path / 'ablation.csv'}", f"wrote {tmp_path / 'ablation.md'}"]
    md = (tmp_path / "ablation.md").read_text()
    assert "**WARNING: ablation.png not written: no finished job has anything to plot" in md
    assert (tmp_path / "ablation.csv").is_file() and not (tmp_path / "ablation.png").exists()


def test_a_figure_that_cannot_be_drawn_costs_only_the_figure(tmp_path, monkeypatch):
    _sweep(tmp_path, [1, 4])

    def broken(report):
        raise ValueError("Data cannot be log-scaled because all values are <= 0.")

    monkeypatch.setattr(report_command, "ablation_figure", broken)
    report = write_report(tmp_path, bootstrap_samples=100)
    assert [p.name for p in report.written] == ["ablation.csv", "ablation.md"]
    md = (tmp_path / "ablation.md").read_text()
    assert "ablation.png not written: drawing it failed (ValueError: Data cannot be" in md
    assert "| 1 | 64 | 1,000 | 20.50 ± 0.50 |" in md
    assert list(_csv(tmp_path)) == ["1", "4"] and not (tmp_path / "ablation.png").exists()
