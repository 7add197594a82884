"""``ablation_speed.json``, a heads sweep's side-by-side speed figures written by
:mod:`translate.analysis.speed`: its name, its metrics, and reading it back into the report's
rows (keyed by ``(heads, kv_heads)``, with ratios over the ``baseline_heads`` row). Apart from
the measuring module because the report, built when Hydra starts a sweep, reads it.
"""

from __future__ import annotations

import json
from pathlib import Path

from translate.analysis.ablation_stats import heads_key

SPEED_FILE = "ablation_speed.json"
SPEED_COMMAND = "python -m translate.ablation speed SWEEP_DIR"
# Per-job and per-row metrics -> (column header in ablation.md, decimals shown).
SPEED_METRICS = {
    "latency_greedy_ms": ("greedy ms/sent (batch 1)", 1),
    "latency_beam_ms": ("beam ms/sent (batch 1)", 1),
    "sentences_per_s": ("sent/s (batched, greedy)", 1),
    "train_tokens_per_s": ("train tok/s", 0),
    "peak_mem_mb": ("peak mem MB", 0),
}
# The same checkpoints exported to CTranslate2, timed in the same rounds; only in files
# written where ctranslate2 was installed, and shown where a row has a value.
CT2_METRICS = {
    "ct2_latency_greedy_ms": ("CT2 greedy ms/sent (batch 1)", 1),
    "ct2_latency_beam_ms": ("CT2 beam ms/sent (batch 1)", 1),
}
ALL_METRICS = {**SPEED_METRICS, **CT2_METRICS}


def ratio_key(metric: str, baseline_heads: int) -> str:
    """``latency_beam_ms_vs_8``: ``metric`` over the baseline row's (8 heads, 8 kv heads)."""
    return f"{metric}_vs_{baseline_heads}"


def shown_metrics(data: dict) -> dict:
    """The metrics of ``data``'s table, each -> (column header, decimals), CTranslate2's right
    after our latency where any row has them."""
    rows = data.get("heads") or []
    ct2 = {m: v for m, v in CT2_METRICS.items() if any(r.get(m) is not None for r in rows)}
    latency = {m: v for m, v in SPEED_METRICS.items() if m.startswith("latency_")}
    return {**latency, **ct2, **SPEED_METRICS}


def speed_cell(row: dict, metric: str, digits: int, baseline: int | None) -> str:
    """``40.0 (1.60x)``: a row's value of ``metric`` with its ratio to the baseline row's."""
    value, ratio = row.get(metric), row.get(ratio_key(metric, baseline))
    text = "-" if value is None else f"{value:,.{digits}f}"
    return text if ratio is None else f"{text} ({ratio:.2f}x)"


def read_speed(sweep_dir: Path, finished: list[str], warnings: list[str]) -> dict | None:
    """The sweep dir's speed file; None when it has none, or (with a warning) an unreadable
    one or one that timed another sweep. The ``finished`` jobs it has no figures for are named
    in a warning with why, since their rows then mix."""
    path = sweep_dir / SPEED_FILE
    if not path.is_file():
        return None
    command = SPEED_COMMAND.replace("SWEEP_DIR", str(sweep_dir))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        warnings.append(f"{path} is unreadable ({err}): no speed columns; run {command}")
        return None
    timed = data.get("sweep_dir")  # absent in files from before it was recorded
    if timed is not None and Path(timed) != sweep_dir.resolve():
        # `speed <sweepA> --json <sweepB>/...`: A's timings must not pass for B's.
        warnings.append(
            f"{path} is the speed file of another sweep (it timed {timed}): its figures are "
            f"left out; run {command} to time this sweep's checkpoints"
        )
        return None
    measured = {job["name"] for job in data["jobs"]}
    not_timed = {job["name"]: job["reason"] for job in data.get("not_timed", [])}
    for name in (n for n in finished if n not in measured and n in not_timed):
        warnings.append(
            f"{SPEED_FILE} has no figures for {name}; it was not timed: {not_timed[name]}"
        )
    unmeasured = [name for name in finished if name not in measured and name not in not_timed]
    if unmeasured:
        warnings.append(
            f"{SPEED_FILE} has no figures for {', '.join(unmeasured)} (finished after it was "
            f"measured?): run {command} again"
        )
    return data


def speed_cells(data: dict, key: tuple[int, int]) -> dict:
    """The row of ``key`` (heads, kv_heads): every metric and its ratio to the baseline's
    (None where the file has no such row; no ratio columns where it has no baseline)."""
    baseline = data["baseline_heads"]
    row = next((r for r in data["heads"] if heads_key(r) == key), {})
    out = {}
    for metric in shown_metrics(data):
        out[metric] = row.get(metric)
        if baseline is not None:
            out[ratio_key(metric, baseline)] = row.get(ratio_key(metric, baseline))
    return out
