"""The heads-ablation report as files: ``ablation.csv``, ``ablation.md`` and ``ablation.png``.

Rendering only; :mod:`translate.analysis.ablation` reads the sweep and computes the rows (this
module imports it, never the other way round). Matplotlib and torch are imported inside the
functions that need them: this module is imported when Hydra starts (for the callback).

kv_heads appears (a column, the plot's x-axis) only when the sweep varies it
(:attr:`Report.kv_axis`): a plain heads sweep's files read as they did before GQA. The p-values
are against :attr:`Report.baseline_heads` (8 heads, else the largest head count the sweep has),
their columns named for it; the figure leaves out the panels with nothing to show.
"""

from __future__ import annotations

import csv
import io
import logging
import math
import os
import shlex
from pathlib import Path

from translate.analysis.ablation import Report, p_column, scored_dev_bleu
from translate.analysis.ablation_stats import heads_key
from translate.analysis.provenance import job_provenance
from translate.analysis.seed_stats import LEVEL, detected, smallest_permutation_p
from translate.analysis.speed_file import (
    CT2_METRICS,
    SPEED_COMMAND,
    SPEED_FILE,
    ratio_key,
    shown_metrics,
)
from translate.errors import counted
from translate.io import WriteFailed, check, write

log = logging.getLogger(__name__)
FIGURE = "ablation.png"
REPORT = "ablation report"  # what the one door for writes (translate.io) knows the files as


