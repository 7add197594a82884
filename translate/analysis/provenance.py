"""Where the heads-ablation report's jobs ran: each job's commit and machine from the
``provenance`` its ``results.json`` records (:func:`translate.runtime.provenance.provenance`),
for the report's ``commit_seed<N>`` / ``machine_seed<N>`` columns and its warning when they
differ.

Imported when Hydra starts (for the report callback): no torch here.
"""

from __future__ import annotations

from collections import Counter

from translate.errors import counted


def job_provenance(results: dict) -> tuple[str | None, str | None]:
    """``(commit, machine)`` of a job as the report shows them: the short commit (``+dirty``
    with uncommitted changes; the package version for an installed copy), and the device with
    torch, its CPU kernels and threads, on which the numbers depend beyond the settings.
    ``(None, None)`` for a results.json from before they were recorded."""
    p = results.get("provenance")
    if p is None:
        return None, None
    commit = p.get("git_commit")
    code = f"translate {p.get('package_version')}, no checkout"
    if commit:
        code = commit[:9] + ("+dirty" if p.get("git_dirty") else "")
    where = (
        f"{p.get('device_name')}, {counted(p.get('threads'), 'thread')}, torch {p.get('torch')} "
        f"{p.get('cpu_capability')}"
    )
    return code, where


def provenance_warning(results: list[dict]) -> str | None:
    """One line when the finished jobs (their ``results``) ran on several commits or
    machines: their BLEU then differs for that reason too, which the seeds' spread does not
    show."""
    parts = []
    for i, what in enumerate(("commits", "machines")):
        counts = Counter(job_provenance(r)[i] or "not recorded" for r in results)
        if len(counts) > 1:
            each = "; ".join(f"{value}: {counted(n, 'job')}" for value, n in sorted(counts.items()))
            parts.append(f"{len(counts)} {what} ({each})")
    if not parts:
        return None
    return (
        f"the jobs ran on {' and on '.join(parts)}: the same run gives other numbers on other "
        "code or another CPU, so rows may differ for that reason too (commit_seed<N> and "
        "machine_seed<N> in ablation.csv say which job ran where)"
    )
