"""The heads-ablation report as files: ``ablation.csv``, ``ablation.md`` and ``ablation.png``.

Rendering only; :mod:`translate.analysis.ablation` reads the sweep and computes the rows (this
module imports it, never the other way round). Matplotlib and torch are imported inside the
functions that need them: this module is imported when Hydra starts (for the callback).
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from translate.analysis.ablation import Report
from translate.io import atomic_write


def _csv_value(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def to_csv(report: Report) -> str:
    columns = list(dict.fromkeys(k for row in report.rows for k in row))
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


def _p(v) -> str:
    if v is None or isinstance(v, str):
        return v or "-"
    return f"{v:.3f}" + (" *" if v < 0.05 else "")


def _summary_lines(report: Report) -> list[str]:
    """Title, warnings, what ran where, and the parameter-count sentence."""
    done = [j for j in report.jobs if j.completed]
    first = done[0].results if done else {}
    lines = [f"# Heads ablation: `{report.sweep_dir.name}`", ""]
    for w in report.warnings:
        lines += [f"> **WARNING: {w}**", ""]
    total = len(report.jobs) + len(report.missing)
    return lines + [
        f"{len(done)} of {total} jobs finished; seeds {', '.join(map(str, report.seeds)) or '-'}; "
        f"{first.get('device', '?')}, precision {first.get('precision', '?')}, "
        f"test set {first.get('test_split', '?')}, beam {first.get('beam_size', '?')}.",
        "",
        f"**Parameters:** {report.params_message}.",
        "",
    ]


def _row_cells(r: dict) -> list[str]:
    """One row of the main table, in the order of :func:`_table_lines`' header."""
    # translate.nn.model imports torch: imported here, where the rows (built with it) exist.
    from translate.nn.model import HEAD_MASK_KEYS

    params = f"{r['params']:,}" if isinstance(r["params"], int) else str(r["params"])
    degenerate = "-"
    if r["degenerate_heads"] is not None:
        degenerate = f"{r['degenerate_heads']:.1f} of {r['total_heads']:.0f}"
    return [
        str(r["heads"]),
        str(r["d_k"]),
        params,
        _fmt(r["bleu_mean"], std=r["bleu_std"]),
        _fmt(r["chrf_mean"], std=r["chrf_std"]),
        _fmt(r["dev_bleu_mean"], std=r["dev_bleu_std"]),
        _fmt(r["latency_ms_mean"], 1, r["latency_ms_std"]),
        _fmt(r["sentences_per_s_mean"], 1),
        _fmt(r["tokens_per_s_mean"], 0),
        _fmt(r["peak_mem_mb_mean"], 0),
        _fmt(r["train_minutes_mean"], 1),
        " / ".join(_fmt(r[f"entropy_{k}"]) for k in HEAD_MASK_KEYS),
        degenerate,
        _p(r["p_vs_8"]),
    ]


def _table_lines(report: Report) -> list[str]:
    lines = [
        "| heads | d_k | params | BLEU | chrF | dev BLEU | latency ms/sent (batch 1) | sent/s "
        "| train tok/s | peak mem MB | train min | entropy enc / dec-self / cross | degenerate "
        "heads | p vs 8 heads |",
        "|" + "---|" * 14,
    ]
    return lines + ["| " + " | ".join(_row_cells(r)) + " |" for r in report.rows]


def _note_lines(report: Report, bootstrap_samples: int) -> list[str]:
    """What the columns mean, and the BLEU signature."""
    done = [j for j in report.jobs if j.completed]
    lines = [
        "",
        "BLEU, chrF, dev BLEU and latency: mean ± sample standard deviation over the seeds of a "
        "row (per-seed BLEU and p-values in `ablation.csv`); the other columns are means. "
        f"p: sacreBLEU's paired bootstrap ({bootstrap_samples} resamples) of the test "
        "hypotheses against the 8-head run with the same seed, seeds pooled; * marks p < 0.05 "
        "(the BLEU difference is unlikely to be resampling noise). Entropy: mean attention "
        "entropy in nats per layer type on dev sentences; degenerate heads: near-uniform or "
        "fixed-position heads (`conf/analysis/default.yaml`), mean over seeds, of all heads.",
    ]
    if not any(r["p_vs_8"] == "baseline" for r in report.rows):
        lines += ["", "No finished 8-head run: no p-values."]
    if done and done[0].results.get("device") == "cpu":
        lines += [
            "",
            "Peak memory on the CPU is the peak resident set size during each job's training "
            "(Linux's VmHWM, reset when the job starts training).",
        ]
    if report.bootstrap_signature:
        lines += ["", f"BLEU signature: `{report.bootstrap_signature}`"]
    return lines


