"""Time a heads sweep's models side by side: ``python -m translate.ablation speed <sweep_dir>``.

Every completed job's scored checkpoint, timed by :func:`translate.analysis.speed.run_speed`
into ``ablation_speed.json`` in the sweep dir (or ``--json``), where the report takes its speed
columns from (how: docs/ablation.md, "Speed, side by side").
"""

from __future__ import annotations

import argparse
import sys

import torch

from translate.analysis.ablation import shown_metrics, speed_cell, spread_cell
from translate.analysis.ablation_stats import heads_key
from translate.analysis.speed import SpeedSettings, run_speed
from translate.bench import common
from translate.errors import EXIT_USER_ERROR, UserError, counted, debug_enabled, plain_text
from translate.runtime.memory import keep_freed_memory
from translate.training.step import Trainer

DEFAULTS = SpeedSettings()
# The counts a user sets: option -> (SpeedSettings field, what it counts).
COUNTS = {
    "--rounds": ("rounds", "interleaved rounds"),
    "--sentences": ("sentences", "test sentences for batch-1 latency"),
    "--batch-sentences": ("batch_sentences", "test sentences for sent/s and the training batches"),
    "--train-steps": ("train_steps", "timed optimizer steps per job and round"),
}
# One thread by default: on a machine that other work shares, more threads wait on each other
# (a busy 2-core machine: 251 s and one job's rounds from 48 to 1,547 ms at 2 threads, 18 s and
# 9-10 ms at 1).
THREADS = 1


def print_speed_table(payload: dict) -> str:
    """Print the per-row medians with their ratios to the baseline row."""
    base, metrics = payload["baseline_heads"], shown_metrics(payload)
    kv_axis = any(kv != heads for heads, kv in map(heads_key, payload["heads"]))
    rows = []
    for row in payload["heads"]:
        cells = {"heads": heads_key(row)[0], "kv": heads_key(row)[1], "jobs": len(row["jobs"])}
        cells |= {m: speed_cell(row, m, d, base) for m, (_, d) in metrics.items()}
        rows.append(cells | {"spread": spread_cell(row)})
    columns = [("heads", "heads", ""), *([("kv", "kv heads", "")] if kv_axis else [])]
    columns += [("jobs", "jobs", ""), *((m, label, "") for m, (label, _) in metrics.items())]
    columns += [("spread", "round spread", "")]
    s = payload["settings"]
    ratios = "no ratios (no row is multi-head)"
    if base is not None:  # 8 heads, else the sweep's largest head count
        ratios = f"(x) = ratio to {base} heads" + (f" with {base} kv heads" if kv_axis else "")
    title = (
        f"{payload['machine']['device_name']}, {counted(payload['machine']['threads'], 'thread')}, "
        f"precision {s['precision']}; medians of {s['rounds']} interleaved rounds; {ratios}; "
        "round spread = the widest max / min - 1 of a row's rounds"
    )
    return common.print_table(rows, columns, title)


def print_progress(done: int, total: int, r: int, metric: str, name: str) -> None:
    """``[ 12/120] round 1, latency_greedy_ms: heads=4,seed=1`` on standard error, before each
    turn: rewritten in place on a terminal, a line each elsewhere (a log)."""
    text = f"[{done + 1:>{len(str(total))}}/{total}] round {r + 1}, {metric}: {name}"
    if sys.stderr.isatty():
        last = done + 1 == total
        print(f"\r\033[K{text}", end="\n" if last else "", file=sys.stderr, flush=True)
    else:
        print(text, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=plain_text(__doc__.splitlines()[0]))
    parser.add_argument("sweep_dir", help="a multirun dir, e.g. outputs/multirun/<date_time>")
    for option, (dest, what) in COUNTS.items():
        default = getattr(DEFAULTS, dest)
        parser.add_argument(option, type=int, default=default, help=f"{what} (default {default})")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    parser.add_argument("--precision", default="auto", help="auto, 32, bf16 or fp16")
    parser.add_argument("--json", help="output (default SWEEP_DIR/ablation_speed.json)")
    parser.add_argument(
        "--threads",
        type=int,
        default=THREADS,
        help="torch (and CTranslate2) CPU threads (default %(default)s: more give unsteady "
        "timings where other work shares the machine)",
    )
    parser.add_argument("--no-ct2", action="store_true", help="no CTranslate2 batch-1 latency")
    common.add_malloc_arg(parser)
    args = parser.parse_args(argv)
    sizes = [getattr(args, dest) for dest, _ in COUNTS.values()]
    settings = SpeedSettings(*sizes, args.device, args.precision, not args.no_ct2)
    try:
        for option, count in [*zip(COUNTS, sizes), ("--threads", args.threads)]:
            if count < 1:
                raise UserError(f"{option} {count} must be >= 1")
        torch.set_num_threads(args.threads)  # recorded in the file's machine section
        if not args.system_malloc:  # recorded there too
            keep_freed_memory()
        payload, path = run_speed(args.sweep_dir, settings, Trainer, args.json, print_progress)
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
