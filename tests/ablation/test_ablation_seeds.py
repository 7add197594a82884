"""The heads-ablation report's seed-level statistics and provenance: a 95% interval and
seed-level p-values per row, a summary that says no more than they support, each job's commit
and machine, and the command-line report's one-line refusals (an unreadable results.json, a
folder that holds no sweep jobs)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest
from conftest import ROOT, assert_one_line_error, file_size_limit
from test_ablation import make_job

from translate.ablation.report import write_report

# The first, three-seed heads study's per-seed test BLEU (2026-11-30, replaced since).
STUDY = {4: [39.7311, 38.6124, 38.7103], 8: [37.9757, 38.0551, 37.9291]}
PROVENANCE = {
    "git_commit": "0123456789abcdef0123456789abcdef01234567",
    "git_dirty": False,
    "package_version": "0.1.0",
    "torch": "2.13.0+cpu",
    "cpu_capability": "AVX2",
    "device_name": "AMD EPYC 7B13 (2 logical CPUs)",
    "threads": 2,
}
MACHINE = "AMD EPYC 7B13 (2 logical CPUs), 2 threads, torch 2.13.0+cpu AVX2"


def _sweep(root, bleus: dict[int, list[float]], **kw):
    for heads, values in bleus.items():
        for seed, bleu in enumerate(values, 1):
            make_job(root, heads, seed, bleu, **kw)
    return root


def _verdict(md: str, label: str) -> str:
    (line,) = [ln for ln in md.splitlines() if ln.startswith(f"- {label}: ")]
    return line


def test_the_first_three_seed_study_shows_no_seed_level_difference(tmp_path):
    """4 against 8 heads with the first study's three seeds: the paired bootstrap finds the 4-head
    output better (p < 0.05), but three seeds a side cannot show it across seeds."""
    report = write_report(_sweep(tmp_path, STUDY), bootstrap_samples=100)
    four = report.rows[0]
    assert four["p_vs_8"] < 0.05  # test-set sampling only
    assert four["p_vs_8_permutation"] == pytest.approx(0.1)  # 2 of 20 splits: all seeds above
    assert 0.05 < four["p_vs_8_welch"] < 0.2
    md = (tmp_path / "ablation.md").read_text()
    verdict = _verdict(md, "4 heads")
    assert verdict.startswith("- 4 heads: +1.03 BLEU (3 against 3 seeds): no detectable")
    assert "cannot go below p = 0.100" in verdict
    assert "every seed" not in md and "real" not in md
    # What the tests measure is static text in the docs the report points to.
    assert "docs/ablation.md" in md
    assert "test-set sampling only" in (ROOT / "docs" / "ablation.md").read_text()


def test_five_seeds_a_side_can_show_a_difference_and_its_interval(tmp_path):
    bleus = {
        1: [38.2, 37.8, 38.1, 37.9, 38.3],  # within the 8-head seeds' spread
        4: [39.0, 39.2, 38.9, 39.1, 39.3],  # above every 8-head seed
        8: [38.0, 38.1, 37.9, 38.05, 37.95],
    }
    report = write_report(_sweep(tmp_path, bleus), bootstrap_samples=100)
    one, four, eight = report.rows
    assert four["p_vs_8_permutation"] == pytest.approx(2 / 252)
    assert four["p_vs_8_welch"] < 0.001 and one["p_vs_8_welch"] > 0.3
    assert eight["p_vs_8_welch"] == eight["p_vs_8_permutation"] == "baseline"
    assert four["bleu_ci95_low"] < four["bleu_mean"] < four["bleu_ci95_high"]
    assert eight["bleu_ci95_high"] < four["bleu_ci95_low"]
    md = (tmp_path / "ablation.md").read_text()
    assert "higher across seeds (Welch p = 0.000, permutation p = 0.008)" in _verdict(md, "4 heads")
    assert "no detectable difference across seeds" in _verdict(md, "1 head")
    rows = {r["heads"]: r for r in csv.DictReader((tmp_path / "ablation.csv").open())}
    assert float(rows["4"]["bleu_ci95_low"]) == pytest.approx(four["bleu_ci95_low"], rel=1e-5)
    assert rows["8"]["p_vs_8_welch"] == "baseline" and rows["4"]["p_vs_8"]  # bootstrap kept


def test_one_seed_has_empty_statistics_and_two_have_them(tmp_path):
    _sweep(tmp_path, {4: [25.0], 8: [27.0]})
    report = write_report(tmp_path, bootstrap_samples=100)
    four = report.rows[0]
    assert four["bleu_ci95_low"] is None and four["p_vs_8_welch"] is None
    assert four["p_vs_8_permutation"] is None
    assert "no seed-level test" in _verdict((tmp_path / "ablation.md").read_text(), "4 heads")
    (row4, _) = csv.DictReader((tmp_path / "ablation.csv").open())
    assert row4["bleu_ci95_low"] == row4["p_vs_8_welch"] == ""
    make_job(tmp_path, 4, 2, 26.0)
    make_job(tmp_path, 8, 2, 27.5)
    four = write_report(tmp_path, bootstrap_samples=100).rows[0]
    assert four["bleu_ci95_low"] < 25.5 < four["bleu_ci95_high"]
    # The observed split is the most extreme of the 6, with its mirror image: p = 2/6.
    assert four["p_vs_8_permutation"] == pytest.approx(1 / 3)


def test_each_job_has_its_commit_and_machine_and_a_mixed_sweep_says_so(tmp_path):
    _sweep(tmp_path, {4: [25.0, 26.0], 8: [27.0, 27.5]}, provenance=PROVENANCE)
    write_report(tmp_path, bootstrap_samples=100)
    (row4, _) = csv.DictReader((tmp_path / "ablation.csv").open())
    assert row4["commit_seed1"] == row4["commit_seed2"] == "012345678"
    assert row4["machine_seed2"] == MACHINE
    md = (tmp_path / "ablation.md").read_text()
    assert "WARNING" not in md and f"Code 012345678, on {MACHINE}." in md
    other = {**PROVENANCE, "git_commit": "f" * 40, "git_dirty": True}
    other.update(cpu_capability="AVX512", threads=1)
    make_job(tmp_path, 16, 1, 26.0, provenance=other)
    make_job(tmp_path, 16, 2, 26.0)  # from before provenance was recorded
    write_report(tmp_path, bootstrap_samples=100)
    lines = (tmp_path / "ablation.md").read_text().splitlines()
    assert lines[2].startswith(
        "> **WARNING: the jobs ran on 3 commits (012345678: 4 jobs; fffffffff+dirty: 1 job; "
        "not recorded: 1 job) and on 3 machines ("
    )
    assert "(2 logical CPUs), 1 thread, torch 2.13.0+cpu AVX512: 1 job" in lines[2]
    assert "Code 012345678" not in "\n".join(lines)


@pytest.fixture(scope="module")
def script():
    from translate.ablation import report

    return report


def test_an_unreadable_results_json_is_a_failed_job_in_one_line(tmp_path, script, capsys):
    _sweep(tmp_path, {4: [25.0, 26.0], 8: [27.0, 27.5]})
    broken = tmp_path / "heads=4,seed=2" / "results.json"
    broken.write_text(broken.read_text()[:-1])  # cut short, as by a full disk
    assert script.main([str(tmp_path), "--bootstrap-samples", "100"]) == 0
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("- `heads=4,seed=2`: failed: ")]
    assert line.startswith(f"- `heads=4,seed=2`: failed: {broken} is unreadable (")
    assert line.endswith("); fix it and report again") and "1 failed and 0 missing jobs" in out
    rows = list(csv.DictReader((tmp_path / "ablation.csv").open()))
    assert [(r["heads"], r["n"]) for r in rows] == [("4", "1"), ("8", "2")]


@pytest.mark.parametrize(
    "damage,said",
    [
        (lambda r: [r], "(not a JSON object)"),
        (lambda r: {**r, "bleu": "26.0"}, "(field 'bleu' is \"26.0\", not a number)"),
        (lambda r: {**r, "heads": None}, "(field 'heads' is null, not a whole number >= 1)"),
        (lambda r: {**r, "steps": 1.5}, "(field 'steps' is 1.5, not a whole number >= 0)"),
    ],
    ids=["a list", "bleu as text", "heads null", "steps a fraction"],
)
def test_a_results_json_not_as_training_writes_it_is_a_failed_job(
    tmp_path, script, capsys, damage, said
):
    """Before: a TypeError traceback from deep in the report (a hand-edited file)."""
    _sweep(tmp_path, {4: [25.0, 26.0], 8: [27.0, 27.5]})
    edited = tmp_path / "heads=4,seed=2" / "results.json"
    edited.write_text(json.dumps(damage(json.loads(edited.read_text()))))
    assert script.main([str(tmp_path), "--bootstrap-samples", "100"]) == 0
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("- `heads=4,seed=2`: failed: ")]
    assert f"{edited} is not as training writes it {said}; fix it and report again" in line
    rows = list(csv.DictReader((tmp_path / "ablation.csv").open()))
    assert [(r["heads"], r["n"]) for r in rows] == [("4", "1"), ("8", "2")]


ALIGN = {
    "sentences": 4,
    "reference": {"kind": "silver", "origin": "eflomal", "split": "test"},
    "jobs": [{"name": "heads=4,seed=1", "heads": 4, "best_aer": 0.4}],
}


@pytest.mark.parametrize(
    "file,content,said",
    [
        ("ablation_align.json", [ALIGN], "(not a JSON object): no AER column"),
        ("ablation_align.json", {**ALIGN, "reference": "silver"}, "(field 'reference' is \"silv"),
        (
            "ablation_align.json",
            {**ALIGN, "jobs": [{"name": "heads=4,seed=1", "heads": 4}]},
            "(an entry of 'jobs': no field 'best_aer'): no AER column",
        ),
        ("ablation_speed.json", {"jobs": [], "heads": [1]}, "(no field 'baseline_heads')"),
        (
            "ablation_speed.json",
            {"jobs": [], "heads": [1], "baseline_heads": 8},
            "(an entry of 'heads': no object): no speed columns",
        ),
    ],
    ids=["align a list", "reference text", "no best_aer", "no baseline", "a speed row number"],
)
def test_a_measurement_file_not_as_its_command_writes_it_is_left_out_with_a_warning(
    tmp_path, file, content, said
):
    """Before: a KeyError or AttributeError traceback from the report (a hand-edited file)."""
    _sweep(tmp_path, {4: [25.0, 26.0], 8: [27.0, 27.5]})
    (tmp_path / file).write_text(json.dumps(content))
    report = write_report(tmp_path, bootstrap_samples=10)
    (warning,) = [w for w in report.warnings if w.startswith(str(tmp_path / file))]
    assert f"{tmp_path / file} is not as its command writes it {said}" in warning
    assert "python -m translate.ablation" in warning


def test_a_damaged_overrides_yaml_is_a_failed_job(tmp_path, script, capsys):
    """Before: yaml's ParserError traceback."""
    _sweep(tmp_path, {4: [25.0, 26.0], 8: [27.0, 27.5]})
    overrides = tmp_path / "heads=4,seed=2" / ".hydra" / "overrides.yaml"
    overrides.parent.mkdir(exist_ok=True)
    overrides.write_text("[heads=4, seed=2")
    assert script.main([str(tmp_path), "--bootstrap-samples", "100"]) == 0
    out = capsys.readouterr().out
    assert f"failed: {overrides} is unreadable (" in out


