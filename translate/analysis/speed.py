"""Side-by-side speed of a heads sweep (``python -m translate.ablation speed``): every finished
job's scored checkpoint inside the sweep dir loaded into one process and timed in rotated rounds,
CTranslate2's latency in a process of its own each round (:mod:`translate.analysis.timing_process`),
into ``ablation_speed.json``; what is measured, and how, is docs/ablation.md, "Speed, side by
side". The training step is the caller's (``make_trainer``): this package may not import
``translate.training``.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.metadata
import json
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from translate import io
from translate.analysis.ablation import (
    ALL_METRICS,
    BASELINE_HEADS,
    CT2_METRICS,
    SPEED_FILE,
    Job,
    busy_warning,
    existing_sweep_dir,
    find_jobs,
    ratio_key,
    spread_keys,
)
from translate.analysis.ablation_stats import choose_baseline, heads_key
from translate.analysis.heads import make_batches
from translate.analysis.timing_process import ONE_AT_A_TIME, time_in_process
from translate.data.batching import Batch
from translate.data.corpus import load_raw_split
from translate.decoding.ct2 import import_ctranslate2
from translate.decoding.ct2_export import export_checkpoint
from translate.decoding.translator import Loaded, load_translator
from translate.errors import UserError
from translate.nn.model import count_parameters
from translate.runtime.memory import peak_memory_mb, reset_peak_memory
from translate.runtime.provenance import machine
from translate.runtime.timing import rotated, timed
from translate.schema import OptimSettings
from translate.settings import build

# (model, optim, device, precision, pad_id) -> an object whose step([batch]) returns .tokens.
MakeTrainer = Callable[..., object]
# (turns done, turns in all, round, metric, job name) -> None: called before each job's turn.
Progress = Callable[[int, int, int, str, str], None]
# In the order each round measures them; CTranslate2's only when a job has an export.
TIMED = (
    "latency_greedy_ms",
    "latency_beam_ms",
    *CT2_METRICS,
    "sentences_per_s",
    "train_tokens_per_s",
)
CUDA_MEMORY_NOTE = (
    "the CUDA allocator's peak in the job's turns above what was allocated before each (the "
    "other jobs' resident weights), plus the job's own weights"
)
CPU_MEMORY_NOTE = (
    "null on the CPU: all jobs share one process, whose resident set size cannot be "
    "attributed to one of them"
)


@dataclass(frozen=True)
class SpeedSettings:
    rounds: int = 5
    sentences: int = 20  # batch-1 latency
    batch_sentences: int = 200  # batched sentences/s and the training batches
    train_steps: int = 3  # timed optimizer steps per job and round
    device: str = "auto"
    precision: str = "auto"
    ct2: bool = True  # CTranslate2's batch-1 latency beside ours


@dataclass
class SpeedJob:
    """One finished job, loaded, with its inputs and what has been measured so far."""

    job: Job
    checkpoint: Path
    loaded: Loaded
    ct2: Path | None = None  # the checkpoint exported to CTranslate2 (float32)
    ct2_round: dict[str, float] = field(default_factory=dict)  # timed, not yet recorded
    latency_ids: list[list[int]] = field(default_factory=list)
    batch_ids: list[list[int]] = field(default_factory=list)
    train_batches: list[Batch] = field(default_factory=list)
    values: dict[str, list] = field(default_factory=dict)  # metric -> one value per round
    round_peak_mb: float = 0.0

    @property
    def device(self) -> torch.device:
        return self.loaded.translator.device


def _checkpoint(job: Job, sweep_dir: Path) -> tuple[Path | None, str]:
    """The job's scored checkpoint inside ``sweep_dir``, or None and why not. One that
    results.json names outside it (the sweep dir was copied or moved) is looked for in the
    job's own ``checkpoints/``: never a checkpoint of another sweep."""
    recorded = job.results.get("checkpoint")
    if not isinstance(recorded, str) or not recorded:
        return None, "its results.json names no checkpoint"
    path = Path(recorded) if Path(recorded).is_absolute() else job.path / recorded
    outside = not path.resolve().is_relative_to(sweep_dir.resolve())
    if outside:
        path = job.path / "checkpoints" / path.name
    if path.is_file():
        return path, ""
    why = f"its checkpoint {path} does not exist"
    if outside:
        why += f" (results.json names {recorded}, outside this sweep dir, which is not timed)"
    return None, why


