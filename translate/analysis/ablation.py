"""The heads-ablation report: one row per head count (and kv head count), from a multirun.

:func:`build_report` reads every job dir's ``results.json`` and ``.hydra/overrides.yaml`` under
a sweep dir and groups the finished jobs by ``(heads, kv_heads)``: one row per head count in a
plain heads sweep, one per key/value head count in a grouped-query sweep (``kv_heads=1,2,4,8``;
a ``results.json`` without ``kv_heads`` predates GQA and was multi-head). Failed jobs (a job
dir without ``results.json``) and jobs the sweep defines but never started (the caller's
``expected_jobs``, e.g. :func:`translate.sweeps.expected_jobs` from ``multirun.yaml``) are
listed, never dropped silently. BLEU differences are tested against the baseline row, the
8-head multi-head one (kv_heads = 8) or, in a sweep without it, the largest multi-head head
count (:func:`translate.analysis.ablation_stats.choose_baseline`; the p-value columns are named
for it: ``p_vs_8_welch``, ``p_vs_4_welch``) across seeds (:mod:`translate.analysis.seed_stats`:
a 95% interval of each mean, Welch's and an exact permutation test) and with sacreBLEU's paired
bootstrap on the test hypotheses each job wrote (``test.hyp.txt``), which measures test-set
sampling only. Each row records its jobs' commits and machines
(:mod:`translate.analysis.provenance`); a results.json whose fields training could not have
written lists its job as failed. The speed columns come from the sweep dir's
``ablation_speed.json`` (:mod:`translate.analysis.speed_file`) when it has one. The parameter
check and the bootstrap are :mod:`translate.analysis.ablation_stats`.

Rendering is :mod:`translate.analysis.ablation_files`; Hydra's side (the callback, expanding
the sweep, writing the files) is :mod:`translate.sweeps`. This module imports neither Hydra
nor OmegaConf.

It is imported when Hydra starts (for the callback): keep heavy imports (matplotlib,
sacreBLEU, torch) inside the functions that need them.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from translate.analysis.ablation_stats import (
    Key,
    check_equal_params,
    choose_baseline,
    heads_key,
    key_label,
    significance,
)
from translate.analysis.provenance import job_provenance, provenance_warning
from translate.analysis.seed_stats import ci_of_mean, permutation_p, welch_p
from translate.analysis.speed_file import read_speed, speed_cells
from translate.errors import UserError
from translate.fields import Field, field_problem, number, of_type, whole

BASELINE_HEADS = 8
# Overrides that change how or where a job runs, never what it trains: jobs that differ only in
# these are still one experiment (a study split over commands with other thread counts, say).
# The settings' mechanics keys (translate.settings.mechanics_keys, which imports torch: this
# module must not), and the trainer.* names of the runtime ones before the runtime group, in
# older sweeps; tests/analysis/test_ablation.py checks that the two lists agree.
RUN_ONLY_KEYS = (
    *("trainer.resume", "trainer.overwrite", "trainer.progress_bar", "trainer.attention_heatmaps"),
    *("runtime.device", "runtime.num_threads", "runtime.keep_freed_memory"),
    *("data.cache_dir", "run_dir"),
    *("trainer.device", "trainer.num_threads", "trainer.keep_freed_memory"),
)
# (swept_keys, one {key: value} per job) the sweep defines; see translate.sweeps.expected_jobs.
ExpectedJobs = Callable[[Path], tuple[list[str], list[dict[str, str]]]]
# results.json keys averaged over seeds -> whether the row also gets their standard deviation.
# Not its speed fields: each job measured them alone, at another time, beside other work; the
# rows take speed from ablation_speed.json, measured side by side (translate.analysis.speed).
METRICS = {
    "bleu": True,
    "chrf": True,
    "dev_bleu": True,  # of the scored checkpoint: see scored_dev_bleu
    "bleu_greedy": True,  # None in runs that decoded greedily (beam_size 1)
    "steps": False,
}


def scored_dev_bleu(results: dict) -> float | None:
    """Dev BLEU of the checkpoint the test split was scored with: the averaged checkpoint's
    when it won (``scored_checkpoint: averaged``), else best.pt's (``dev_bleu``), so that the
    report's dev and test columns describe the same weights."""
    averaged = results.get("averaged_dev_bleu")
    if results.get("scored_checkpoint") == "averaged" and averaged is not None:
        return averaged
    return results.get("dev_bleu")


