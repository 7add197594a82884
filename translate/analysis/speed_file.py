"""``ablation_speed.json``, a heads sweep's side-by-side speed figures: its name, its metrics,
and reading it back into the report's rows.

Its rows (the list ``heads``) are keyed by ``(heads, kv_heads)``, like the report's; a file
written before grouped-query attention has no ``kv_heads`` in them (multi-head: = heads). The
ratios are over the baseline row: ``baseline_heads`` heads with as many kv heads (8, else the
sweep's largest multi-head head count; null, and no ratios, where no row is multi-head).

Written by :mod:`translate.analysis.speed` (``python -m translate.ablation speed SWEEP_DIR``), read
by :mod:`translate.analysis.ablation`. A module apart from the measuring one because it imports
nothing heavy: the report is built when Hydra starts a sweep, and this module is part of it.
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
# The same checkpoints exported to CTranslate2 (float32), timed in the same rounds: what the
# model costs without our engine. Only in files written since, and only where ctranslate2 was
# installed; the report shows them where a row has a value.
CT2_METRICS = {
    "ct2_latency_greedy_ms": ("CT2 greedy ms/sent (batch 1)", 1),
    "ct2_latency_beam_ms": ("CT2 beam ms/sent (batch 1)", 1),
}
ALL_METRICS = {**SPEED_METRICS, **CT2_METRICS}


def ratio_key(metric: str, baseline_heads: int) -> str:
    """The key of ``metric`` over the baseline row's, e.g. ``latency_beam_ms_vs_8`` (the row of
    8 heads and 8 kv heads)."""
    return f"{metric}_vs_{baseline_heads}"


def shown_metrics(data: dict) -> dict:
    """The metrics of ``data``'s table, each -> (column header, decimals): :data:`SPEED_METRICS`
    with CTranslate2's after our latency where any row has them (none in an older file)."""
    rows = data.get("heads") or []
    ct2 = {m: v for m, v in CT2_METRICS.items() if any(r.get(m) is not None for r in rows)}
    latency = {m: v for m, v in SPEED_METRICS.items() if m.startswith("latency_")}
    return {**latency, **ct2, **SPEED_METRICS}  # CTranslate2's columns right after our latency


def read_speed(sweep_dir: Path, finished: list[str], warnings: list[str]) -> dict | None:
    """The sweep dir's speed file, or None when it has none (or an unreadable one, or one that
    measured another sweep's checkpoints, with a warning). ``finished``: the completed jobs'
    names; those the file lacks are named in a warning with why (a job not timed, or one that
    finished after the measurement), since their rows then mix."""
    path = Path(sweep_dir) / SPEED_FILE
    if not path.is_file():
        return None
    command = SPEED_COMMAND.replace("SWEEP_DIR", str(sweep_dir))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        measured = {job["name"] for job in data["jobs"]}
        if not isinstance(data.get("heads"), list) or "baseline_heads" not in data:
            raise KeyError("heads or baseline_heads")
        elsewhere = _measured_elsewhere(data, Path(sweep_dir).resolve())
        not_timed = {job["name"]: job["reason"] for job in data.get("not_timed", [])}
    except (OSError, ValueError, KeyError, TypeError) as err:
        warnings.append(f"{path} is unreadable ({err!r}): no speed columns; run {SPEED_COMMAND}")
        return None
    if elsewhere is not None:
        warnings.append(
            f"{path} is the speed file of another sweep (it timed {elsewhere}): its figures are "
            f"left out; run {command} to time this sweep's checkpoints"
        )
        return None
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


def _measured_elsewhere(data: dict, sweep_dir: Path) -> str | None:
    """The sweep dir (or a checkpoint outside ``sweep_dir``) a speed file timed when that is
    not ``sweep_dir`` (resolved): a file copied from another sweep; None when it is this one's
    (a file from before the sweep dir was recorded, with relative paths, is taken as it is)."""
    if data.get("sweep_dir") is not None:
        return None if Path(data["sweep_dir"]) == sweep_dir else data["sweep_dir"]
    for job in data["jobs"]:
        checkpoint = Path(job.get("checkpoint") or ".")
        if checkpoint.is_absolute() and not checkpoint.resolve().is_relative_to(sweep_dir):
            return str(checkpoint)
    return None


def speed_cells(data: dict, heads: int, kv_heads: int | None = None) -> dict:
    """The row of ``heads`` heads and ``kv_heads`` (default: as many) key/value heads: every
    metric and its ratio to the baseline's (None where the file has no such row; no ratio
    columns where it has no baseline)."""
    baseline, key = data["baseline_heads"], (heads, heads if kv_heads is None else kv_heads)
    row = next((r for r in data["heads"] if "heads" in r and heads_key(r) == key), {})
    out = {}
    for metric in shown_metrics(data):
        out[metric] = row.get(metric)
        if baseline is not None:
            out[ratio_key(metric, baseline)] = row.get(ratio_key(metric, baseline))
    return out
