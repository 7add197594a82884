"""The heads ablation's results from a sweep dir's files alone: every job (or why it has no
results) and the report's rows, one per ``(heads, kv_heads)``, with the columns of
``ablation_speed.json`` and ``ablation_align.json``. Imported when Hydra starts (for the
callback): no Hydra, OmegaConf or torch at module level."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from translate.ablation import stats
from translate.ablation.stats import Key, heads_key, mean_std
from translate.errors import UserError, counted
from translate.fields import Field, field_problem, number, of_type, or_null, whole
from translate.training.rundir import parse_overrides

BASELINE_HEADS = 8
# results.json keys averaged over seeds -> whether the row also gets their standard deviation.
# Not the jobs' own speed fields, each measured alone beside other work.
METRICS = {"bleu": True, "chrf": True, "dev_bleu": True, "bleu_greedy": True, "steps": False}
SWEEP_DIR_HINT = "give the dir a multirun made, e.g. outputs/multirun/<date_time>"


# A job's heads, in results.json and in each job entry of the speed and align files.
_HEADS = {
    "heads": Field(whole(1), "a whole number >= 1", required=True),
    "kv_heads": Field(or_null(whole(1)), "a whole number >= 1"),  # absent before GQA
}
# The fields of a job's results.json the report reads: a hand-edited one is a failed job with
# its reason, not a traceback. All but heads may be null.
RESULTS_FIELDS = {
    **_HEADS,
    **{k: Field(or_null(number), "a number") for k in METRICS if k != "steps"},
    "averaged_dev_bleu": Field(or_null(number), "a number"),
    "steps": Field(or_null(whole(0)), "a whole number >= 0"),
    "params": Field(or_null(whole(0)), "a whole number >= 0"),
    "provenance": Field(or_null(of_type(dict)), "an object"),
    "head_summary": Field(or_null(of_type(dict)), "an object"),
}


def at_least_one(counts: list[tuple[str, int]]) -> None:
    """Refuse an option's count below 1 (``--rounds 0``), in one line before any work."""
    for option, count in counts:
        if count < 1:
            raise UserError(f"{option} {count} must be >= 1")


def _object_problem(data, fields: dict[str, Field]) -> str | None:
    """What makes a JSON file's ``data`` other than its writer writes it; None if nothing."""
    return field_problem(data, fields) if isinstance(data, dict) else "not a JSON object"


def scored_dev_bleu(results: dict) -> float | None:
    # The checkpoint scored on test (averaged.pt where it won): both columns, the same weights.
    averaged = results.get("averaged_dev_bleu")
    if results.get("scored_checkpoint") == "averaged" and averaged is not None:
        return averaged
    return results.get("dev_bleu")


def job_provenance(results: dict) -> tuple[str | None, str | None]:
    """``(commit, machine)`` of a job; ``(None, None)`` from before they were recorded."""
    p = results.get("provenance")
    if p is None:
        return None, None
    code = f"translate {p.get('package_version')}, no checkout"
    if p.get("git_commit"):
        code = p["git_commit"][:9] + ("+dirty" if p.get("git_dirty") else "")
    where = (
        f"{p.get('device_name')}, {counted(p.get('threads'), 'thread')}, torch {p.get('torch')} "
        f"{p.get('cpu_capability')}"
    )
    return code, where


def provenance_warning(results: list[dict]) -> str | None:
    # The seeds' spread does not show BLEU that differs by commit or machine.
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


@dataclass
class Job:
    name: str  # its path under the sweep dir, e.g. "heads=4,seed=2"
    path: Path
    overrides: dict[str, str]  # from .hydra/overrides.yaml, e.g. {"heads": "4", "seed": "2"}
    results: dict | None  # results.json, written when the job completed
    error: str | None = None  # why it has no results

    @property
    def completed(self) -> bool:
        return self.results is not None


