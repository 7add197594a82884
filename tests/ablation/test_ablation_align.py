"""Alignment heads of a sweep's models (``python -m translate.ablation align``) and the report's
best-head AER column taken from its ``ablation_align.json``."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from test_speed import _speed_job

from translate.ablation import align
from translate.ablation.figure import ablation_figure
from translate.ablation.report import write_report
from translate.ablation.results import ALIGN_FILE
from translate.checkpoint import load_checkpoint

TINY_ALIGN = ["--sentences", "4", "--silver-train-pairs", "200", "--device", "cpu"]


@pytest.fixture
def align_sweep(tmp_path, trained_run) -> Path:
    """heads 1 (seed 1) and 2 (seeds 1, 2: the same weights) finished; heads=4 failed."""
    pytest.importorskip("eflomal", reason='silver alignments need pip install -e ".[align]"')
    _, results = trained_run
    sweep = tmp_path / "sweep"
    for heads, seed in ((1, 1), (2, 1), (2, 2)):
        _speed_job(sweep, load_checkpoint(results["checkpoint"]), heads, seed)
    failed = sweep / "heads=4,seed=1" / ".hydra"
    failed.mkdir(parents=True)
    (failed / "overrides.yaml").write_text("- heads=4\n- seed=1\n")
    return sweep


def _csv_header(sweep: Path) -> list[str]:
    with (sweep / "ablation.csv").open(encoding="utf-8") as f:
        return next(csv.reader(f))


def test_align_measures_every_head_of_every_finished_job_on_one_reference(align_sweep, capsys):
    write_report(align_sweep, bootstrap_samples=10)
    before = _csv_header(align_sweep)
    assert not (align_sweep / "ablation.png").exists()  # these jobs have no BLEU to plot
    assert align.main([str(align_sweep), *TINY_ALIGN]) == 0
    out = capsys.readouterr().out
    data = json.loads((align_sweep / ALIGN_FILE).read_text())
    assert data["reference"]["kind"] == "silver" and data["sentences"] == 4
    assert len(data["reference_links"]) == 4
    assert [j["name"] for j in data["jobs"]] == [
        "heads=1,seed=1",
        "heads=2,seed=1",
        "heads=2,seed=2",
    ]
    assert [n["name"] for n in data["not_measured"]] == ["heads=4,seed=1"]
    for job in data["jobs"]:
        assert len(job["heads_aer"]) == 2 * job["heads"]  # 2 decoder layers
        assert job["best_aer"] == min(h["aer"] for h in job["heads_aer"])
    # One reference for the whole sweep: equal weights measure equal, head by head.
    assert data["jobs"][1]["heads_aer"] == data["jobs"][2]["heads_aer"]
    assert out.splitlines()[-1].startswith("AER against silver alignments of 4 sentences")

    report = write_report(align_sweep, bootstrap_samples=10)
    two = next(r for r in report.rows if r["heads"] == 2)
    assert two["best_aer_mean"] == data["jobs"][1]["best_aer"] and two["best_aer_std"] == 0.0
    one = next(r for r in report.rows if r["heads"] == 1)
    assert one["best_aer_std"] is None  # one seed
    # The existing columns stay, in their order; the new ones come after them.
    after = _csv_header(align_sweep)
    assert after[: len(before)] == before
    assert after[len(before) :] == ["best_aer_mean", "best_aer_std", "aer_reference"]
    md = (align_sweep / "ablation.md").read_text()
    assert "best head AER (silver)" in md and "against **silver** alignments" in md
    assert f"{two['best_aer_mean']:.3f} ± 0.000" in md
    # The figure gains the AER panel, its only one here, labelled silver.
    assert (align_sweep / "ablation.png").stat().st_size > 0
    (panel,) = ablation_figure(report).axes
    assert "silver" in panel.get_title() and "silver" in panel.get_ylabel()


def test_a_report_without_the_file_says_how_to_get_it_and_one_of_another_sweep_is_left_out(
    align_sweep, tmp_path
):
    write_report(align_sweep, bootstrap_samples=10)
    md = (align_sweep / "ablation.md").read_text()
    assert "No AER column" in md and "python -m translate.ablation align" in md
    assert "best head AER" not in md
    other = {"sweep_dir": str(tmp_path / "elsewhere"), "jobs": []}
    (align_sweep / ALIGN_FILE).write_text(json.dumps(other))
    report = write_report(align_sweep, bootstrap_samples=10)
    assert any("measured another sweep" in w for w in report.warnings)
    assert "best_aer_mean" not in report.rows[0]


def test_a_short_gold_file_is_one_error_line(align_sweep, tmp_path, capsys):
    gold = tmp_path / "gold.align"
    gold.write_text("0-0\n0-0 1-1\n", encoding="utf-8")
    argv = [str(align_sweep), *TINY_ALIGN, "--alignments", str(gold)]
    assert align.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the alignments file") and len(err.splitlines()) == 1
    assert "has 2 lines for 4 analysed pairs" in err
    assert not (align_sweep / ALIGN_FILE).exists()