def _csv_value(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def to_csv(report: Report) -> str:
    columns = list(dict.fromkeys(k for row in report.rows for k in row))
    columns = [c for c in columns if report.kv_axis or c != "kv_heads"]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in report.rows:
        writer.writerow([_csv_value(row.get(c)) for c in columns])
    return out.getvalue()


def _fmt(v, digits: int = 2, std=None) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    text = f"{v:,.{digits}f}"
    return f"{text} ± {std:.{digits}f}" if std is not None else text


def _p(v, star: bool = True) -> str:
    """A p-value in 3 decimals, * below the seed-level :data:`LEVEL` where ``star``."""
    if v is None or isinstance(v, str):
        return v or "-"
    return f"{v:.3f}" + (" *" if star and v < LEVEL else "")


def _summary_lines(report: Report) -> list[str]:
    """Title, warnings, what ran where, and the parameter-count sentence."""
    done = [j for j in report.jobs if j.completed]
    first = done[0].results if done else {}
    lines = [f"# Heads ablation: `{report.sweep_dir.name}`", ""]
    for w in report.warnings:
        lines += [f"> **WARNING: {w}**", ""]
    total = len(report.jobs) + len(report.missing)
    ran = {job_provenance(j.results) for j in done}  # mixed ones: a warning above says so
    code, where = next(iter(ran)) if len(ran) == 1 else (None, None)
    ran_on = f" Code {code}, on {where}." if code else ""
    return lines + [
        f"{len(done)} of {total} jobs finished; seeds {', '.join(map(str, report.seeds)) or '-'}; "
        f"{first.get('device', '?')}, precision {first.get('precision', '?')}, "
        f"test set {first.get('test_split', '?')}, beam {first.get('beam_size', '?')}.{ran_on}",
        "",
        f"**Parameters:** {report.params_message}.",
        "",
        *_baseline_lines(report),
        *_verdict_lines(report),
    ]


def _baseline_lines(report: Report) -> list[str]:
    """Why the baseline is another head count than the one asked for (8 by default)."""
    asked, chosen = report.asked_baseline, report.baseline_heads
    if chosen == asked or not report.rows:
        return []
    said = f"**Baseline:** no finished {_baseline(report, asked)} run"
    if chosen is None:
        return [said + " and no other multi-head row (kv_heads = heads): no p-values.", ""]
    return [
        f"{said}: the {_baseline(report)} row, the largest head count the sweep has, is the "
        f"baseline, and the p-value columns are named for it (`{p_column(chosen, 'welch')}`); "
        "`python -m translate.ablation report --baseline-heads N` chooses another.",
        "",
    ]


def _verdict_lines(report: Report) -> list[str]:
    """The summary: each row against the baseline row as the seed-level tests find it at
    :data:`LEVEL`, and no further (the paired bootstrap measures test-set sampling only)."""
    base = _base_row(report)
    others = [r for r in report.rows if r is not base and r["bleu_mean"] is not None]
    if base is None or base["bleu_mean"] is None or not others:
        return []
    lines = [f"**Against the {_baseline(report)} row, across seeds (level {LEVEL}):**", ""]
    for r in others:
        label = f"{r['heads']} head" + "s" * (r["heads"] != 1)
        label += f", {r['kv_heads']} kv heads" * report.kv_axis
        lines.append(f"- {label}: {_verdict(r, base, report.baseline_heads)}")
    return lines + [""]


def _base_row(report: Report) -> dict | None:
    """The baseline row: multi-head (kv_heads = heads) at :attr:`Report.baseline_heads`."""
    key = (report.baseline_heads, report.baseline_heads)
    return next((r for r in report.rows if (r["heads"], r["kv_heads"]) == key), None)


def _verdict(r: dict, base: dict, baseline: int) -> str:
    """One row's difference in mean test BLEU to the baseline row's, and what the seed-level
    tests say of it."""
    diff = r["bleu_mean"] - base["bleu_mean"]
    welch, perm = r[p_column(baseline, "welch")], r[p_column(baseline, "permutation")]
    text = f"{diff:+.2f} BLEU ({r['n']} against {base['n']} seeds)"
    found = detected(welch, perm)
    if found is None:
        return text + ": no seed-level test (it needs two seeds or more in both rows)"
    ps = f"Welch p = {_p(welch, False)}, permutation p = {_p(perm, False)}"
    if found:
        return text + f", {'higher' if diff > 0 else 'lower'} across seeds ({ps})"
    floor = smallest_permutation_p(r["n"], base["n"])
    if floor >= LEVEL:
        ps += f"; with these seeds the permutation test cannot go below p = {floor:.3f}"
    return text + f": no detectable difference across seeds ({ps})"


def _speed_cells(r: dict, speed: dict | None) -> list[str]:
    """The side-by-side speed columns: each value with its ratio to the baseline row's (none
    without ``ablation_speed.json``; CTranslate2's only where the file has them)."""
    if speed is None:
        return []
    cells = []
    for metric, (_, digits) in shown_metrics(speed).items():
        ratio = r.get(ratio_key(metric, speed["baseline_heads"]))
        cells.append(_fmt(r.get(metric), digits) + ("" if ratio is None else f" ({ratio:.2f}x)"))
    return cells


def _ci(low: float | None, high: float | None) -> str:
    return "-" if low is None else f"{low:.2f} – {high:.2f}"


def _row_cells(r: dict, report: Report) -> list[str]:
    """One row of the main table, in the order of :func:`_table_lines`' header."""
    # translate.nn.model imports torch: imported here, where the rows (built with it) exist.
    from translate.nn.model import HEAD_MASK_KEYS

    params = f"{r['params']:,}" if isinstance(r["params"], int) else str(r["params"])
    degenerate = "-"
    if r["degenerate_heads"] is not None:
        degenerate = f"{r['degenerate_heads']:.1f} of {r['total_heads']:.0f}"
    return [
        str(r["heads"]),
        *([str(r["kv_heads"])] if report.kv_axis else []),
        str(r["d_k"]),
        params,
        _fmt(r["bleu_mean"], std=r["bleu_std"]),
        _ci(r["bleu_ci95_low"], r["bleu_ci95_high"]),
        _fmt(r["bleu_greedy_mean"], std=r["bleu_greedy_std"]),
        _fmt(r["chrf_mean"], std=r["chrf_std"]),
        _fmt(r["dev_bleu_mean"], std=r["dev_bleu_std"]),
        *_speed_cells(r, report.speed),
        _fmt(r["steps_mean"], 0),
        " / ".join(_fmt(r[f"entropy_{k}"]) for k in HEAD_MASK_KEYS),
        degenerate,
        *_p_cells(r, report.baseline_heads),
    ]


def _p_cells(r: dict, baseline: int | None) -> list[str]:
    """The p-value cells: seed-level (``Welch / permutation``, or ``baseline``), then the
    paired bootstrap's; none without a baseline row."""
    if baseline is None:
        return []
    bootstrap = _p(r[p_column(baseline)], star=False)
    if r[p_column(baseline, "welch")] == "baseline":
        return ["baseline", bootstrap]
    seeds = " / ".join(_p(r[p_column(baseline, test)]) for test in ("welch", "permutation"))
    return [seeds, bootstrap]


def _table_lines(report: Report) -> list[str]:
    speed = [label for label, _ in shown_metrics(report.speed).values()] if report.speed else []
    kv = ["kv heads"] if report.kv_axis else []
    b = report.baseline_heads
    p = [f"p vs {b} heads, seeds (Welch / permutation)", f"p vs {b} heads, bootstrap"]
    header = [
        "heads", *kv, "d_k", "params", "BLEU", "BLEU 95% CI", "greedy BLEU", "chrF", "dev BLEU",
        *speed, "updates", "entropy enc / dec-self / cross", "degenerate heads",
        *(p if b is not None else []),
    ]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    cells = (_row_cells(r, report) for r in report.rows)
    return lines + ["| " + " | ".join(row) + " |" for row in cells]


def _baseline(report: Report, heads: int | None = None) -> str:
    """The baseline row in words (default :attr:`Report.baseline_heads`): with a kv axis, the
    multi-head row of that head count."""
    heads = report.baseline_heads if heads is None else heads
    return f"{heads}-head multi-head (kv_heads={heads})" if report.kv_axis else f"{heads}-head"


def _speed_note(report: Report) -> list[str]:
    """Where the speed columns come from, or how to get them."""
    speed = report.speed
    if speed is None:
        command = SPEED_COMMAND.replace("SWEEP_DIR", str(report.sweep_dir))
        return [
            "",
            "No speed columns: each job timed itself inside its own run, at another time and "
            "beside other work, so its `results.json` speed fields are not compared here. To "
            f"time all jobs side by side: `{command}`, then write the report again.",
        ]
    m, s = speed.get("machine", {}), speed.get("settings", {})
    memory = speed.get("peak_mem_mb")
    threads = counted(m.get("threads"), "thread")
    return [
        "",
        f"Speed: from `{SPEED_FILE}`, every job timed side by side in one process on "
        f"{m.get('device_name', '?')} ({threads}, {m.get('date', '?')}, "
        f"precision {s.get('precision', '?')}): medians of {s.get('rounds', '?')} rounds that "
        f"visit every job in a rotated order, then the median over seeds; {_ratio_note(report)}. "
        "Latency: mean ms per sentence at "
        f"batch size 1 over {s.get('sentences', '?')} test sentences, greedy and with the "
        "run's beam; sent/s: greedy at the evaluation batch size on "
        f"{s.get('batch_sentences', '?')} sentences; train tok/s: "
        f"{s.get('train_steps', '?')} optimizer steps. Peak memory: {memory}.{_ct2_note(speed)}",
    ]


def _ratio_note(report: Report) -> str:
    """What the speed columns' (x) divide by: the speed file's baseline row, which a file
    measured by an older version lacks in a sweep without 8 heads."""
    base = report.speed["baseline_heads"]
    if base is None:
        return "no ratios, since no row is multi-head"
    if any("heads" in r and heads_key(r) == (base, base) for r in report.speed["heads"]):
        return f"(x) = ratio to the {_baseline(report, base)} row"
    command = SPEED_COMMAND.replace("SWEEP_DIR", str(report.sweep_dir))
    return f"no ratios: the file has no {_baseline(report, base)} row (`{command}` again adds them)"


def _ct2_note(speed: dict) -> str:
    """What the CTranslate2 columns are, when the speed file has them."""
    if not set(CT2_METRICS) & set(shown_metrics(speed)):
        return ""
    version = speed.get("machine", {}).get("ctranslate2") or "?"
    return (
        " CT2: the same checkpoint exported to CTranslate2 (float32, version "
        f"{version}) and decoded at batch size 1 with the same threads, sentences and decode "
        "settings, in the same rounds: what the model costs without our engine."
    )


def _note_lines(report: Report, bootstrap_samples: int) -> list[str]:
    """What the columns mean, and the BLEU signature."""
    lines = [
        "",
        "BLEU (the run's beam), greedy BLEU, chrF and dev BLEU: mean ± sample standard "
        "deviation over the seeds of a row (per-seed BLEU, p-values, commits and machines in "
        "`ablation.csv`). BLEU 95% CI: the t interval (n - 1 degrees of freedom) of the mean "
        f"over the row's seeds. {_p_note(report, bootstrap_samples)}Entropy: "
        "mean attention entropy in nats per layer type on dev sentences; degenerate heads: "
        "near-uniform or fixed-position heads (`conf/analysis/default.yaml`), mean over seeds, "
        "of all heads. Dev BLEU is that of the checkpoint scored on the test set (the "
        "averaged one where it beat best.pt on dev), decoded as training validates "
        "(`trainer.val_beam_size` on the first `trainer.val_bleu_sentences` dev sentences).",
    ]
    lines += _speed_note(report)
    if report.bootstrap_signature:
        lines += ["", f"BLEU signature: `{report.bootstrap_signature}`"]
    return lines


def _p_note(report: Report, bootstrap_samples: int) -> str:
    """What the p-value columns are (nothing without a baseline row)."""
    if report.baseline_heads is None:
        return ""
    return (
        "p seeds: Welch's t-test and an exact permutation test (every "
        "split of the pooled seeds) of the per-seed test BLEU against the "
        f"{_baseline(report)} row's; * marks p < {LEVEL}, and the summary calls a difference "
        f"detected only where both are below {LEVEL}. p bootstrap: sacreBLEU's paired "
        f"bootstrap ({bootstrap_samples} resamples) of the test hypotheses against the "
        f"{_baseline(report)} run with the same seed, seeds pooled: it resamples the test "
        "sentences of fixed trained models, so it measures test-set sampling only, not how "
        "far another seed or machine moves a job's BLEU. "
    )


def _job_lines(report: Report) -> list[str]:
    """Every job with its status, then the failed and missing ones spelt out."""
    kv = ["kv heads"] if report.kv_axis else []
    header = ["job", "heads", *kv, "seed", "status", "test BLEU", "dev BLEU", "commit", "machine"]
    lines = ["", "## Jobs", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for j in report.jobs:
        r, o = j.results or {}, j.overrides
        status = "completed" if j.completed else f"failed: {j.error}".replace("|", "\\|")
        heads = r.get("heads", o.get("heads", "-"))
        # kv_heads defaults to heads (in the config, and in results.json from before GQA).
        kv_cell = [str(r.get("kv_heads") or o.get("kv_heads") or heads)] if kv else []
        cells = [f"`{j.name}`", str(heads), *kv_cell, str(r.get("seed", o.get("seed", "-")))]
        cells += [status, _fmt(r.get("bleu")), _fmt(scored_dev_bleu(r))]
        cells += [_fmt(value) for value in job_provenance(r)]
        lines.append("| " + " | ".join(cells) + " |")
    if report.failed or report.missing:
        lines += ["", "## Failed or missing jobs", ""]
        lines += [f"- `{j.name}`: failed: {j.error}" for j in report.failed]
        lines += [f"- `{m}`: not run (yet): no job dir" for m in report.missing]
    return lines


def to_markdown(report: Report, bootstrap_samples: int = 1000) -> str:
    lines = _summary_lines(report) + _table_lines(report)
    lines += _note_lines(report, bootstrap_samples) + _job_lines(report)
    return "\n".join(lines) + "\n"


def _x(report: Report, entry: dict) -> int:
    """A row's or a job's place on the x-axis: its kv_heads when the sweep varies them."""
    heads, kv = heads_key(entry)
    return kv if report.kv_axis else heads


def _heads_axis(ax, report: Report, xs: list[int], ylabel: str, title: str) -> None:
    if xs:
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(set(xs)), [str(x) for x in sorted(set(xs))])
    xlabel = "attention heads"
    if report.kv_axis:  # a GQA sweep varies kv_heads at one head count (or a few: "4/8")
        heads = "/".join(str(h) for h in sorted({r["heads"] for r in report.rows}))
        xlabel = f"kv heads (at {heads} heads)"
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)