@dataclass
class Job:
    """One job dir of the sweep."""

    name: str  # its path under the sweep dir, e.g. "heads=4,seed=2"
    path: Path
    overrides: dict[str, str]  # from .hydra/overrides.yaml, e.g. {"heads": "4", "seed": "2"}
    results: dict | None  # results.json, None if it has none
    error: str | None = None  # why it has no (completed) results

    @property
    def completed(self) -> bool:
        return self.results is not None and self.results.get("status", "completed") == "completed"


@dataclass
class Report:
    sweep_dir: Path
    rows: list[dict]  # one per (heads, kv_heads), ascending
    jobs: list[Job]
    failed: list[Job]
    missing: list[str]  # swept overrides of jobs the sweep defines but that have no dir
    seeds: list
    params_equal: bool  # the parameter check passed (with a kv axis: equal where it must be)
    params_message: str
    warnings: list[str] = field(default_factory=list)
    bootstrap_signature: str | None = None
    speed: dict | None = None  # ablation_speed.json, None when the sweep dir has none
    # The head count of the row the p-values compare with (None: no multi-head row), and the
    # one asked for: they differ where the sweep has no row of the asked head count.
    baseline_heads: int | None = BASELINE_HEADS
    asked_baseline: int = BASELINE_HEADS
    written: list[Path] = field(default_factory=list)  # the files write_files wrote

    @property
    def kv_axis(self) -> bool:
        """Whether some row has fewer key/value heads than heads: only then do the files show
        kv_heads, so that a plain heads sweep's report reads as it did before GQA."""
        return any(r["kv_heads"] != r["heads"] for r in self.rows)


# ------------------------------------------------------------------------ reading jobs


def parse_overrides(lines) -> dict[str, str]:
    """``["heads=4", "+x=1"]`` -> ``{"heads": "4", "x": "1"}`` (Hydra override strings)."""
    out = {}
    for line in lines or []:
        key, sep, value = str(line).partition("=")
        if sep:
            out[key.lstrip("+~")] = value
    return out


_SCORE = Field(number(0, 100), "a number in [0, 100]", null=True)
_COUNT = Field(whole(0), "a whole number >= 0", null=True)
# results.json fields the report computes with -> what a training run writes there: scores
# in [0, 100] (or null: not computed), counts, never NaN or infinity (which json reads).
RESULTS_FIELDS = {
    "heads": Field(whole(1), "a whole number >= 1", required=True),
    "kv_heads": Field(whole(1), "a whole number >= 1", null=True),
    "seed": Field(whole(), "a whole number", null=True),
    "params": _COUNT,
    "steps": _COUNT,
    **{key: _SCORE for key in ("bleu", "chrf", "dev_bleu", "bleu_greedy", "averaged_dev_bleu")},
    "head_summary": Field(of_type(dict), "an object", null=True),
    "head_summary.entropy": Field(
        lambda v: isinstance(v, dict) and all(map(number(0), v.values())),
        "an object of numbers >= 0",
    ),
    "head_summary.degenerate_heads": _COUNT,
    "head_summary.total_heads": _COUNT,
    "provenance": Field(of_type(dict), "an object", null=True),
}


def field_error(results) -> str | None:
    """What in a results.json the report cannot compute with (a hand-edited file), naming the
    field; None when every field it reads is what training writes there."""
    if not isinstance(results, dict):
        return "not a JSON object"
    return field_problem(results, RESULTS_FIELDS)


