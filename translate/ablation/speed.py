"""Time a heads sweep's models side by side: ``python -m translate.ablation speed <sweep_dir>``.

Loads every completed job's scored checkpoint into this one process and measures, in rounds
that visit every job in turn (a rotated order each round), batch-1 latency (greedy and beam),
batched sentences/s and training tokens/s, plus peak memory on CUDA; medians over rounds
(``translate.analysis.speed``). Beside our batch-1 latency, CTranslate2's: each checkpoint is
exported (float32) into a temporary folder and timed in the same rounds, at as many threads as
torch (``--threads``); ``--no-ct2``, or ``ctranslate2`` not installed, leaves it out. Writes
``ablation_speed.json`` into the sweep dir (or ``--json``), where
``python -m translate.ablation report`` takes the report's speed columns from; the jobs not
timed (failed, or without their checkpoint inside the sweep dir) are listed with the reason.
Exits 2 with a one-line error when the sweep dir does not exist or has no completed job.
"""

from __future__ import annotations

import argparse
import sys

import torch

from translate.analysis.ablation_stats import heads_key
from translate.analysis.speed import SpeedSettings, run_speed
from translate.analysis.speed_file import ratio_key, shown_metrics
from translate.bench import common
from translate.errors import EXIT_USER_ERROR, UserError, debug_enabled
from translate.runtime.memory import keep_freed_memory
from translate.training.step import Trainer

DEFAULTS = SpeedSettings()


def format_table(payload: dict) -> str:
    """The per-row medians with their ratios to the baseline, as aligned text; a kv heads
    column when the sweep varies kv_heads (rows from before GQA have none: multi-head), and
    CTranslate2's latency where measured."""
    base, metrics = payload["baseline_heads"], shown_metrics(payload)
    keys = [heads_key(row) for row in payload["heads"]]
    kv_axis = any(kv != heads for heads, kv in keys)
    header = ["heads", *(["kv heads"] if kv_axis else []), "jobs"]
    header += [label for label, _ in metrics.values()]
    lines = [header]
    for row, (heads, kv) in zip(payload["heads"], keys):
        cells = [str(heads), *([str(kv)] if kv_axis else []), str(len(row["jobs"]))]
        for m, (_, digits) in metrics.items():
            value = row.get(m)
            ratio = None if base is None else row.get(ratio_key(m, base))
            text = "-" if value is None else f"{value:,.{digits}f}"
            cells.append(text + ("" if ratio is None else f" ({ratio:.2f}x)"))
        lines.append(cells)
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = ["  ".join(c.rjust(w) for c, w in zip(line, widths)) for line in lines]
    s = payload["settings"]
    ratios = "no ratios (no row is multi-head)"
    if base is not None:  # 8 heads, else the sweep's largest head count
        ratios = f"(x) = ratio to {base} heads" + (f" with {base} kv heads" if kv_axis else "")
    return "\n".join(
        [
            f"{payload['machine']['device_name']}, {payload['machine']['threads']} threads, "
            f"precision {s['precision']}; medians of {s['rounds']} interleaved rounds; {ratios}",
            *text,
        ]
    )


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", help="a multirun dir, e.g. outputs/multirun/<date_time>")
    parser.add_argument("--rounds", type=int, default=DEFAULTS.rounds, help="default %(default)s")
    parser.add_argument(
        "--sentences",
        type=int,
        default=DEFAULTS.sentences,
        help="test sentences for batch-1 latency (default %(default)s)",
    )
    parser.add_argument(
        "--batch-sentences",
        type=int,
        default=DEFAULTS.batch_sentences,
        help="test sentences for batched sentences/s and the training batches (%(default)s)",
    )
    parser.add_argument(
        "--train-steps",
        type=int,
        default=DEFAULTS.train_steps,
        help="timed optimizer steps per job and round (default %(default)s)",
    )
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    parser.add_argument("--precision", default="auto", help="auto, 32, bf16 or fp16")
    parser.add_argument(
        "--json", default=None, help="output (default SWEEP_DIR/ablation_speed.json)"
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="torch (and CTranslate2) CPU threads"
    )
    parser.add_argument(
        "--no-ct2", action="store_true", help="leave out CTranslate2's batch-1 latency"
    )
    common.add_malloc_arg(parser)
    args = parser.parse_args(argv)
    settings = SpeedSettings(
        args.rounds, args.sentences, args.batch_sentences, args.train_steps, args.device,
        args.precision, not args.no_ct2,
    )  # fmt: skip
    try:
        counts = {
            "--rounds": args.rounds,
            "--sentences": args.sentences,
            "--batch-sentences": args.batch_sentences,
            "--train-steps": args.train_steps,
            "--threads": args.threads,  # None: torch's default
        }
        for option, count in counts.items():
            if count is not None and count < 1:
                raise UserError(f"{option} {count} must be >= 1")
        if args.threads is not None:  # recorded in the file's machine section
            torch.set_num_threads(args.threads)
        if not args.system_malloc:  # recorded there too
            keep_freed_memory()
        payload, path = run_speed(args.sweep_dir, settings, Trainer, args.json)
    except UserError as err:
        if debug_enabled():
            raise
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    print(format_table(payload))
    for job in payload["not_timed"]:
        print(f"not timed: {job['name']}: {job['reason']}")
    for warning in payload["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"wrote {path}")
    return 0