def _bleu_panel(ax, report: Report) -> None:
    """Mean ± std over seeds per row, every seed's BLEU a grey dot."""
    rows = [r for r in report.rows if r["bleu_mean"] is not None]
    xs = [_x(report, r) for r in rows]
    means = [r["bleu_mean"] for r in rows]
    ax.errorbar(xs, means, yerr=[r["bleu_std"] or 0.0 for r in rows], fmt="o-", capsize=4)
    for job in (j for j in report.jobs if j.completed and j.results.get("bleu") is not None):
        ax.plot(_x(report, job.results), job.results["bleu"], ".", color="gray", alpha=0.6)
    _heads_axis(ax, report, xs, "test BLEU", "Test BLEU (mean ± std over seeds)")


LATENCY = {"latency_greedy_ms": "greedy", "latency_beam_ms": "beam"}  # metric -> legend


def _latency_points(report: Report, metric: str) -> tuple[list[int], list[float]]:
    """A latency metric's ratios to the speed file's baseline row, where it has one: none in a
    file without that row (one measured before a sweep without 8 heads chose another)."""
    speed = report.speed or {}
    base = speed.get("baseline_heads")
    rows = sorted(speed.get("heads", []), key=heads_key) if base is not None else []
    points = [(_x(report, r), r.get(ratio_key(metric, base))) for r in rows]
    points = [(x, ratio) for x, ratio in points if ratio is not None]
    return [x for x, _ in points], [ratio for _, ratio in points]