@dataclass
class Report:
    sweep_dir: Path
    rows: list[dict]  # one per (heads, kv_heads), ascending
    jobs: list[Job]
    seeds: list
    params_equal: bool  # the parameter check passed (with a kv axis: equal where it must be)
    params_message: str
    warnings: list[str]
    bootstrap_signature: str | None
    speed: dict | None = None  # ablation_speed.json, None when the sweep dir has none
    align: dict | None = None  # ablation_align.json, None when the sweep dir has none
    # The row the p-values compare with (None: no multi-head row), and the one asked for.
    baseline_heads: int | None = BASELINE_HEADS
    asked_baseline: int = BASELINE_HEADS
    missing: list[str] = field(default_factory=list)  # set by translate.ablation.report
    written: list[Path] = field(default_factory=list)  # the files the report wrote

    @property
    def failed(self) -> list[Job]:
        return [j for j in self.jobs if not j.completed]

    @property
    def kv_axis(self) -> bool:  # only then do the files show kv heads
        return any(r["kv_heads"] != r["heads"] for r in self.rows)


def job_fields(job: Job) -> dict:
    heads, kv = heads_key(job.results)
    return {"name": job.name, "heads": heads, "kv_heads": kv, "seed": job.results.get("seed")}


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


def _read_job(sweep_dir: Path, job_dir: Path) -> Job:
    overrides_file, results_file = job_dir / ".hydra" / "overrides.yaml", job_dir / "results.json"
    job = Job(str(job_dir.relative_to(sweep_dir)), job_dir, {}, None)
    try:
        overrides = yaml.safe_load(overrides_file.read_text()) if overrides_file.is_file() else []
    except (yaml.YAMLError, ValueError) as err:  # Hydra writes it: one line for a damaged one
        why = str(err).splitlines()[0]
        job.error = f"{overrides_file} is unreadable ({why}); fix it and report again"
        return job
    job.overrides = parse_overrides(overrides)
    if not results_file.is_file():
        job.error = _failure_reason(job_dir)
        return job
    job.results, job.error = _read_results(results_file)
    return job


def _read_results(path: Path) -> tuple[dict | None, str | None]:
    """``(results, None)``, or ``(None, why not)`` for a file not as training writes it."""
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:  # training writes it: one line says what went wrong
        return None, f"{path} is unreadable ({err}); fix it and report again"
    problem = _object_problem(results, RESULTS_FIELDS)
    if problem is not None:
        return None, f"{path} is not as training writes it ({problem}); fix it and report again"
    return results, None


def find_jobs(sweep_dir: Path) -> list[Job]:
    """Every job dir under ``sweep_dir``, ``heads=4,seed=2`` before ``heads=16,seed=1``."""
    dirs = {p.parent.parent for p in sweep_dir.rglob("overrides.yaml") if p.parent.name == ".hydra"}
    dirs |= {p.parent for p in sweep_dir.rglob("results.json")}
    dirs.discard(sweep_dir)

    def natural(path: Path) -> list:  # re.split with a group alternates text and digits
        return [int(p) if i % 2 else p for i, p in enumerate(re.split(r"(\d+)", path.as_posix()))]

    return [_read_job(sweep_dir, job_dir) for job_dir in sorted(dirs, key=natural)]


def existing_sweep_dir(sweep_dir: str | Path) -> Path:
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.exists():
        raise UserError(f"sweep dir {sweep_dir} does not exist")
    if not sweep_dir.is_dir():
        raise UserError(f"{sweep_dir} is a file, not a sweep dir: {SWEEP_DIR_HINT}")
    return sweep_dir


def _group_rows(done: list[Job], warnings: list[str]) -> dict[Key, list[Job]]:
    """The finished jobs by (heads, kv_heads), sorted by seed; warns where more varies."""
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
                f"{stats.key_label(key, kv_axis)} has several jobs with the same seed "
                f"({', '.join(j.name for j in members)}): the sweep varies more than {axes}, "
                "and this row averages over it"
            )
    # Imported here: the settings import torch, which Hydra's start must not.
    from translate.schema.runtime import MOVED_KEYS
    from translate.settings import mechanics_keys

    # How or where a job runs, never what it trains (also by the runtime keys' older trainer.*
    # names); either spelling of the kv override is a row axis already (the key is results').
    ignored = {"heads", "kv_heads", "model.num_kv_heads", "seed", *mechanics_keys()}
    ignored |= {f"trainer.{k}" for k in MOVED_KEYS if f"runtime.{k}" in ignored}
    others = {
        json.dumps({k: v for k, v in j.overrides.items() if k not in ignored}, sort_keys=True)
        for j in done
        if j.overrides
    }
    if len(others) > 1:
        warnings.append(f"the finished jobs differ in more than {axes}: {sorted(others)}")
    return groups