def load_jobs(sweep_dir: Path, settings: SpeedSettings, not_timed: list[dict]) -> list[SpeedJob]:
    """Every completed job with a checkpoint in ``sweep_dir``, loaded on ``settings.device``;
    every other job is added to ``not_timed`` with the reason."""
    jobs = []
    for job in find_jobs(sweep_dir):
        path, why = (None, f"it did not complete ({job.error})")
        if job.completed:
            path, why = _checkpoint(job, sweep_dir)
        if path is None:
            not_timed.append({"name": job.name, "reason": why})
            continue
        loaded = load_translator(path, settings.device, settings.precision)
        jobs.append(SpeedJob(job, path, loaded))
    if not jobs:
        raise UserError(f"{sweep_dir} has no completed job with a checkpoint to measure")
    return jobs


def load_ct2(jobs: list[SpeedJob], folder: Path, warnings: list[str]) -> None:
    """Each job's checkpoint exported to CTranslate2 (float32) under ``folder``; none without
    ``ctranslate2``, and none for a job whose export fails (each with a warning)."""
    try:
        import_ctranslate2()
    except UserError as err:
        warnings.append(f"no CTranslate2 latency: {err}")
        return
    for i, sj in enumerate(jobs):
        try:
            sj.ct2 = export_checkpoint(sj.checkpoint, folder / f"job{i}", "float32", None)
        except UserError as err:
            warnings.append(f"{sj.job.name}: no CTranslate2 latency ({err})")