def _failure_reason(job_dir: Path) -> str:
    error = job_dir / "error.txt"  # written by translate.sweeps' callback when the job raised
    if error.is_file():
        return error.read_text(encoding="utf-8").strip().splitlines()[-1]
    for log_file in sorted(job_dir.glob("*.log")):
        text = log_file.read_text(errors="replace").splitlines()
        lines = [ln for ln in text if "[ERROR]" in ln or "error:" in ln]
        if lines:
            return lines[-1].strip()
    return "no results.json: the job failed or was stopped before it finished (see its log)"


def _natural_key(path: Path) -> list:
    """``heads=4,seed=2`` before ``heads=16,seed=1``: the numbers in a job dir's name compare as
    numbers (``re.split`` with a group alternates text and digits, so the types line up)."""
    parts = re.split(r"(\d+)", path.as_posix())
    return [int(p) if i % 2 else p for i, p in enumerate(parts)]


def find_jobs(sweep_dir: Path) -> list[Job]:
    """Every job dir under ``sweep_dir``: those with ``.hydra/overrides.yaml`` or results."""
    dirs = {p.parent.parent for p in sweep_dir.rglob("overrides.yaml") if p.parent.name == ".hydra"}
    dirs |= {p.parent for p in sweep_dir.rglob("results.json")}
    dirs.discard(sweep_dir)
    jobs = []
    for job_dir in sorted(dirs, key=_natural_key):
        overrides_file = job_dir / ".hydra" / "overrides.yaml"
        overrides = {}
        if overrides_file.is_file():
            overrides = parse_overrides(yaml.safe_load(overrides_file.read_text()))
        results, error = None, None
        results_file = job_dir / "results.json"
        if results_file.is_file():
            try:
                results = json.loads(results_file.read_text(encoding="utf-8"))
                error = field_error(results)
            except json.JSONDecodeError as err:
                error = f"not valid JSON ({err})"
            if error is not None:  # the job is listed as failed, with the reason
                results, error = None, f"{results_file}: {error}; fix it and report again"
        job = Job(str(job_dir.relative_to(sweep_dir)), job_dir, overrides, results, error)
        if not job.completed and job.error is None:
            job.error = (
                _failure_reason(job_dir)
                if results is None
                else f"status {results.get('status')!r} in results.json"
            )
        jobs.append(job)
    return jobs


def p_column(baseline: int, test: str = "") -> str:
    """A p-value column against the baseline row, named for its head count: ``p_vs_8`` (the
    paired bootstrap), ``p_vs_8_welch``, ``p_vs_8_seed1``; ``p_vs_4_welch`` against 4 heads."""
    return f"p_vs_{baseline}" + (f"_{test}" if test else "")


def _label(overrides: dict[str, str], keys: list[str]) -> str:
    return ",".join(f"{k}={overrides.get(k, '?')}" for k in keys)


# ------------------------------------------------------------------------ statistics