def build_report(
    sweep_dir: str | Path, baseline_heads: int = BASELINE_HEADS, bootstrap_samples: int = 1000
) -> Report:
    sweep_dir = existing_sweep_dir(sweep_dir)
    jobs = find_jobs(sweep_dir)
    if not jobs:  # a single run's dir, an empty or mistyped folder: no report into it
        single = "; it is a single run" if (sweep_dir / "results.json").is_file() else ""
        raise UserError(
            f"{sweep_dir} holds no sweep jobs (no job dir with .hydra/overrides.yaml or "
            f"results.json below it{single}): {SWEEP_DIR_HINT}; nothing written"
        )
    done = [j for j in jobs if j.completed]
    warnings: list[str] = []
    groups = _group_rows(done, warnings)
    equal, params_message = stats.check_equal_params(jobs)
    if not equal:
        warnings.insert(0, params_message)
    if mixed := provenance_warning([j.results for j in done]):
        warnings.append(mixed)
    # The baseline is plain multi-head attention, also in a kv_heads sweep: kv_heads = heads.
    baseline = stats.choose_baseline(groups, baseline_heads)
    seeds = sorted({j.results.get("seed") for j in done}, key=str)
    p_cells, signature = stats.p_value_cells(groups, baseline, seeds, bootstrap_samples, warnings)
    rows = [_row(key, groups[key], seeds, p_cells[key]) for key in sorted(groups)]
    finished = [j.name for j in done]
    speed = read_sweep_file(sweep_dir, SPEED_WORDS, finished, warnings)
    if speed and (busy := busy_warning(speed["jobs"])):
        warnings.append(f"{SPEED_FILE}: {busy}")
    align = read_sweep_file(sweep_dir, ALIGN_WORDS, finished, warnings)
    for row in rows:
        row.update(speed_cells(speed, heads_key(row)) if speed else {})
        row.update(align_cells(align, heads_key(row)) if align else {})
    report = Report(sweep_dir, rows, jobs, seeds, equal, params_message, warnings, signature)
    report.speed, report.align = speed, align
    report.baseline_heads, report.asked_baseline = baseline, baseline_heads
    return report


def _row(key: Key, jobs: list[Job], seeds: list, p_cells: dict) -> dict:
    # Imported here: translate.nn.model imports torch, which Hydra's start must not.
    from translate.nn.model import HEAD_MASK_KEYS

    res = [j.results for j in jobs]
    params = sorted({r.get("params") for r in res}, key=str)
    row = {"heads": key[0], "kv_heads": key[1], "d_k": res[0].get("d_k")}
    row["params"] = params[0] if len(params) == 1 else " / ".join(str(p) for p in params)
    row |= {"seeds": " ".join(str(r.get("seed")) for r in res), "n": len(res)}
    for metric, with_std in METRICS.items():
        values = [scored_dev_bleu(r) if metric == "dev_bleu" else r.get(metric) for r in res]
        mean, std = mean_std(values)
        row |= {f"{metric}_mean": mean} | ({f"{metric}_std": std} if with_std else {})
    by_seed = {r.get("seed"): r for r in res}
    row |= {f"bleu_seed{seed}": by_seed.get(seed, {}).get("bleu") for seed in seeds}
    row["bleu_ci95_low"], row["bleu_ci95_high"] = stats.ci_of_mean(stats.seed_bleus(jobs))
    summaries = [r.get("head_summary") or {} for r in res]
    for kind in HEAD_MASK_KEYS:
        row[f"entropy_{kind}"] = mean_std([s.get("entropy", {}).get(kind) for s in summaries])[0]
    for count in ("degenerate_heads", "total_heads"):
        row[count] = mean_std([s.get(count) for s in summaries])[0]
    row.update(p_cells)
    for seed in seeds:
        code, where = job_provenance(by_seed.get(seed, {}))
        row[f"commit_seed{seed}"], row[f"machine_seed{seed}"] = code, where
    return row


