"""The heads-ablation report's alignment column: each row's best cross-attention head's AER,
mean ± std over its seeds, from the sweep dir's ``ablation_align.json`` (written by
:mod:`translate.ablation.align`). Does a model with more heads grow a dedicated alignment head?
docs/alignment.md.

Imported when Hydra starts (for the callback): no Hydra, OmegaConf or torch at module level.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from translate.analysis.ablation_stats import Key, heads_key

ALIGN_FILE = "ablation_align.json"
ALIGN_COMMAND = "python -m translate.ablation align SWEEP_DIR"
# How translate.analysis.ablation.read_sweep_file warns about the file.
ALIGN_WORDS = {
    "lost": "no AER column",
    "other": "{path} measured another sweep ({measured}): its AERs are left out; run {command}",
    "missing": ALIGN_FILE + " has no AER for {jobs} (finished after it was measured, or not "
    "measured: see its not_measured); run {command} again",
}


def align_cells(data: dict, key: Key) -> dict:
    """The row of ``key``: its jobs' best-head AER, mean and std over seeds (None: no jobs;
    std None under two), and which reference ("silver" or "gold") they were measured on."""
    best = [job["best_aer"] for job in data["jobs"] if heads_key(job) == key]
    return {
        "best_aer_mean": statistics.fmean(best) if best else None,
        "best_aer_std": statistics.stdev(best) if len(best) >= 2 else None,
        "aer_reference": data["reference"]["kind"] if best else None,
    }


def align_note(data: dict | None, sweep_dir: Path) -> str:
    """Where the AER column comes from, or how to get it."""
    if data is None:
        command = ALIGN_COMMAND.replace("SWEEP_DIR", str(sweep_dir))
        return f"No AER column: to measure each model's alignment heads, `{command}`."
    ref = data["reference"]
    return (
        f"Best head AER: from `{ALIGN_FILE}`, every cross-attention head's alignment error rate "
        f"on the first {data['sentences']} pairs of {ref['split']}, teacher-forced, against "
        f"**{ref['kind']}** alignments ({ref['origin']}); the lowest of each model, mean ± std "
        "over seeds (docs/alignment.md)."
    )