def _spread(items: list, n: int) -> list:
    """``n`` items spread evenly over ``items``: a split's order may group lengths or topics."""
    return items[:: max(1, len(items) // max(n, 1))][:n]


def prepare_inputs(jobs: list[SpeedJob], settings: SpeedSettings, warnings: list[str]) -> str:
    """Give every job the same test sentences (from the first job's data config), tokenized
    with its own tokenizer; returns the test split's name."""
    data = jobs[0].loaded.data
    name, sources, refs = load_raw_split(data, "test")
    pairs = [(s, r) for s, r in zip(sources, refs) if s.strip() and r.strip()]
    if not pairs:
        raise UserError(f"the test split {name!r} of data={data.source} has no sentence pairs")
    latency, batch = _spread(pairs, settings.sentences), _spread(pairs, settings.batch_sentences)
    first = jobs[0].loaded
    for sj in jobs:
        other = sj.loaded
        if dataclasses.replace(other.data, cache_dir="") != dataclasses.replace(data, cache_dir=""):
            warnings.append(f"{sj.job.name} was trained on other data than {jobs[0].job.name}")
        if other.tokenizer.model_proto != first.tokenizer.model_proto:
            warnings.append(f"{sj.job.name} has another tokenizer: not the same token batches")
        tok, limits = other.tokenizer, other.data.filter
        sj.latency_ids = tok.encode([s for s, _ in latency])
        sj.batch_ids = tok.encode([s for s, _ in batch])
        # Cut to the longest pairs training kept (its filter counts the EOS / BOS).
        tgt = tok.encode([r for _, r in batch])
        sj.train_batches = make_batches(
            sj.batch_ids, tgt, other.data.max_tokens, limits.max_src_len, limits.max_tgt_len
        )
    return name


# ------------------------------------------------------------------------ measuring


def _train_tokens_per_s(sj: SpeedJob, steps: int, make_trainer: MakeTrainer) -> float:
    """Tokens per second over ``steps`` optimizer steps after one untimed (Adam's state, the
    allocator, kernels); on a copy, so the decoding model keeps its weights and eval mode."""
    loaded = sj.loaded
    optim = build(OptimSettings, loaded.config["optim"], "optim")
    model = copy.deepcopy(loaded.model)
    trainer = make_trainer(
        model, optim, sj.device, loaded.translator.precision, loaded.tokenizer.PAD
    )
    batches = sj.train_batches
    trainer.step([batches[0]])
    tokens, seconds = 0, 0.0
    for i in range(steps):
        batch = batches[i % len(batches)]
        result, s = timed(lambda b=batch: trainer.step([b]), sj.device)
        tokens, seconds = tokens + result.tokens, seconds + s
    return tokens / max(seconds, 1e-9)


def ct2_latency(jobs: list[SpeedJob]) -> None:
    """CTranslate2's batch-1 latency (ms per sentence), greedy and beam with each job's decode
    settings, of every job with an export, in ``jobs``' order, in one timing process at as
    many threads as torch; kept in ``ct2_round`` for the jobs' turns."""
    jobs = [sj for sj in jobs if sj.ct2 is not None]
    specs = []
    for sj in jobs:
        decode = sj.loaded.translator.decode
        modes = {"ct2_latency_greedy_ms": 1, "ct2_latency_beam_ms": decode.beam_size}
        if decode.beam_size == 1:  # greedy already
            del modes["ct2_latency_beam_ms"]
        specs.append(
            {"engine": "ct2", "model_dir": str(sj.ct2), "device": str(sj.device), "modes": modes}
            | {"decode": dataclasses.asdict(decode), "inputs": {ONE_AT_A_TIME: sj.latency_ids}}
        )
    for sj, times in zip(jobs, time_in_process(specs, torch.get_num_threads()) if jobs else []):
        n = len(sj.latency_ids)
        sj.ct2_round = {mode: s * 1000 / n for (_, mode), (s, _) in times.items()}


def measure_one(sj: SpeedJob, metric: str, settings: SpeedSettings, make_trainer) -> float | None:
    """One job's value of one metric in one round (None: CTranslate2's, for a job without an
    export, which :func:`ct2_latency` timed for the round; beam latency at beam size 1, which
    is greedy's). Latency: mean ms per sentence."""
    translator = sj.loaded.translator
    if metric == "train_tokens_per_s":
        return _train_tokens_per_s(sj, settings.train_steps, make_trainer)
    if metric == "sentences_per_s":
        return translator.timed_translate_ids(sj.batch_ids, beam_size=1)[1]
    if metric in CT2_METRICS:
        return sj.ct2_round.pop(metric, None)
    beam = 1 if "greedy" in metric else translator.decode.beam_size
    if beam == 1 and "beam" in metric:
        return None
    total = sum(
        timed(lambda ids=ids: translator.translate_ids([ids], beam_size=beam), sj.device)[1]
        for ids in sj.latency_ids
    )
    return total * 1000 / len(sj.latency_ids)


def _turn(sj: SpeedJob, metric: str, settings: SpeedSettings, make_trainer) -> None:
    """Measure, and on CUDA keep the peak memory the turn added to what was allocated."""
    cuda = sj.device.type == "cuda"
    if cuda:
        before_mb = torch.cuda.memory_allocated(sj.device) / 2**20
        reset_peak_memory(sj.device)
    sj.values.setdefault(metric, []).append(measure_one(sj, metric, settings, make_trainer))
    if cuda:
        sj.round_peak_mb = max(sj.round_peak_mb, peak_memory_mb(sj.device) - before_mb)


def _weights_mb(sj: SpeedJob) -> float:
    tensors = [*sj.loaded.model.parameters(), *sj.loaded.model.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors) / 2**20


def timed_metrics(jobs: list[SpeedJob]) -> list[str]:
    """What each round measures, in order: :data:`TIMED`, CTranslate2's only if a job has it,
    beam latency only if a job decodes with a beam (at beam size 1 it is greedy's)."""
    ct2 = any(sj.ct2 is not None for sj in jobs)
    beam = any(sj.loaded.translator.decode.beam_size > 1 for sj in jobs)
    return [m for m in TIMED if (ct2 or m not in CT2_METRICS) and (beam or "_beam_" not in m)]


def measure(
    jobs: list[SpeedJob], settings: SpeedSettings, make_trainer, progress: Progress | None = None
) -> list[list[str]]:
    """Every round, every metric, every job in the round's rotated order, ``progress`` told
    before each turn; returns the order (job names) of each round."""
    for sj in jobs:  # untimed: lazy initialisation, the allocator, kernels for these shapes
        translator = sj.loaded.translator
        translator.translate_ids(sj.latency_ids[:2], beam_size=1)
        translator.translate_ids(sj.latency_ids[:2])
        translator.translate_ids(sj.batch_ids, beam_size=1)
    order, metrics = [], timed_metrics(jobs)
    turns = settings.rounds * len(metrics) * len(jobs)
    for r in range(settings.rounds):
        visit = rotated(jobs, r)
        order.append([sj.job.name for sj in visit])
        for sj in jobs:
            sj.round_peak_mb = 0.0
        for m, metric in enumerate(metrics):
            if metric == next(iter(CT2_METRICS)):  # their turn: this round's CTranslate2 process
                ct2_latency(visit)
            for j, sj in enumerate(visit):
                if progress is not None:
                    done = ((r * len(metrics)) + m) * len(jobs) + j
                    progress(done, turns, r, metric, sj.job.name)
                _turn(sj, metric, settings, make_trainer)
        for sj in jobs:
            cuda = sj.device.type == "cuda"
            peak = _weights_mb(sj) + sj.round_peak_mb if cuda else None
            sj.values.setdefault("peak_mem_mb", []).append(peak)
    return order


# ------------------------------------------------------------------------ summarising


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _ranges(values: dict[str, list]) -> dict:
    """Each metric's lowest and highest value over ``values`` (metric -> values), or None."""
    out = {}
    for metric in ALL_METRICS:
        timed = [v for v in values.get(metric, []) if v is not None]
        low, high = spread_keys(metric)
        out[low], out[high] = (min(timed), max(timed)) if timed else (None, None)
    return out


def job_entry(sj: SpeedJob) -> dict:
    r = sj.job.results
    return {
        "name": sj.job.name,
        "heads": int(r["heads"]),
        "kv_heads": heads_key(r)[1],
        "seed": r.get("seed"),
        "params": count_parameters(sj.loaded.model),
        "checkpoint": str(sj.checkpoint),
        "beam_size": sj.loaded.translator.decode.beam_size,
        **{m: _median(sj.values.get(m, [])) for m in ALL_METRICS},
        **_ranges(sj.values),
        "rounds": {m: sj.values.get(m, []) for m in ALL_METRICS},
    }


def _row_rounds(group: list[dict], metric: str) -> list[float | None]:
    """The row's value in each round, the median over its jobs (seeds) as the row's figure is:
    its spread is then the rounds', not the seeds' (whose models decode to other lengths)."""
    rounds = [e.get("rounds", {}).get(metric, []) for e in group]
    return [_median(list(values)) for values in zip(*rounds)]


def heads_rows(entries: list[dict], baseline_heads: int | None = BASELINE_HEADS) -> list[dict]:
    """Per (heads, kv_heads) pair: the median over its jobs (seeds) of each metric, and its
    ratio to the baseline row's, multi-head ``baseline_heads`` (1.0 there; no ratios without
    a baseline: :func:`translate.analysis.ablation_stats.choose_baseline` finds none)."""
    rows = []
    for heads, kv in sorted({heads_key(e) for e in entries}):
        group = [e for e in entries if heads_key(e) == (heads, kv)]
        row = {"heads": heads, "kv_heads": kv, "jobs": [e["name"] for e in group]}
        row["seeds"] = [e["seed"] for e in group]
        row.update({m: _median([e.get(m) for e in group]) for m in ALL_METRICS})
        row.update(_ranges({m: _row_rounds(group, m) for m in ALL_METRICS}))
        rows.append(row)
    # The baseline is plain multi-head attention, also in a kv_heads sweep.
    base = next((r for r in rows if heads_key(r) == (baseline_heads, baseline_heads)), {})
    for row in rows if baseline_heads is not None else []:
        for m in ALL_METRICS:
            value, ref = row[m], base.get(m)
            row[ratio_key(m, baseline_heads)] = None if not (value and ref) else value / ref
    return rows


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def run_speed(
    sweep_dir: str | Path,
    settings: SpeedSettings,
    make_trainer: MakeTrainer,
    out: str | Path | None = None,
    progress: Progress | None = None,
) -> tuple[dict, Path]:
    """Load, measure (``progress`` told before each turn) and write the speed file (``out``,
    default in the sweep dir)."""
    sweep_dir, warnings, not_timed = existing_sweep_dir(sweep_dir), [], []
    path = Path(out) if out is not None else sweep_dir / SPEED_FILE
    output = io.check_output_file(path, "--json", "ablation speed")  # before any timing
    jobs = load_jobs(sweep_dir, settings, not_timed)
    test_split = prepare_inputs(jobs, settings, warnings)
    with tempfile.TemporaryDirectory(prefix="ablation_speed_ct2_") as folder:
        if settings.ct2:
            load_ct2(jobs, Path(folder), warnings)
        order = measure(jobs, settings, make_trainer, progress)
    entries = [job_entry(sj) for sj in jobs]
    busy = busy_warning(entries)
    warnings += [busy] if busy else []
    baseline = choose_baseline({heads_key(e) for e in entries}, BASELINE_HEADS)
    device = jobs[0].device
    payload = {
        "machine": {**machine(device), "ctranslate2": _version("ctranslate2")},
        "settings": {
            **dataclasses.asdict(settings),
            "precision": jobs[0].loaded.translator.precision,
            "test_split": test_split,
        },
        "peak_mem_mb": CUDA_MEMORY_NOTE if device.type == "cuda" else CPU_MEMORY_NOTE,
        "baseline_heads": baseline,
        "sweep_dir": str(sweep_dir.resolve()),  # the report uses only its own sweep's figures
        "order": order,
        "metrics": timed_metrics(jobs),  # each round's, in the order measured
        "warnings": warnings,
        "not_timed": not_timed,  # {"name", "reason"} of each job of the sweep dir not timed
        "jobs": entries,
        "heads": heads_rows(entries, baseline),
    }
    output.write(json.dumps(payload, indent=2) + "\n")
    return payload, path
