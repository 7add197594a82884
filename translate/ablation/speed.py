"""Time a heads sweep's models side by side: ``python -m translate.ablation speed <sweep_dir>``.

Every finished job's checkpoint in one process, timed in rotated rounds (docs/ablation.md)."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

from translate import io
from translate.ablation import results
from translate.ablation.stats import choose_baseline, heads_key
from translate.analysis.heads import make_batches
from translate.bench import common
from translate.data.batching import Batch
from translate.data.corpus import load_raw_split
from translate.decoding.ct2 import import_ctranslate2
from translate.decoding.ct2_export import export_checkpoint
from translate.decoding.timing_process import ONE_AT_A_TIME, decode_timed, time_in_process
from translate.decoding.translator import Loaded, load_translator
from translate.errors import EXIT_USER_ERROR, UserError, counted, debug_enabled, plain_text
from translate.nn.model import count_parameters
from translate.runtime.memory import keep_freed_memory, peak_memory_mb, reset_peak_memory
from translate.runtime.provenance import machine, package_version
from translate.runtime.timing import rotated, timed
from translate.schema import OptimSettings
from translate.settings import build
from translate.training.step import Trainer

METRICS = results.ALL_METRICS
# In the order each round measures them; CTranslate2's only when a job has an export.
TIMED = (
    "latency_greedy_ms",
    "latency_beam_ms",
    *results.CT2_METRICS,
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
# The counts a user sets: option -> (SpeedSettings field, what it counts).
COUNTS = {
    "--rounds": ("rounds", "interleaved rounds"),
    "--sentences": ("sentences", "test sentences for batch-1 latency"),
    "--batch-sentences": ("batch_sentences", "test sentences for sent/s and the training batches"),
    "--train-steps": ("train_steps", "timed optimizer steps per job and round"),
}


@dataclass(frozen=True)
class SpeedSettings:
    rounds: int = 5
    sentences: int = 20
    batch_sentences: int = 200
    train_steps: int = 3
    device: str = "auto"
    precision: str = "auto"
    ct2: bool = True  # CTranslate2's batch-1 latency beside ours


@dataclass
class SpeedJob:
    """One finished job, loaded, with its inputs and what has been measured so far."""

    job: results.Job
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


def job_checkpoint(job: results.Job, sweep_dir: Path) -> tuple[Path | None, str]:
    """The job's scored checkpoint inside ``sweep_dir``, or None and why not. One named outside
    it (a copied or moved sweep dir) is looked for in the job's own ``checkpoints/``."""
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


def completed_jobs(sweep_dir: Path, left_out: list[dict]) -> list[tuple[results.Job, Path]]:
    """``(job, checkpoint)`` of every completed job with one; the others into ``left_out``."""
    found = []
    for job in results.find_jobs(sweep_dir):
        path, why = None, f"it did not complete ({job.error})"
        if job.completed:
            path, why = job_checkpoint(job, sweep_dir)
        if path is None:
            left_out.append({"name": job.name, "reason": why})
        else:
            found.append((job, path))
    if not found:
        raise UserError(f"{sweep_dir} has no completed job with a checkpoint to measure")
    return found


def load_jobs(sweep_dir: Path, settings: SpeedSettings, not_timed: list[dict]) -> list[SpeedJob]:
    return [
        SpeedJob(job, path, load_translator(path, settings.device, settings.precision))
        for job, path in completed_jobs(sweep_dir, not_timed)
    ]


def load_ct2(jobs: list[SpeedJob], folder: Path, warnings: list[str]) -> None:
    """Each job's checkpoint exported to CTranslate2 (float32) under ``folder``, or a warning."""
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


def sentence_pairs(data, split: str, where: str = "") -> tuple[str, list[tuple[str, str]]]:
    """``(split name, its non-empty (source, reference) pairs)``."""
    name, sources, refs = load_raw_split(data, split)
    pairs = [(s, r) for s, r in zip(sources, refs) if s.strip() and r.strip()]
    if not pairs:
        raise UserError(f"the {split} split {name!r}{where} has no sentence pairs")
    return name, pairs


