"""The committed studies' CSVs (docs/ablation-multi30k*.csv) agree with their own per-seed
columns: each row's BLEU mean and standard deviation, and its confidence interval and
seed-level p-values where the file has them, recompute from its ``bleu_seed<N>`` values.
``python -m translate.ablation report <sweep dir>`` writes them (docs/ablation-multi30k.md)."""

from __future__ import annotations

import csv
import re
import statistics

import pytest
from conftest import ROOT

from translate.ablation.stats import CONFIDENCE, ci_of_mean, permutation_p, welch_p

CSVS = sorted((ROOT / "docs").glob("ablation-multi30k*.csv"))
TOL = 2e-3  # BLEU: the file's values are rounded to 6 significant digits
CI_COLUMN = re.compile(r"(?P<metric>\w+)_ci(?P<level>\d+)_(?P<end>low|high)")


def _table(path) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _per_seed(row: dict, metric: str = "bleu") -> list[float]:
    cells = (v for k, v in row.items() if re.fullmatch(rf"{metric}_seed\d+", k))
    return [float(v) for v in cells if v != ""]


def _number(cell: str) -> float | None:
    return None if cell == "" else float(cell)


def test_there_are_committed_studies():
    assert CSVS, "docs/ablation-multi30k*.csv not found"


@pytest.mark.parametrize("path", CSVS, ids=lambda p: p.name)
def test_means_and_standard_deviations_recompute_from_the_seeds(path):
    for row in _table(path):
        seeds = _per_seed(row)
        assert int(row["n"]) == len(seeds), row["heads"]
        assert float(row["bleu_mean"]) == pytest.approx(statistics.fmean(seeds), abs=TOL)
        std = statistics.stdev(seeds) if len(seeds) > 1 else None
        assert _number(row["bleu_std"]) == pytest.approx(std, abs=TOL), row["heads"]


@pytest.mark.parametrize("path", CSVS, ids=lambda p: p.name)
def test_confidence_intervals_recompute_from_the_seeds(path):
    """Every column with ``ci`` in its name is a bound of the interval of a metric whose
    per-seed values the file holds (an interval it cannot check is an error here)."""
    rows = _table(path)
    for column in (c for c in rows[0] if "ci" in c):
        match = CI_COLUMN.fullmatch(column)
        assert match, f"{column}: not <metric>_ci<level>_low/high"
        assert int(match["level"]) == round(100 * CONFIDENCE), column
        for row in rows:
            seeds = _per_seed(row, match["metric"])
            assert seeds, f"{column}: no {match['metric']}_seed<N> columns to recompute it from"
            low, high = ci_of_mean(seeds)
            expected = low if match["end"] == "low" else high
            assert _number(row[column]) == pytest.approx(expected, abs=TOL), column


@pytest.mark.parametrize("path", CSVS, ids=lambda p: p.name)
@pytest.mark.parametrize("test", [welch_p, permutation_p], ids=["welch", "permutation"])
def test_seed_level_p_values_recompute_from_the_seeds(path, test):
    """A file without the column is a one-seed study (the key/value-heads one), where no
    seed-level test can be run."""
    column = f"p_vs_8_{test.__name__.removesuffix('_p')}"
    rows = _table(path)
    if column not in rows[0]:
        assert all(len(_per_seed(row)) < 2 for row in rows), f"{path.name}: no {column}"
        return
    (base,) = [r for r in rows if r[column] == "baseline"]
    for row in (r for r in rows if r is not base):
        expected = test(_per_seed(row), _per_seed(base))
        assert _number(row[column]) == pytest.approx(expected, rel=1e-3, abs=1e-4), column