def _mean(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def _std(values: list) -> float | None:
    """Sample standard deviation over seeds; None with fewer than two values."""
    values = [v for v in values if v is not None]
    return statistics.stdev(values) if len(values) >= 2 else None


def _bleus(jobs: list[Job]) -> list[float]:
    """The jobs' test BLEU, one value per seed: the seed-level statistics' observations."""
    return [j.results["bleu"] for j in jobs if j.results.get("bleu") is not None]


def _missing(sweep_dir, jobs, expected_jobs, warnings) -> list[str]:
    """Labels of the jobs ``expected_jobs`` says the sweep defines that have no job dir."""
    keys, expected = [], []
    if expected_jobs is not None:
        try:
            keys, expected = expected_jobs(sweep_dir)
        except Exception as err:  # a malformed multirun.yaml must not cost the report
            warnings.append(f"could not read the sweep's job list from multirun.yaml ({err})")
    if not keys:  # a one-job "sweep" defines nothing beyond the dir it made
        return []
    found = {_label(j.overrides, keys) for j in jobs}
    return [lbl for lbl in (_label(e, keys) for e in expected) if lbl not in found]


def _group_rows(done: list[Job], warnings: list[str]) -> dict[Key, list[Job]]:
    """The finished jobs by (heads, kv_heads), sorted by seed; warns when the sweep varies
    more than those and the seed."""
    groups: dict[Key, list[Job]] = {}
    for job in done:
        groups.setdefault(heads_key(job.results), []).append(job)
    kv_axis = any(kv != heads for heads, kv in groups)
    axes = "heads, kv_heads and seed" if kv_axis else "heads and seed"
    for key, members in groups.items():
        members.sort(key=lambda j: (str(j.results.get("seed")), j.name))
        seeds = [j.results.get("seed") for j in members]
        if len(set(seeds)) < len(seeds):
            warnings.append(
                f"{key_label(key, kv_axis)} has several jobs with the same seed "
                f"({', '.join(j.name for j in members)}): the sweep varies more than {axes}, "
                "and this row averages over it"
            )
    # Either spelling of the kv override is a row axis already (the key is from results.json).
    ignored = ("heads", "kv_heads", "model.num_kv_heads", "seed", *RUN_ONLY_KEYS)
    others = {
        json.dumps({k: v for k, v in j.overrides.items() if k not in ignored}, sort_keys=True)
        for j in done
        if j.overrides
    }
    if len(others) > 1:
        warnings.append(f"the finished jobs differ in more than {axes}: {sorted(others)}")
    return groups


SWEEP_DIR_HINT = "give the dir a multirun made, e.g. outputs/multirun/<date_time>"


def existing_sweep_dir(sweep_dir: str | Path) -> Path:
    """``sweep_dir`` as a folder; one line for a path that is missing or is a file."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.exists():
        raise UserError(f"sweep dir {sweep_dir} does not exist")
    if not sweep_dir.is_dir():
        raise UserError(f"{sweep_dir} is a file, not a sweep dir: {SWEEP_DIR_HINT}")
    return sweep_dir


def check_sweep_dir(sweep_dir: str | Path) -> None:
    """Refuse in one line a folder that is none or holds no sweep job (a single run's dir, an
    empty or mistyped folder): its report would be an empty one, written into it."""
    sweep_dir = existing_sweep_dir(sweep_dir)
    if find_jobs(sweep_dir):
        return
    single = (sweep_dir / "results.json").is_file()
    raise UserError(
        f"{sweep_dir} holds no sweep jobs (no job dir with .hydra/overrides.yaml or "
        f"results.json below it{'; it is a single run' if single else ''}): {SWEEP_DIR_HINT}; "
        "nothing written"
    )


def build_report(
    sweep_dir: str | Path,
    baseline_heads: int = BASELINE_HEADS,
    bootstrap_samples: int = 1000,
    *,
    expected_jobs: ExpectedJobs | None = None,
) -> Report:
    """Read the sweep and compute the rows; writes nothing.

    ``expected_jobs(sweep_dir)`` lists the jobs the sweep defines, so that the ones without a
    job dir are reported as missing; without it no job is missing.
    """
    sweep_dir = existing_sweep_dir(sweep_dir)
    jobs = find_jobs(sweep_dir)
    warnings: list[str] = []
    missing = _missing(sweep_dir, jobs, expected_jobs, warnings)
    done = [j for j in jobs if j.completed]
    groups = _group_rows(done, warnings)
    params_equal, params_message = check_equal_params(jobs)
    if not params_equal:
        warnings.insert(0, params_message)
    mixed = provenance_warning([j.results for j in done])
    warnings += [mixed] if mixed else []
    # The baseline is plain multi-head attention, also in a kv_heads sweep: kv_heads = heads.
    baseline = choose_baseline(groups, baseline_heads)
    base = (baseline, baseline)
    p_values, signature = significance(groups, base, bootstrap_samples, warnings)
    all_seeds = sorted({j.results.get("seed") for j in done}, key=str)
    rows = [
        _row(key, groups[key], all_seeds, _p_cells(key, groups, base, p_values, all_seeds))
        for key in sorted(groups)
    ]
    speed = read_speed(sweep_dir, [j.name for j in done], warnings)
    for row in rows if speed else []:
        row.update(speed_cells(speed, row["heads"], row["kv_heads"]))
    failed = [j for j in jobs if not j.completed]
    return Report(
        sweep_dir,
        rows,
        jobs,
        failed,
        missing,
        all_seeds,
        params_equal,
        params_message,
        warnings,
        signature,
        speed,
        baseline,
        baseline_heads,
    )


def _row(key: Key, jobs: list[Job], seeds: list, p_cells: dict) -> dict:
    """One row: its jobs' means and spreads, per-seed BLEU, heads, ``p_cells`` (its p-values)
    and provenance."""
    res = [j.results for j in jobs]
    params = sorted({r.get("params") for r in res}, key=str)
    row = {
        "heads": key[0],
        "kv_heads": key[1],
        "d_k": res[0].get("d_k"),
        "params": params[0] if len(params) == 1 else " / ".join(str(p) for p in params),
        "seeds": " ".join(str(r.get("seed")) for r in res),
        "n": len(res),
    }
    for key, with_std in METRICS.items():
        values = [scored_dev_bleu(r) if key == "dev_bleu" else r.get(key) for r in res]
        row[f"{key}_mean"] = _mean(values)
        if with_std:
            row[f"{key}_std"] = _std(values)
    by_seed = {r.get("seed"): r for r in res}
    for seed in seeds:
        row[f"bleu_seed{seed}"] = by_seed.get(seed, {}).get("bleu")
    row["bleu_ci95_low"], row["bleu_ci95_high"] = ci_of_mean(_bleus(jobs))
    # Imported here, not at the top: translate.nn.model imports torch, and this module is
    # imported when Hydra starts (for the callback), which must stay cheap.
    from translate.nn.model import HEAD_MASK_KEYS

    summaries = [r.get("head_summary") or {} for r in res]
    for kind in HEAD_MASK_KEYS:
        row[f"entropy_{kind}"] = _mean([s.get("entropy", {}).get(kind) for s in summaries])
    row["degenerate_heads"] = _mean([s.get("degenerate_heads") for s in summaries])
    row["total_heads"] = _mean([s.get("total_heads") for s in summaries])
    row.update(p_cells)
    for seed in seeds:
        code, where = job_provenance(by_seed[seed]) if seed in by_seed else (None, None)
        row[f"commit_seed{seed}"], row[f"machine_seed{seed}"] = code, where
    return row


def _p_cells(key: Key, groups: dict, base: Key, p_values: dict, seeds: list) -> dict:
    """A row's p-values against the ``base`` row, in columns named for its head count: the
    seed-level tests, then the paired bootstrap's (test-set sampling only), pooled and per
    seed. Empty without a baseline row (no multi-head row in a kv_heads sweep)."""
    if base not in groups:
        return {}
    if key == base:
        names = ["welch", "permutation", "", *(f"seed{seed}" for seed in seeds)]
        return {p_column(base[0], name): "baseline" for name in names}
    bleus, base_bleus = _bleus(groups[key]), _bleus(groups[base])
    cells = {p_column(base[0], "welch"): welch_p(bleus, base_bleus)}
    cells[p_column(base[0], "permutation")] = permutation_p(bleus, base_bleus)
    bootstrap = p_values.get(key, {})
    cells[p_column(base[0])] = bootstrap.get("pooled")
    for seed in seeds:
        cells[p_column(base[0], f"seed{seed}")] = bootstrap.get(seed)
    return cells
