"""The figures of ``ablation_speed.json`` (measured by ``python -m translate.ablation speed``):
each metric's median and lowest and highest round, of a job and of each (heads, kv_heads) row,
with the rows' ratios to the baseline row's."""

from __future__ import annotations

import statistics

from translate.analysis.ablation import ALL_METRICS, BASELINE_HEADS, ratio_key, spread_keys
from translate.analysis.ablation_stats import heads_key


def median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def ranges(values: dict[str, list]) -> dict:
    """Each metric's lowest and highest value over ``values`` (metric -> values), or None."""
    out = {}
    for metric in ALL_METRICS:
        timed = [v for v in values.get(metric, []) if v is not None]
        low, high = spread_keys(metric)
        out[low], out[high] = (min(timed), max(timed)) if timed else (None, None)
    return out


def _row_rounds(group: list[dict], metric: str) -> list[float | None]:
    """The row's value in each round, the median over its jobs (seeds) as the row's figure is:
    its spread is then the rounds', not the seeds' (whose models decode to other lengths)."""
    rounds = [e.get("rounds", {}).get(metric, []) for e in group]
    return [median(list(values)) for values in zip(*rounds)]


def heads_rows(entries: list[dict], baseline_heads: int | None = BASELINE_HEADS) -> list[dict]:
    """Per (heads, kv_heads) pair: the median over its jobs (seeds) of each metric, and its
    ratio to the baseline row's, multi-head ``baseline_heads`` (1.0 there; no ratios without
    a baseline: :func:`translate.analysis.ablation_stats.choose_baseline` finds none)."""
    rows = []
    for heads, kv in sorted({heads_key(e) for e in entries}):
        group = [e for e in entries if heads_key(e) == (heads, kv)]
        row = {"heads": heads, "kv_heads": kv, "jobs": [e["name"] for e in group]}
        row["seeds"] = [e["seed"] for e in group]
        row.update({m: median([e.get(m) for e in group]) for m in ALL_METRICS})
        row.update(ranges({m: _row_rounds(group, m) for m in ALL_METRICS}))
        rows.append(row)
    # The baseline is plain multi-head attention, also in a kv_heads sweep.
    base = next((r for r in rows if heads_key(r) == (baseline_heads, baseline_heads)), {})
    for row in rows if baseline_heads is not None else []:
        for m in ALL_METRICS:
            value, ref = row[m], base.get(m)
            row[ratio_key(m, baseline_heads)] = None if not (value and ref) else value / ref
    return rows
