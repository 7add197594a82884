"""The heads-ablation report's statistics: the parameter check, the seed-level tests (which
decide the summary) and the paired bootstrap against the baseline row (docs/ablation.md). Imported
when Hydra starts: scipy and sacreBLEU only inside the functions that use them."""

from __future__ import annotations

import functools
import math
import statistics
import warnings

Key = tuple[int, int]  # (heads, kv_heads) of a row
CONFIDENCE = 0.95  # of the interval of a row's mean (the CSV's bleu_ci95_* columns)
LEVEL = 0.05  # a difference is detected where the seed-level p-values are below it
# Splits of the pooled seeds the permutation test enumerates at most (10 and 10 seeds: 184,756).
MAX_ARRANGEMENTS = 1_000_000


def heads_key(entry: dict) -> Key:
    """``(heads, kv_heads)``; an entry without kv_heads (from before GQA) is multi-head."""
    heads, kv = int(entry["heads"]), entry.get("kv_heads")
    return heads, heads if kv is None else int(kv)


def choose_baseline(keys, preferred: int) -> int | None:
    """``preferred`` where it is a multi-head row (kv_heads = heads), else the largest; or None."""
    multi_head = {heads for heads, kv in keys if heads == kv}
    return preferred if preferred in multi_head else max(multi_head, default=None)


def key_label(key: Key, kv_axis: bool) -> str:
    return f"heads={key[0]},kv_heads={key[1]}" if kv_axis else f"heads={key[0]}"


def p_column(baseline: int, test: str = "") -> str:
    """``p_vs_8`` (the paired bootstrap), ``p_vs_8_welch``, ``p_vs_8_seed1``, ..."""
    return f"p_vs_{baseline}" + (f"_{test}" if test else "")


def mean_std(values) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation of the values that are not None (None: too few)."""
    values = [v for v in values if v is not None]
    mean = statistics.fmean(values) if values else None
    return mean, statistics.stdev(values) if len(values) >= 2 else None


def _counts(params: set) -> str:
    ordered = sorted(params, key=lambda p: (p is None, p if isinstance(p, int) else 0))
    return ", ".join(f"{p:,}" if isinstance(p, int) else str(p) for p in ordered)


def check_equal_params(jobs: list) -> tuple[bool, str]:
    """Whether the finished jobs' parameter counts are as the sweep intends, and a sentence."""
    by_key: dict[Key, set] = {}
    for job in (j for j in jobs if j.completed):
        by_key.setdefault(heads_key(job.results), set()).add(job.results.get("params"))
    if not by_key:
        return True, "no finished jobs to compare"
    kv_axis = any(kv != heads for heads, kv in by_key)
    mha = {key: ps for key, ps in by_key.items() if key[0] == key[1]}
    mha_counts = set().union(*mha.values())  # every count in a plain heads sweep
    mha_differ = len(mha_counts) > 1
    wrong = {k: ps for k, ps in by_key.items() if len(ps) > 1 or (mha_differ and k in mha)}
    if wrong:
        detail = "; ".join(f"{key_label(k, kv_axis)}: {_counts(wrong[k])}" for k in sorted(wrong))
        which = "jobs of one heads/kv_heads pair, or the multi-head rows (kv_heads = heads), are"
        return False, (
            f"PARAMETER COUNTS DIFFER ({detail}): {which if kv_axis else 'the rows are'} not "
            "models of equal size, so BLEU differences cannot be put down to the "
            + ("heads alone" if kv_axis else "number of heads alone")
        )
    if not kv_axis:
        return True, f"every run has the same parameter count, {_counts(mha_counts)}"
    rows = "; ".join(f"{key_label(k, True)}: {_counts(ps)}" for k, ps in sorted(by_key.items()))
    return True, (
        f"the parameter count depends on kv_heads, as grouped-query attention intends ({rows}); "
        "the jobs of each row agree" + (", and so do the multi-head rows" if len(mha) > 1 else "")
    )


def seed_bleus(jobs: list) -> list[float]:
    return [j.results["bleu"] for j in jobs if j.results.get("bleu") is not None]


def ci_of_mean(values: list[float]) -> tuple[float | None, float | None]:
    """The :data:`CONFIDENCE` t interval of the mean; ``(None, None)`` under two values."""
    n = len(values)
    if n < 2:
        return None, None
    from scipy import stats

    half = stats.t.ppf((1 + CONFIDENCE) / 2, n - 1) * statistics.stdev(values) / math.sqrt(n)
    mean = statistics.fmean(values)
    return mean - half, mean + half


def welch_p(a: list[float], b: list[float]) -> float | None:
    """Welch's two-sided p; None under two values a side or with no spread at all."""
    if min(len(a), len(b)) < 2 or statistics.pvariance(a) == statistics.pvariance(b) == 0:
        return None
    from scipy import stats

    with warnings.catch_warnings():
        # scipy warns of precision loss for a side whose seeds agree exactly; its variance is
        # then ~0 and the other side's carries the test, as Welch's formula has it.
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