def _latency_panel(ax, report: Report) -> None:
    """Batch-1 latency over the baseline row's, from the side-by-side measurement."""
    base, xs = report.speed["baseline_heads"], []
    for metric, label in LATENCY.items():
        x, ratios = _latency_points(report, metric)
        ax.plot(x, ratios, "o-", label=label)
        xs += x
    ax.axhline(1.0, color="gray", lw=0.8, ls="--")
    ax.legend(fontsize=8)
    ylabel = f"ms / sentence, x {base} heads" + (f" ({base} kv)" if report.kv_axis else "")
    _heads_axis(ax, report, xs, ylabel, "Decoding latency, batch 1")


def _params_panel(ax, report: Report) -> None:
    """The parameter count per row, from zero: a flat line says equal model size (with a kv
    axis it rightly rises with kv_heads)."""
    rows = [r for r in report.rows if isinstance(r["params"], int)]
    xs = [_x(report, r) for r in rows]
    ax.plot(xs, [r["params"] / 1e6 for r in rows], "s-")
    ax.set_ylim(bottom=0)
    title = "Parameters (equal)" if report.params_equal else "Parameters DIFFER"
    if report.kv_axis and report.params_equal:
        title = "Parameters (by kv heads)"
    _heads_axis(ax, report, xs, "parameters (millions)", title)


