"""The heads-ablation report's figure (``ablation.png``): honest axes (latency as ratios, on a
range that holds 1.0 and does not magnify jitter), no panel for a constant, error bars only
where a row has two seeds or more, no beam line at a beam size of 1."""

from __future__ import annotations

import json

import pytest
from matplotlib.container import ErrorbarContainer
from test_ablation import make_job

from translate.ablation import figure
from translate.ablation.results import SPEED_FILE, build_report
from translate.ablation.speed import heads_rows
from translate.analysis.figures import pyplot

# Greedy latency rounds (ms) per head count: 1 head 2% slower than 8, within a few % jitter.
ROUNDS = {1: [10.1, 10.2, 10.4], 8: [9.9, 10.0, 10.1]}


def _speed_file(sweep, seeds, beam: int) -> None:
    entries = []
    for heads, rounds in ROUNDS.items():
        for seed in seeds:
            timed = {"latency_greedy_ms": rounds, "latency_beam_ms": [3 * v for v in rounds]}
            entry = {"name": f"heads={heads},seed={seed}", "heads": heads, "seed": seed}
            entry |= {"beam_size": beam, "rounds": timed}
            entry |= {m: sorted(v)[1] for m, v in timed.items()}
            entries.append(entry)
    payload = {"machine": {}, "settings": {}, "baseline_heads": 8, "jobs": entries}
    (sweep / SPEED_FILE).write_text(json.dumps(payload | {"heads": heads_rows(entries, 8)}))


def _figure(tmp_path, seeds=(1,), beam: int = 1, params=(1000, 1000)):
    for (heads, _), count in zip(ROUNDS.items(), params):
        for seed in seeds:
            make_job(tmp_path, heads, seed, 20.0 + heads + seed, params=count)
    _speed_file(tmp_path, seeds, beam)
    fig = figure.ablation_figure(build_report(tmp_path, bootstrap_samples=10))
    pyplot().close(fig)
    return fig, {ax.get_title().split(" (")[0]: ax for ax in fig.axes}


def _has_error_bars(ax) -> bool:
    return any(isinstance(c, ErrorbarContainer) for c in ax.containers)


def test_one_seed_a_row_draws_no_error_bars_and_equal_parameters_no_panel(tmp_path):
    fig, axes = _figure(tmp_path)
    assert list(axes) == ["Test BLEU", "Decoding latency, batch 1"]  # no "Parameters" panel
    assert fig.get_suptitle() == "every row has 1,000 parameters"
    assert not _has_error_bars(axes["Test BLEU"])
    assert "no error bars" in axes["Test BLEU"].get_title()


def test_two_seeds_a_row_draw_error_bars(tmp_path):
    _, axes = _figure(tmp_path, seeds=(1, 2))
    assert _has_error_bars(axes["Test BLEU"])
    assert axes["Test BLEU"].get_title() == "Test BLEU (mean ± std over seeds)"


@pytest.mark.parametrize("beam", [1, 4])
def test_latency_is_a_ratio_on_a_range_that_holds_1_and_does_not_magnify_jitter(tmp_path, beam):
    _, axes = _figure(tmp_path, beam=beam)
    ax = axes["Decoding latency, batch 1"]
    assert "ratio to 8 heads" in ax.get_ylabel() and "ms" not in ax.get_ylabel()
    low, high = ax.get_ylim()
    assert low <= 1.0 <= high and high - low >= figure.MIN_RATIO_SPAN
    assert _has_error_bars(ax)  # each row's fastest to slowest round
    lines = [t.get_text() for t in ax.get_legend().get_texts()]
    assert lines == (["greedy"] if beam == 1 else ["greedy", "beam"])


def test_differing_parameter_counts_get_their_panel(tmp_path):
    fig, axes = _figure(tmp_path, params=(1000, 2000))
    assert "Parameters DIFFER" in axes and not fig.get_suptitle()