def smallest_permutation_p(n_a: int, n_b: int) -> float:
    """The observed split and its mirror image out of all (0.1 at 3 and 3 seeds)."""
    return min(1.0, 2 / math.comb(n_a + n_b, n_a))


def permutation_p(a: list[float], b: list[float]) -> float | None:
    """The exact two-sided permutation test of the difference in means; None under two values
    a side or past :data:`MAX_ARRANGEMENTS` splits (Welch's test then stands alone)."""
    splits = math.comb(len(a) + len(b), len(a))
    if min(len(a), len(b)) < 2 or splits > MAX_ARRANGEMENTS:
        return None
    import numpy as np
    from scipy import stats

    result = stats.permutation_test(
        (a, b),
        lambda x, y, axis: np.mean(x, axis=axis) - np.mean(y, axis=axis),
        permutation_type="independent",
        vectorized=True,
        n_resamples=splits,  # as many as there are splits: exact
        alternative="two-sided",
    )
    return float(result.pvalue)


def detected(*p_values: float | None) -> bool | None:
    """The seed-level decision rule: detected where every test that could run is below
    :data:`LEVEL` (choosing the smaller p would test twice); None where none could."""
    known = [p for p in p_values if p is not None]
    return all(p < LEVEL for p in known) if known else None


def p_value_cells(
    groups: dict, baseline: int | None, seeds: list, n_samples: int, warnings: list[str]
) -> tuple[dict, str | None]:
    """``({key: {column: p}}, bootstrap signature)``: each row against the baseline row, the
    seed-level tests', then the paired bootstrap's, pooled and per seed."""
    base = (baseline, baseline)
    if base not in groups:
        return {key: {} for key in groups}, None
    columns = [p_column(baseline, test) for test in ("welch", "permutation", "")]
    columns += [p_column(baseline, f"seed{seed}") for seed in seeds]
    cells, signature = {}, None
    for key, jobs in groups.items():
        if key == base:
            cells[key] = dict.fromkeys(columns, "baseline")
            continue
        bleus, base_bleus = seed_bleus(jobs), seed_bleus(groups[base])
        ps = [welch_p(bleus, base_bleus), permutation_p(bleus, base_bleus)]
        bootstrap, tested = _bootstrap(jobs, groups[base], n_samples, warnings)
        signature = tested or signature
        cells[key] = dict(zip(columns, ps + [bootstrap.get(s) for s in ("pooled", *seeds)]))
    return cells, signature


def _bootstrap(jobs, base_jobs, n_samples: int, warnings: list[str]) -> tuple[dict, str | None]:
    """``({seed: p, ..., "pooled": p}, signature)``: each job against the baseline of its seed."""
    base = {job.results.get("seed"): job for job in reversed(base_jobs)}  # a seed's first
    per_seed, pooled, signature = {}, ([], [], []), None
    for job in jobs:
        seed = job.results.get("seed")
        if seed in base and seed not in per_seed and (texts := _pair(job, base[seed], warnings)):
            per_seed[seed], signature = _paired_p(*map(tuple, texts), n_samples)
            for part, lines in zip(pooled, texts):
                part.extend(lines)
    if per_seed:  # one seed: the same pair as its own test, remembered by _paired_p
        per_seed["pooled"], _ = _paired_p(*map(tuple, pooled), n_samples)
    return per_seed, signature


@functools.lru_cache(maxsize=256)
def _paired_p(
    baseline: tuple[str, ...], hyp: tuple[str, ...], ref: tuple[str, ...], n_samples: int
) -> tuple[float, str]:
    # Remembered: the sweep writes the report after every job, and re-testing every finished
    # pair took 9 s of a 10 s report over the 20-job study.
    from translate.metrics import paired_bootstrap

    test = paired_bootstrap(list(baseline), {"run": list(hyp)}, list(ref), n_samples=n_samples)
    return test["run"]["p_value"], test["run"]["signature"]


def _pair(job, other, warnings: list[str]) -> tuple[list, list, list] | None:
    """``(baseline hyp, hyp, ref)`` of a job and its seed's baseline job, or None and a warning."""
    paths = [j.path / f"test.{kind}.txt" for j in (job, other) for kind in ("hyp", "ref")]
    # split("\n"), not splitlines(): a hypothesis may contain other Unicode line breaks.
    hyp, ref, base_hyp, base_ref = (
        p.read_text(encoding="utf-8").split("\n")[:-1] if p.is_file() else None for p in paths
    )
    if None in (hyp, ref, base_hyp, base_ref) or ref != base_ref or len(hyp) != len(ref):
        warnings.append(
            f"no significance test for {job.name} against {other.name}: test.hyp.txt / "
            "test.ref.txt missing, of different length or with different references"
        )
        return None
    return base_hyp, hyp, ref