SPEED_FILE = "ablation_speed.json"  # written by translate.ablation.speed
SPEED_COMMAND = "python -m translate.ablation speed SWEEP_DIR"
# Per-job and per-row metrics -> (column header in ablation.md, decimals shown). A metric's
# ratio to the baseline row's is f"{metric}_vs_{heads}", its rounds' range f"{metric}_min/max".
SPEED_METRICS = {
    "latency_greedy_ms": ("greedy ms/sent (batch 1)", 1),
    "latency_beam_ms": ("beam ms/sent (batch 1)", 1),
    "sentences_per_s": ("sent/s (batched, greedy)", 1),
    "train_tokens_per_s": ("train tok/s", 0),
    "peak_mem_mb": ("peak mem MB", 0),
}
# The checkpoints exported to CTranslate2, timed in the same rounds where it was installed.
CT2_METRICS = {
    "ct2_latency_greedy_ms": ("CT2 greedy ms/sent (batch 1)", 1),
    "ct2_latency_beam_ms": ("CT2 beam ms/sent (batch 1)", 1),
}
ALL_METRICS = {**SPEED_METRICS, **CT2_METRICS}
# Rounds spread wider than this (max / min - 1) were spoilt by a busy machine; quiet ones: a few %.
BUSY_SPREAD = 0.5


def shown_metrics(data: dict) -> dict:
    """The metrics of ``data``'s table, CTranslate2's after our latency where a row has them; no
    beam columns when every job's beam is 1 (they would time greedy decoding twice)."""
    rows = data.get("heads") or []
    ct2 = {m: v for m, v in CT2_METRICS.items() if any(r.get(m) is not None for r in rows)}
    latency = {m: v for m, v in SPEED_METRICS.items() if m.startswith("latency_")}
    shown = {**latency, **ct2, **SPEED_METRICS}
    jobs = data.get("jobs") or []  # files from before the beam size was recorded: shown
    if jobs and all(job.get("beam_size") == 1 for job in jobs):
        shown = {m: v for m, v in shown.items() if "_beam_" not in m}
    return shown


def round_spread(entry: dict) -> tuple[float, str] | None:
    """The widest ``max / min - 1`` of an entry's timing rounds, and its metric (older: None)."""
    timed = (m for m in ALL_METRICS if m != "peak_mem_mb")
    ends = ((m, entry.get(f"{m}_min"), entry.get(f"{m}_max")) for m in timed)
    return max(((high / low - 1, m) for m, low, high in ends if low and high), default=None)


def busy_warning(entries: list[dict]) -> str | None:
    # Medians of a few rounds that other work took the cores for are not to be trusted.
    spreads = [(round_spread(e), e) for e in entries]
    busy = [(s, e) for s, e in spreads if s is not None and s[0] > BUSY_SPREAD]
    if not busy:
        return None
    (spread, metric), entry = max(busy, key=lambda b: b[0])
    low, high = entry[f"{metric}_min"], entry[f"{metric}_max"]
    return (
        f"the machine was busy: the timing rounds of {len(busy)} of {len(entries)} jobs spread "
        f"by more than {BUSY_SPREAD:.0%} (worst: {entry['name']}, {metric} from {low:,.4g} to "
        f"{high:,.4g}); time again with the machine otherwise idle"
    )


def spread_cell(entry: dict) -> str:
    spread = round_spread(entry)
    return "-" if spread is None else f"{100 * spread[0]:.0f}%"


def speed_cell(row: dict, metric: str, digits: int, baseline: int | None) -> str:
    value, ratio = row.get(metric), row.get(f"{metric}_vs_{baseline}")
    text = "-" if value is None else f"{value:,.{digits}f}"
    return text if ratio is None else f"{text} ({ratio:.2f}x)"


def read_sweep_file(sweep_dir: Path, words: dict, finished: list[str], warnings: list[str]):
    """``sweep_dir``'s ``words["file"]``, or None: none there, or (with a warning) unreadable or
    of another sweep. ``finished`` jobs it lacks are warned of, with its ``skipped`` reason."""
    path = sweep_dir / words["file"]
    if not path.is_file():
        return None
    command = words["command"].replace("SWEEP_DIR", str(sweep_dir))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        warnings.append(f"{path} is unreadable ({err}): {words['lost']}; run {command}")
        return None
    measured = data.get("sweep_dir") if isinstance(data, dict) else None  # absent: older
    if isinstance(measured, str) and Path(measured) != sweep_dir.resolve():
        # `speed <sweepA> --json <sweepB>/...`: A's figures must not pass for B's.
        warnings.append(words["other"].format(path=path, measured=measured, command=command))
        return None
    problem = _file_problem(data, words)
    if problem is not None:
        lost = words["lost"]
        warnings.append(
            f"{path} is not as its command writes it ({problem}): {lost}; run {command}"
        )
        return None
    have = {job["name"] for job in data["jobs"]}
    reasons = {job["name"]: job["reason"] for job in data.get(words.get("skipped"), [])}
    unmeasured = [name for name in finished if name not in have]
    for name in (name for name in unmeasured if name in reasons):
        warnings.append(words["skipped_reason"].format(name=name, reason=reasons[name]))
    if unmeasured := [name for name in unmeasured if name not in reasons]:
        warnings.append(words["missing"].format(jobs=", ".join(unmeasured), command=command))
    return data


