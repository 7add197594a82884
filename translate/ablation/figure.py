"""The heads ablation's figure, ``ablation.png``: test BLEU, latency as a ratio to the baseline
row's, the parameter count where the rows differ and the best alignment head's AER, against the
head count (kv heads in a kv_heads sweep); a panel with nothing to show is left out."""

from __future__ import annotations

from translate.ablation.results import Report, shown_metrics
from translate.ablation.stats import heads_key


def _x(report: Report, entry: dict) -> int:
    heads, kv = heads_key(entry)  # the x-axis: kv_heads when the sweep varies them
    return kv if report.kv_axis else heads


def _heads_axis(ax, report: Report, xs: list[int], ylabel: str, title: str) -> None:
    if xs:
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(set(xs)), [str(x) for x in sorted(set(xs))])
    # A GQA sweep varies kv_heads at one head count (or a few: "4/8").
    heads = "/".join(str(h) for h in sorted({r["heads"] for r in report.rows}))
    ax.set_xlabel(f"kv heads (at {heads} heads)" if report.kv_axis else "attention heads")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)


def _mean_panel(ax, report: Report, metric: str, color: str, dots: list[tuple[dict, float]]):
    """Mean per row, ± std where the row has two seeds or more, and each ``(entry, value)`` of
    ``dots`` a grey dot: ``(xs, rows, those with std)``."""
    mean, std = f"{metric}_mean", f"{metric}_std"
    rows = [r for r in report.rows if r.get(mean) is not None]
    xs = [_x(report, r) for r in rows]
    ax.plot(xs, [r[mean] for r in rows], "o-", color=color)
    spread = [(x, r) for x, r in zip(xs, rows) if r[std] is not None]
    if spread:
        means, stds = [r[mean] for _, r in spread], [r[std] for _, r in spread]
        ax.errorbar([x for x, _ in spread], means, yerr=stds, fmt="none", capsize=4, color=color)
    for entry, value in dots:
        ax.plot(_x(report, entry), value, ".", color="gray", alpha=0.6)
    return xs, rows, spread


def _bleu_panel(ax, report: Report) -> None:
    done = [j.results for j in report.jobs if j.completed and j.results.get("bleu") is not None]
    xs, rows, spread = _mean_panel(ax, report, "bleu", "C0", [(r, r["bleu"]) for r in done])
    title = "Test BLEU (one seed a row: no error bars)"
    if spread:
        where = "" if len(spread) == len(rows) else " where a row has 2+"
        title = f"Test BLEU (mean ± std over seeds{where})"
    _heads_axis(ax, report, xs, "test BLEU", title)


LATENCY = {"latency_greedy_ms": "greedy", "latency_beam_ms": "beam"}  # metric -> legend
# The least a ratio axis spans: jitter of a few percent must look like what it is.
MIN_RATIO_SPAN = 0.5


def _latency_points(report: Report, metric: str) -> tuple[list[int], list[float], list[tuple]]:
    """A shown latency metric's ratios to the speed file's baseline row, with each row's fastest
    and slowest round over the same (None in files from before they were recorded)."""
    speed = report.speed or {}
    base = speed.get("baseline_heads")
    if base is None or metric not in shown_metrics(speed):
        return [], [], []
    rows = sorted(speed.get("heads", []), key=heads_key)
    ref = next((r.get(metric) for r in rows if heads_key(r) == (base, base)), None)
    points = [(r, r.get(f"{metric}_vs_{base}")) for r in rows]
    points = [(r, ratio) for r, ratio in points if ratio is not None]
    ranges = [
        tuple(r.get(metric + k) and ref and r[metric + k] / ref for k in ("_min", "_max"))
        for r, _ in points
    ]
    return [_x(report, r) for r, _ in points], [ratio for _, ratio in points], ranges


def _latency_panel(ax, report: Report) -> None:
    base, xs, values, bars = report.speed["baseline_heads"], [], [], False
    for metric, label in LATENCY.items():
        x, ratios, ranges = _latency_points(report, metric)
        if not x:
            continue
        line = ax.plot(x, ratios, "o-", label=label)[0]
        if all(low and high for low, high in ranges):
            lows, highs = zip(*ranges)
            err = [[r - lo for r, lo in zip(ratios, lows)], [h - r for r, h in zip(ratios, highs)]]
            ax.errorbar(x, ratios, yerr=err, fmt="none", capsize=3, color=line.get_color())
            values += [*lows, *highs]
            bars = True
        xs, values = xs + x, values + ratios
    ax.axhline(1.0, color="gray", lw=0.8, ls="--")
    low, high = min([1.0, *values]), max([1.0, *values])  # and at least MIN_RATIO_SPAN apart
    pad = max(0.0, MIN_RATIO_SPAN - (high - low)) / 2
    ax.set_ylim(max(0.0, low - pad), high + pad)
    ax.legend(fontsize=8)
    ylabel = f"latency ratio to {base} heads" + (f" ({base} kv)" if report.kv_axis else "")
    title = "Decoding latency, batch 1" + (" (bars: fastest to slowest round)" if bars else "")
    _heads_axis(ax, report, xs, ylabel + " (x)", title)


def _params(report: Report) -> list[tuple[dict, int]]:
    return [(r, r["params"]) for r in report.rows if isinstance(r["params"], int)]


def _params_panel(ax, report: Report) -> None:
    """From zero, drawn only when the counts differ (a kv axis makes them rise with kv_heads)."""
    rows = _params(report)
    xs = [_x(report, r) for r, _ in rows]
    ax.plot(xs, [p / 1e6 for _, p in rows], "s-")
    ax.set_ylim(bottom=0)
    equal = report.kv_axis and report.params_equal
    title = "Parameters (by kv heads)" if equal else "Parameters DIFFER"
    _heads_axis(ax, report, xs, "parameters (millions)", title)


def _aer_panel(ax, report: Report) -> None:
    dots = [(job, job["best_aer"]) for job in report.align["jobs"]]
    xs = _mean_panel(ax, report, "best_aer", "C2", dots)[0]
    kind = report.align["reference"]["kind"]
    # Two lines: on one, the title ran past the figure's right edge.
    title = f"Best alignment head's AER\nagainst {kind} links (lower aligns better)"
    _heads_axis(ax, report, xs, f"best head AER ({kind})", title)


def ablation_figure(report: Report):
    """The panels with something to show, or None; equal parameter counts go in the title."""
    counts = {p for _, p in _params(report)}
    shown = {
        _bleu_panel: any(r["bleu_mean"] is not None for r in report.rows),
        _latency_panel: any(_latency_points(report, m)[0] for m in LATENCY),
        _params_panel: len(counts) > 1,
        _aer_panel: any(r.get("best_aer_mean") is not None for r in report.rows),
    }
    panels = [panel for panel, has_data in shown.items() if has_data]
    if not panels:
        return None
    from translate.analysis.figures import pyplot  # matplotlib and torch: only when drawing

    fig, axes = pyplot().subplots(1, len(panels), figsize=(14 * len(panels) / 3, 4), squeeze=False)
    for panel, ax in zip(panels, axes[0]):
        panel(ax, report)
    if len(counts) == 1:
        fig.suptitle(f"every row has {counts.pop():,} parameters", fontsize=10)
    fig.tight_layout()
    return fig