def _job_lines(report: Report) -> list[str]:
    """Every job with its status, then the failed and missing ones spelt out."""
    lines = [
        "",
        "## Jobs",
        "",
        "| job | heads | seed | status | test BLEU | dev BLEU |",
        "|---|---|---|---|---|---|",
    ]
    for j in report.jobs:
        r = j.results or {}
        status = "completed" if j.completed else f"failed: {j.error}".replace("|", "\\|")
        lines.append(
            f"| `{j.name}` | {r.get('heads', j.overrides.get('heads', '-'))} | "
            f"{r.get('seed', j.overrides.get('seed', '-'))} | {status} | {_fmt(r.get('bleu'))} | "
            f"{_fmt(r.get('dev_bleu'))} |"
        )
    if report.failed or report.missing:
        lines += ["", "## Failed or missing jobs", ""]
        lines += [f"- `{j.name}`: failed: {j.error}" for j in report.failed]
        lines += [f"- `{m}`: not run (yet): no job dir" for m in report.missing]
    return lines


def to_markdown(report: Report, bootstrap_samples: int = 1000) -> str:
    lines = _summary_lines(report) + _table_lines(report)
    lines += _note_lines(report, bootstrap_samples) + _job_lines(report)
    return "\n".join(lines) + "\n"


def ablation_figure(report: Report):
    """BLEU (mean ± std, seeds as dots) and batch-1 latency against the head count."""
    import matplotlib

    matplotlib.use("Agg")  # headless: sweeps run on servers without a display
    import matplotlib.pyplot as plt

    fig, (ax_bleu, ax_lat) = plt.subplots(1, 2, figsize=(10, 4))
    rows = report.rows
    heads = [r["heads"] for r in rows]
    for ax, stem, label in (
        (ax_bleu, "bleu", "test BLEU"),
        (ax_lat, "latency_ms", "ms / sentence"),
    ):
        means = [math.nan if r[f"{stem}_mean"] is None else r[f"{stem}_mean"] for r in rows]
        stds = [r[f"{stem}_std"] or 0.0 for r in rows]
        ax.errorbar(heads, means, yerr=stds, fmt="o-", capsize=4)
        ax.set_xscale("log", base=2)
        ax.set_xticks(heads, [str(h) for h in heads])
        ax.set_xlabel("attention heads")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    for job in (j for j in report.jobs if j.completed):
        ax_bleu.plot(job.results["heads"], job.results["bleu"], ".", color="gray", alpha=0.6)
    ax_bleu.set_title("Test BLEU (mean ± std over seeds)", fontsize=10)
    ax_lat.set_title("Decoding latency, batch 1", fontsize=10)
    if not rows:
        ax_bleu.text(0.5, 0.5, "no finished jobs", ha="center", transform=ax_bleu.transAxes)
    fig.tight_layout()
    return fig


def ablation_png(report: Report) -> bytes:
    """:func:`ablation_figure` as PNG bytes (the caller writes them atomically)."""
    import matplotlib.pyplot as plt

    fig = ablation_figure(report)
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=100)
    plt.close(fig)
    return png.getvalue()


def write_files(report: Report, bootstrap_samples: int = 1000) -> list[Path]:
    """Write ``ablation.csv``, ``ablation.md`` and ``ablation.png`` into the sweep dir.

    Each atomically: the jobs of a sweep running in parallel may report at once.
    """
    out = report.sweep_dir
    files = {
        out / "ablation.csv": to_csv(report),
        out / "ablation.md": to_markdown(report, bootstrap_samples),
        out / "ablation.png": ablation_png(report),
    }
    for path, data in files.items():
        atomic_write(path, data)
    return list(files)