def test_a_figure_the_disk_refuses_after_the_tables_says_they_were_replaced(tmp_path):
    """Before: 'could not write …/ablation.png: …; nothing was replaced', after ablation.csv and
    ablation.md had been. A real file-size limit that the tables fit and the figure does not."""
    _sweep(tmp_path, {4: [25.0, 26.0], 8: [27.0, 27.5]})
    proc = subprocess.run(
        [sys.executable, "-m", "translate.ablation", "report", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        preexec_fn=file_size_limit(16 * 1024),
    )  # fmt: skip
    assert_one_line_error(
        proc,
        f"could not write {tmp_path / 'ablation.png'} (File too large) after ablation.csv and "
        "ablation.md had been replaced by the new report; ablation.png is still the earlier one",
        f"then run python -m translate.ablation report {tmp_path}",
    )
    assert "nothing was replaced" not in proc.stderr
    assert "| 4 |" in (tmp_path / "ablation.md").read_text()  # the new tables are there
    assert not (tmp_path / "ablation.png").exists()


def test_a_hand_edited_report_file_stops_the_report_before_any_file_is_replaced(tmp_path):
    """A hand-edited ablation.md (before: ablation.csv replaced, then the .md refused, so the
    two disagreed): every file is checked first; the refusal names the edited one."""
    _sweep(tmp_path, {4: [25.0, 26.0], 8: [27.0, 27.5]})
    report = [sys.executable, "-m", "translate.ablation", "report", str(tmp_path)]
    assert subprocess.run(report, cwd=ROOT, capture_output=True, timeout=300).returncode == 0
    with open(tmp_path / "ablation.md", "a") as f:
        f.write("my notes\n")
    before = {name: (tmp_path / name).read_bytes() for name in ("ablation.csv", "ablation.md")}
    make_job(tmp_path, 8, 3, 28.0)  # a new job: every file would change
    proc = subprocess.run(report, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert_one_line_error(proc, f"{tmp_path / 'ablation.md'} is an ablation report output changed")
    assert {name: (tmp_path / name).read_bytes() for name in before} == before


def test_a_folder_without_sweep_jobs_is_refused_and_nothing_written(tmp_path, script, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    run = make_job(tmp_path, 8, 1, 27.0)  # one run's dir: results.json at its top
    before = sorted(p.name for p in run.iterdir())
    for folder, said in ((empty, "holds no sweep jobs"), (run, "it is a single run")):
        assert script.main([str(folder)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"error: {folder} holds no sweep jobs")
        assert said in err and "nothing written" in err
    assert list(empty.iterdir()) == [] and sorted(p.name for p in run.iterdir()) == before
