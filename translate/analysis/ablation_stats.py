"""The heads-ablation report's checks across its rows: the parameter counts and the paired
bootstrap against the baseline row.

Split from :mod:`translate.analysis.ablation` (which builds the rows and calls these) to keep
modules short; the jobs taken here are its ``Job`` objects (``.results``, ``.path``, ``.name``,
``.completed``), not imported, since that module imports this one. A row is one
``(heads, kv_heads)`` pair (:func:`heads_key`): a grouped-query sweep (``kv_heads=1,2,4,8``)
varies the key/value heads at a fixed head count.

Imported when Hydra starts (for the callback): sacreBLEU is imported inside
:func:`significance` only.
"""

from __future__ import annotations

import functools
from pathlib import Path

Key = tuple[int, int]  # (heads, kv_heads) of a row


def heads_key(entry: dict) -> Key:
    """``(heads, kv_heads)`` of a ``results.json`` or a speed row. Those written before
    grouped-query attention have no ``kv_heads``: they were multi-head, kv_heads = heads."""
    heads = int(entry["heads"])
    kv = entry.get("kv_heads")
    return heads, heads if kv is None else int(kv)


def choose_baseline(keys, preferred: int) -> int | None:
    """The head count of the row every other is compared with: ``preferred`` where the sweep
    has that multi-head row (kv_heads = heads), else its largest multi-head head count (a sweep
    of 1 and 4 heads compares with 4); None where no row is multi-head."""
    multi_head = sorted(heads for heads, kv in keys if heads == kv)
    if preferred in multi_head:
        return preferred
    return multi_head[-1] if multi_head else None


def key_label(key: Key, kv_axis: bool) -> str:
    """``heads=8`` in a plain heads sweep, ``heads=8,kv_heads=2`` in one that varies kv_heads."""
    heads, kv = key
    return f"heads={heads},kv_heads={kv}" if kv_axis else f"heads={heads}"


def _counts(params: set) -> str:
    ordered = sorted(params, key=lambda p: (p is None, p if isinstance(p, int) else 0))
    return ", ".join(f"{p:,}" if isinstance(p, int) else str(p) for p in ordered)


def check_equal_params(jobs: list) -> tuple[bool, str]:
    """Whether the finished jobs' parameter counts are what the sweep intends (False raises
    the report's alarm), and a sentence saying so. A plain heads sweep needs one count for
    all; with a kv_heads axis the count rightly depends on kv_heads (:func:`_kv_params`)."""
    by_key: dict[Key, set] = {}
    for job in jobs:
        if job.completed:
            by_key.setdefault(heads_key(job.results), set()).add(job.results.get("params"))
    if not by_key:
        return True, "no finished jobs to compare"
    if any(kv != heads for heads, kv in by_key):
        return _kv_params(by_key)
    counts = {p for ps in by_key.values() for p in ps}
    if len(counts) == 1:
        (params,) = counts
        return True, (
            f"every run has the same parameter count, {_counts(counts)}: the head count only "
            "splits the same width d_model into heads of d_k = d_model / heads"
        )
    detail = "; ".join(f"heads={h}: {_counts(ps)}" for (h, _), ps in sorted(by_key.items()))
    return False, (
        f"PARAMETER COUNTS DIFFER ({detail}): the rows are not models of equal size, so BLEU "
        "differences cannot be put down to the number of heads alone"
    )


def _kv_params(by_key: dict[Key, set]) -> tuple[bool, str]:
    """The parameter check of a sweep with fewer key/value heads than heads somewhere: the
    jobs of each row must agree, and so must all multi-head rows (kv_heads = heads), whose
    size the head count alone does not change."""
    mha = {key: ps for key, ps in by_key.items() if key[0] == key[1]}
    mha_differ = len({p for ps in mha.values() for p in ps}) > 1
    wrong = {key: ps for key, ps in by_key.items() if len(ps) > 1 or (mha_differ and key in mha)}
    if wrong:
        detail = "; ".join(f"{key_label(k, True)}: {_counts(p)}" for k, p in sorted(wrong.items()))
        return False, (
            f"PARAMETER COUNTS DIFFER ({detail}): jobs of one heads/kv_heads pair, or the "
            "multi-head rows (kv_heads = heads), are not models of equal size, so BLEU "
            "differences cannot be put down to the heads alone"
        )
    rows = "; ".join(f"{key_label(k, True)}: {_counts(ps)}" for k, ps in sorted(by_key.items()))
    return True, (
        f"the parameter count depends on kv_heads, as grouped-query attention intends ({rows}): "
        "the key and value projections of every attention module shrink to kv_heads x d_k "
        "outputs (from heads x d_k), so fewer key/value heads mean a smaller model; the jobs "
        "of each row agree" + (", and so do the multi-head rows" if len(mha) > 1 else "")
    )


def _read_lines(path: Path) -> list[str] | None:
    if not path.is_file():
        return None
    # split("\n"), not splitlines(): a hypothesis may contain other Unicode line breaks.
    return path.read_text(encoding="utf-8").split("\n")[:-1]


@functools.lru_cache(maxsize=256)
def _paired_p(
    baseline: tuple[str, ...], hyp: tuple[str, ...], ref: tuple[str, ...], n_samples: int
) -> tuple[float, str]:
    """``(p, signature)`` of one paired bootstrap, remembered for the process: the sweep
    callback writes the report after every job, and each report re-ran the test of every
    finished pair (9 s of a 10 s report over the 20-job study, measured), also after each
    finished job a resumed sweep skips. Seeded, so a remembered p is the one a new test gives."""
    from translate.metrics import paired_bootstrap

    test = paired_bootstrap(list(baseline), {"run": list(hyp)}, list(ref), n_samples=n_samples)
    return test["run"]["p_value"], test["run"]["signature"]


def significance(groups: dict, baseline: Key, n_samples, warnings) -> tuple[dict, str | None]:
    """``{(heads, kv_heads): {"pooled": p, seed: p, ...}}``: paired bootstrap of each run's
    test hypotheses against the baseline row's run of the same seed, per seed and pooled."""
    base = {}
    for job in groups.get(baseline, []):
        base.setdefault(job.results.get("seed"), job)
    out, signature = {}, None
    for key, jobs in groups.items():
        if key == baseline or not base:
            continue
        per_seed, pooled = {}, ([], [], [])
        for job in jobs:
            seed = job.results.get("seed")
            other = base.get(seed)
            if other is None or seed in per_seed:
                continue
            hyp, ref = (
                _read_lines(job.path / "test.hyp.txt"),
                _read_lines(job.path / "test.ref.txt"),
            )
            base_hyp = _read_lines(other.path / "test.hyp.txt")
            base_ref = _read_lines(other.path / "test.ref.txt")
            if None in (hyp, ref, base_hyp, base_ref) or ref != base_ref or len(hyp) != len(ref):
                warnings.append(
                    f"no significance test for {job.name} against {other.name}: test.hyp.txt / "
                    "test.ref.txt missing, of different length or with different references"
                )
                continue
            texts = (tuple(base_hyp), tuple(hyp), tuple(ref))
            per_seed[seed], signature = _paired_p(*texts, n_samples)
            for part, lines in zip(pooled, (base_hyp, hyp, ref)):
                part.extend(lines)
        if len(per_seed) > 1:
            per_seed["pooled"], _ = _paired_p(*map(tuple, pooled), n_samples)
        elif per_seed:
            per_seed["pooled"] = next(iter(per_seed.values()))
        out[key] = per_seed
    return out, signature