def _file_problem(data, words: dict) -> str | None:
    """What makes a speed or align file other than its command writes it, in words; or None:
    the fields the report reads, at the top and in each entry of its lists."""
    problem = _object_problem(data, words["fields"])
    if problem is not None:
        return problem
    for key, fields in words["entries"].items():
        for entry in data.get(key, []):
            problem = field_problem(entry, fields) if isinstance(entry, dict) else "no object"
            if problem is not None:
                return f"an entry of {key!r}: {problem}"
    return None


_LIST = Field(of_type(list), "a list", required=True)
_TEXT = Field(of_type(str), "a text", required=True)
_SWEEP_DIR = Field(of_type(str), "a path")


SPEED_WORDS = {
    "file": SPEED_FILE,
    "command": SPEED_COMMAND,
    "lost": "no speed columns",
    "other": "{path} is the speed file of another sweep (it timed {measured}): its figures are "
    "left out; run {command} to time this sweep's checkpoints",
    "missing": SPEED_FILE + " has no figures for {jobs} (finished after it was measured?): run "
    "{command} again",
    "skipped": "not_timed",
    "skipped_reason": SPEED_FILE + " has no figures for {name}; it was not timed: {reason}",
    "fields": {
        "jobs": _LIST,
        "heads": _LIST,
        "baseline_heads": Field(or_null(whole(1)), "a whole number >= 1", required=True),
        "not_timed": Field(of_type(list), "a list"),
        "sweep_dir": _SWEEP_DIR,
    },
    "entries": {
        "jobs": {"name": _TEXT},
        "heads": _HEADS,
        "not_timed": {"name": _TEXT, "reason": _TEXT},
    },
}


def speed_cells(data: dict, key: Key) -> dict:
    """The row of ``key``: each shown metric, its rounds' range and its ratio to the baseline's."""
    baseline = data["baseline_heads"]
    row = next((r for r in data["heads"] if heads_key(r) == key), {})
    ends = ["", "_min", "_max", *([f"_vs_{baseline}"] if baseline is not None else [])]
    return {m + end: row.get(m + end) for m in shown_metrics(data) for end in ends}


ALIGN_FILE = "ablation_align.json"  # written by translate.ablation.align
ALIGN_COMMAND = "python -m translate.ablation align SWEEP_DIR"
ALIGN_WORDS = {
    "file": ALIGN_FILE,
    "command": ALIGN_COMMAND,
    "lost": "no AER column",
    "other": "{path} measured another sweep ({measured}): its AERs are left out; run {command}",
    "missing": ALIGN_FILE + " has no AER for {jobs} (finished after it was measured, or not "
    "measured: see its not_measured); run {command} again",
    "fields": {
        "jobs": _LIST,
        "sentences": Field(whole(0), "a whole number >= 0", required=True),
        "reference": Field(of_type(dict), "an object", required=True),
        "sweep_dir": _SWEEP_DIR,
        **{f"reference.{k}": _TEXT for k in ("kind", "origin", "split")},
    },
    "entries": {
        "jobs": {"name": _TEXT, **_HEADS, "best_aer": Field(number, "a number", required=True)}
    },
}


def align_cells(data: dict, key: Key) -> dict:
    """The row of ``key``: its jobs' best-head AER over seeds, and its reference's kind."""
    best = [job["best_aer"] for job in data["jobs"] if heads_key(job) == key]
    mean, std = mean_std(best)
    kind = data["reference"]["kind"] if best else None
    return {"best_aer_mean": mean, "best_aer_std": std, "aer_reference": kind}