def prepare_inputs(jobs: list[SpeedJob], settings: SpeedSettings, warnings: list[str]) -> str:
    """Every job the first job's test sentences, in its own tokens; returns the split's name."""
    data, first = jobs[0].loaded.data, jobs[0].loaded
    name, pairs = sentence_pairs(data, "test", f" of data={data.source}")
    # Spread evenly over the split: its order may group lengths or topics.
    sizes = (settings.sentences, settings.batch_sentences)
    latency, batch = (pairs[:: max(1, len(pairs) // max(n, 1))][:n] for n in sizes)
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


def _train_tokens_per_s(sj: SpeedJob, steps: int) -> float:
    """Over ``steps`` optimizer steps after an untimed one (Adam's state, the allocator), on a
    copy: the decoding model keeps its weights and eval mode."""
    loaded = sj.loaded
    optim = build(OptimSettings, loaded.config["optim"], "optim")
    model = copy.deepcopy(loaded.model)
    trainer = Trainer(model, optim, sj.device, loaded.translator.precision, loaded.tokenizer.PAD)
    batches = sj.train_batches
    trainer.step([batches[0]])
    tokens, seconds = 0, 0.0
    for i in range(steps):
        batch = batches[i % len(batches)]
        result, s = timed(lambda b=batch: trainer.step([b]), sj.device)
        tokens, seconds = tokens + result.tokens, seconds + s
    return tokens / max(seconds, 1e-9)


def ct2_latency(jobs: list[SpeedJob]) -> None:
    """CTranslate2's batch-1 ms per sentence of every job with an export, greedy and with its
    beam, in ``jobs``' order in one timing process, into each job's ``ct2_round``."""
    jobs = [sj for sj in jobs if sj.ct2 is not None]
    specs = []
    for sj in jobs:
        decode = sj.loaded.translator.decode
        modes = {"ct2_latency_greedy_ms": 1}
        if decode.beam_size > 1:  # at 1, greedy already
            modes["ct2_latency_beam_ms"] = decode.beam_size
        specs.append(
            {"engine": "ct2", "model_dir": str(sj.ct2), "device": str(sj.device), "modes": modes}
            | {"decode": dataclasses.asdict(decode), "inputs": {ONE_AT_A_TIME: sj.latency_ids}}
        )
    for sj, times in zip(jobs, time_in_process(specs, torch.get_num_threads()) if jobs else []):
        n = len(sj.latency_ids)
        sj.ct2_round = {mode: s * 1000 / n for (_, mode), (s, _) in times.items()}


def measure_one(sj: SpeedJob, metric: str, settings: SpeedSettings) -> float | None:
    """One job's value of one metric in one round (None for beam latency at beam size 1)."""
    translator = sj.loaded.translator
    if metric == "train_tokens_per_s":
        return _train_tokens_per_s(sj, settings.train_steps)
    if metric == "sentences_per_s":
        return translator.timed_translate_ids(sj.batch_ids, beam_size=1)[1]
    if metric in results.CT2_METRICS:
        return sj.ct2_round.pop(metric, None)
    beam = 1 if "greedy" in metric else translator.decode.beam_size
    if beam == 1 and "beam" in metric:
        return None
    seconds = decode_timed(translator, sj.latency_ids, beam, one_at_a_time=True)[1]
    return seconds * 1000 / len(sj.latency_ids)


def _turn(sj: SpeedJob, metric: str, settings: SpeedSettings) -> None:
    """Measure, and on CUDA keep the peak memory the turn added to what was allocated."""
    cuda = sj.device.type == "cuda"
    if cuda:
        before_mb = torch.cuda.memory_allocated(sj.device) / 2**20
        reset_peak_memory(sj.device)
    sj.values.setdefault(metric, []).append(measure_one(sj, metric, settings))
    if cuda:
        sj.round_peak_mb = max(sj.round_peak_mb, peak_memory_mb(sj.device) - before_mb)


def timed_metrics(jobs: list[SpeedJob]) -> list[str]:
    ct2 = any(sj.ct2 is not None for sj in jobs)
    beam = any(sj.loaded.translator.decode.beam_size > 1 for sj in jobs)
    return [m for m in TIMED if (ct2 or "ct2_" not in m) and (beam or "_beam_" not in m)]


def measure(jobs: list[SpeedJob], settings: SpeedSettings) -> list[list[str]]:
    """Every round, metric and job in the round's rotated order; returns each round's order."""
    for sj in jobs:  # untimed: lazy initialisation, the allocator, kernels for these shapes
        translator = sj.loaded.translator
        translator.translate_ids(sj.latency_ids[:2], beam_size=1)
        translator.translate_ids(sj.latency_ids[:2])
        translator.translate_ids(sj.batch_ids, beam_size=1)
    order, metrics, done = [], timed_metrics(jobs), 0
    turns = settings.rounds * len(metrics) * len(jobs)
    for r in range(settings.rounds):
        visit = rotated(jobs, r)
        order.append([sj.job.name for sj in visit])
        for sj in jobs:
            sj.round_peak_mb = 0.0
        for metric in metrics:
            if metric == next(iter(results.CT2_METRICS)):  # this round's CTranslate2 process
                ct2_latency(visit)
            for sj in visit:
                print_progress(done, turns, r, metric, sj.job.name)
                _turn(sj, metric, settings)
                done += 1
        for sj in jobs:  # on CUDA: the round's peak plus the job's own weights
            tensors = [*sj.loaded.model.parameters(), *sj.loaded.model.buffers()]
            weights_mb = sum(t.numel() * t.element_size() for t in tensors) / 2**20
            peak = weights_mb + sj.round_peak_mb if sj.device.type == "cuda" else None
            sj.values.setdefault("peak_mem_mb", []).append(peak)
    return order


def print_progress(done: int, total: int, r: int, metric: str, name: str) -> None:
    # Rewritten in place on a terminal, a line each in a log.
    text = f"[{done + 1:>{len(str(total))}}/{total}] round {r + 1}, {metric}: {name}"
    tty, last = sys.stderr.isatty(), done + 1 == total
    end = "" if tty and not last else "\n"
    print(f"\r\033[K{text}" if tty else text, end=end, file=sys.stderr, flush=True)


def median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def ranges(values: dict[str, list]) -> dict:
    out = {}
    for m in METRICS:
        timed = [v for v in values.get(m, []) if v is not None]
        out[f"{m}_min"], out[f"{m}_max"] = (min(timed), max(timed)) if timed else (None, None)
    return out


def heads_rows(
    entries: list[dict], baseline_heads: int | None = results.BASELINE_HEADS
) -> list[dict]:
    """Per (heads, kv_heads): each metric's median over seeds, and its ratio to the baseline's."""
    rows = []
    for heads, kv in sorted({heads_key(e) for e in entries}):
        group = [e for e in entries if heads_key(e) == (heads, kv)]
        row = {"heads": heads, "kv_heads": kv, "jobs": [e["name"] for e in group]}
        row["seeds"] = [e["seed"] for e in group]
        row.update({m: median([e.get(m) for e in group]) for m in METRICS})
        # The row's value in each round is the median over its jobs, as its figure is: its
        # spread is then the rounds', not the seeds' (whose models decode to other lengths).
        rounds = {m: [e.get("rounds", {}).get(m, []) for e in group] for m in METRICS}
        row.update(ranges({m: [median(list(v)) for v in zip(*r)] for m, r in rounds.items()}))
        rows.append(row)
    base = next((r for r in rows if heads_key(r) == (baseline_heads, baseline_heads)), {})
    for row in rows if baseline_heads is not None else []:
        for m in METRICS:
            value, ref = row[m], base.get(m)
            row[f"{m}_vs_{baseline_heads}"] = None if not (value and ref) else value / ref
    return rows


def run_speed(
    sweep_dir: str | Path, settings: SpeedSettings, out: str | Path | None = None
) -> tuple[dict, Path]:
    sweep_dir, warnings, not_timed = results.existing_sweep_dir(sweep_dir), [], []
    path = Path(out) if out is not None else sweep_dir / results.SPEED_FILE
    output = io.check_output_file(path, "--json", "ablation speed")  # before any timing
    jobs = load_jobs(sweep_dir, settings, not_timed)
    split = prepare_inputs(jobs, settings, warnings)
    with tempfile.TemporaryDirectory(prefix="ablation_speed_ct2_") as folder:
        if settings.ct2:
            load_ct2(jobs, Path(folder), warnings)
        order = measure(jobs, settings)
    entries = [
        results.job_fields(sj.job)
        | {"params": count_parameters(sj.loaded.model), "checkpoint": str(sj.checkpoint)}
        | {"beam_size": sj.loaded.translator.decode.beam_size}
        | {m: median(sj.values.get(m, [])) for m in METRICS}
        | ranges(sj.values)
        | {"rounds": {m: sj.values.get(m, []) for m in METRICS}}
        for sj in jobs
    ]
    if busy := results.busy_warning(entries):
        warnings.append(busy)
    baseline = choose_baseline({heads_key(e) for e in entries}, results.BASELINE_HEADS)
    device, precision = jobs[0].device, jobs[0].loaded.translator.precision
    payload = {
        "machine": {**machine(device), "ctranslate2": package_version("ctranslate2")},
        "settings": dataclasses.asdict(settings) | {"precision": precision, "test_split": split},
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


def print_speed_table(payload: dict) -> str:
    base, metrics = payload["baseline_heads"], results.shown_metrics(payload)
    kv_axis = any(kv != heads for heads, kv in map(heads_key, payload["heads"]))
    rows = []
    for row in payload["heads"]:
        cells = {"heads": heads_key(row)[0], "kv": heads_key(row)[1], "jobs": len(row["jobs"])}
        cells |= {m: results.speed_cell(row, m, d, base) for m, (_, d) in metrics.items()}
        rows.append(cells | {"spread": results.spread_cell(row)})
    columns = [("heads", "heads"), *([("kv", "kv heads")] if kv_axis else []), ("jobs", "jobs")]
    columns += [*((m, label) for m, (label, _) in metrics.items()), ("spread", "round spread")]
    s = payload["settings"]
    ratios = "no ratios (no row is multi-head)"
    if base is not None:  # 8 heads, else the sweep's largest head count
        ratios = f"(x) = ratio to {base} heads" + (f" with {base} kv heads" if kv_axis else "")
    title = (
        f"{payload['machine']['device_name']}, {counted(payload['machine']['threads'], 'thread')}, "
        f"precision {s['precision']}; medians of {s['rounds']} interleaved rounds; {ratios}; "
        "round spread = the widest max / min - 1 of a row's rounds"
    )
    return common.print_table(rows, [(key, label, "") for key, label in columns], title)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=plain_text(__doc__.splitlines()[0]))
    parser.add_argument("sweep_dir", help="a multirun dir, e.g. outputs/multirun/<date_time>")
    for option, (dest, what) in COUNTS.items():
        default = getattr(SpeedSettings, dest)
        parser.add_argument(option, type=int, default=default, help=f"{what} (default {default})")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    parser.add_argument("--precision", default="auto", help="auto, 32, bf16 or fp16")
    parser.add_argument("--json", help="output (default SWEEP_DIR/ablation_speed.json)")
    # docs/ablation.md: a busy 2-core machine's figures were several times slower at 2 threads.
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch (and CTranslate2) CPU threads (default %(default)s: more give unsteady "
        "timings where other work shares the machine)",
    )
    parser.add_argument("--no-ct2", action="store_true", help="no CTranslate2 batch-1 latency")
    common.add_malloc_arg(parser)
    args = parser.parse_args(argv)
    sizes = [getattr(args, dest) for dest, _ in COUNTS.values()]
    settings = SpeedSettings(*sizes, args.device, args.precision, not args.no_ct2)
    try:
        results.at_least_one([*zip(COUNTS, sizes), ("--threads", args.threads)])
        torch.set_num_threads(args.threads)  # recorded in the file's machine section
        if not args.system_malloc:  # recorded there too
            keep_freed_memory()
        payload, path = run_speed(args.sweep_dir, settings, args.json)
    except UserError as err:
        if debug_enabled():
            raise
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    print_speed_table(payload)
    for job in payload["not_timed"]:
        print(f"not timed: {job['name']}: {job['reason']}")
    for warning in payload["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"wrote {path}")
    return 0