def _panels(report: Report) -> list:
    """The panels with something to show: test BLEU where a row has it, batch-1 latency over
    the baseline row's where the speed file has ratios, parameters where a row has one count."""
    shown = {
        _bleu_panel: any(r["bleu_mean"] is not None for r in report.rows),
        _latency_panel: any(_latency_points(report, m)[0] for m in LATENCY),
        _params_panel: any(isinstance(r["params"], int) for r in report.rows),
    }
    return [panel for panel, has_data in shown.items() if has_data]


def ablation_figure(report: Report):
    """:func:`_panels` side by side, against heads (or kv_heads, when the sweep varies them);
    None when none has anything to show."""
    panels = _panels(report)
    if not panels:
        return None
    from translate.analysis.figures import pyplot

    fig, axes = pyplot().subplots(1, len(panels), figsize=(14 * len(panels) / 3, 4), squeeze=False)
    for panel, ax in zip(panels, axes[0]):
        panel(ax, report)
    fig.tight_layout()
    return fig


def ablation_png(report: Report) -> bytes | None:
    """:func:`ablation_figure` as PNG bytes (the caller writes them atomically); None when it
    has no panel."""
    from translate.analysis.figures import pyplot

    fig = ablation_figure(report)
    if fig is None:
        return None
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=100)
    pyplot().close(fig)
    return png.getvalue()


def _figure_or_warning(report: Report) -> bytes | None:
    """The figure's PNG, or None with a warning in the report saying why there is none: the
    tables must be written whatever the figure does."""
    try:
        png = ablation_png(report)
    except Exception as err:  # a plotting failure must not cost the .md and .csv
        log.exception("could not draw %s", report.sweep_dir / FIGURE)
        reason = f"drawing it failed ({type(err).__name__}: {err})"
    else:
        if png is not None:
            return png
        reason = "no finished job has anything to plot"
    report.warnings.append(f"{FIGURE} not written: {reason}; the tables below are complete")
    return None


def write_files(report: Report, bootstrap_samples: int = 1000) -> list[Path]:
    """Write ``ablation.csv``, ``ablation.md`` and (where it has a panel) ``ablation.png``
    into the sweep dir; returns them, also as :attr:`Report.written`.

    Each atomically: the jobs of a sweep running in parallel may report at once. A write the
    system refuses after an earlier file was replaced says which were.
    """
    out = report.sweep_dir
    png = _figure_or_warning(report)  # first: its warning belongs in the .md
    files = {
        out / "ablation.csv": to_csv(report),
        out / "ablation.md": to_markdown(report, bootstrap_samples),
        **({out / FIGURE: png} if png is not None else {}),
    }
    for path in files:  # all refusals first (a hand-edited .md), so none is half replaced
        check(path, REPORT)
    report.written = []
    for path, data in files.items():
        try:
            write(path, data, REPORT)
        except WriteFailed as err:
            if not report.written:
                raise  # nothing was replaced, as its message says
            raise _half_written(report, path, err) from None
        report.written.append(path)
    return report.written


def _half_written(report: Report, path: Path, err: WriteFailed) -> WriteFailed:
    """A refused write after others replaced their files: which ones, and how to make the
    files agree again."""
    done = " and ".join(p.name for p in report.written)
    command = f"python -m translate.ablation report {shlex.quote(str(report.sweep_dir))}"
    return WriteFailed(
        f"could not write {path} ({os.strerror(err.errno)}) after {done} had been replaced by "
        f"the new report; {path.name} is still the earlier one (if any); free some space or "
        f"fix the permissions, then run {command}",
        err.errno,
    )
