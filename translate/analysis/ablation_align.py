"""The heads-ablation report's alignment column: each row's best cross-attention head's AER,
mean ± std over its seeds, from the sweep dir's ``ablation_align.json`` (written by
:mod:`translate.ablation.align`). Does a model with more heads grow a dedicated alignment head?
docs/alignment.md.

Imported when Hydra starts (for the callback): no Hydra, OmegaConf or torch at module level.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from translate.analysis.ablation_stats import Key, heads_key

ALIGN_FILE = "ablation_align.json"
ALIGN_COMMAND = "python -m translate.ablation align SWEEP_DIR"


def read_align(sweep_dir: Path, finished: list[str], warnings: list[str]) -> dict | None:
    """The sweep dir's alignment file; None when it has none, or (with a warning) an
    unreadable one or one that measured another sweep. Finished jobs it has no figures for are
    named in a warning, since their rows then average fewer seeds."""
    path = sweep_dir / ALIGN_FILE
    if not path.is_file():
        return None
    command = ALIGN_COMMAND.replace("SWEEP_DIR", str(sweep_dir))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        warnings.append(f"{path} is unreadable ({err}): no AER column; run {command}")
        return None
    if Path(data.get("sweep_dir", "")) != sweep_dir.resolve():
        warnings.append(
            f"{path} measured another sweep ({data.get('sweep_dir')}): its AERs are left out; "
            f"run {command}"
        )
        return None
    measured = {job["name"] for job in data["jobs"]}
    if missing := [name for name in finished if name not in measured]:
        warnings.append(
            f"{ALIGN_FILE} has no AER for {', '.join(missing)} (finished after it was "
            f"measured, or not measured: see its not_measured); run {command} again"
        )
    return data


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
