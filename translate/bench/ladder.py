"""A budget ladder: one training recipe at several ``trainer.max_minutes`` on one machine.

Each rung and seed is one ``python -m translate.train`` run with ``trainer.resume=auto``, in
turn: the same command again skips finished rungs and resumes an interrupted one. Ctrl-C (to the
process group) stops the rung at its next step with a checkpoint; a signal to the ladder alone
lets the rung finish, then stops. docs/benchmarks.md says more.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import statistics
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch

from translate.bench import common
from translate.cli import exit_on_user_error
from translate.errors import UserError, hydra_quoted

ROSE_BY = 0.01  # nats of dev loss: a rise above the run's lowest that is not noise
# A smoke check in seconds; validating every 25 updates draws a dev curve of a few points.
QUICK = {"experiment": "quickstart", "minutes": [0.1, 0.2], "extra_seeds": []}
QUICK_OVERRIDES = ["trainer.val_every_n_steps=25"]
_STOP = (signal.SIGINT, signal.SIGTERM)  # noted while a rung trains (signals_noted)
# Set by the ladder for every run; an override of one would contradict its own options.
OWN_KEYS = ("experiment", "trainer.max_minutes", "seed", "hydra.run.dir", "trainer.resume")
COLUMNS = [
    ("rung", "run", ""),
    ("steps", "updates", ""),
    ("precision", "precision", ""),
    ("train_minutes", "train min", ".2f"),
    ("validations", "validations", ""),
    ("best_dev_loss_step", "min dev loss at", ""),
    ("last_dev_loss_above_min", "last - min dev loss", ".3f"),
    ("early_cooldown_from", "early cooldown from", ""),
    ("scored_checkpoint", "scored", ""),
    ("bleu", "test BLEU", ".2f"),
    ("bleu_greedy", "greedy BLEU", ".2f"),
]


def minutes_list(text: str) -> list[float]:
    parse = common.number(float, low=1e-3)
    return [parse(part) for part in text.split(",")]


def extra_seed(text: str) -> tuple[float, int]:
    """An argparse ``type``: ``<minutes>=<seed>``, e.g. ``13=2``."""
    minutes, sep, seed = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r} is not <minutes>=<seed>, e.g. 13=2")
    return common.number(float, low=1e-3)(minutes), common.number(int, low=0)(seed)


def override(text: str) -> str:
    """An argparse ``type``: a Hydra override, none of the keys the ladder sets itself."""
    key = text.partition("=")[0].lstrip("+~")
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"{text!r} is not a Hydra override key=value")
    if key in OWN_KEYS:
        raise argparse.ArgumentTypeError(
            f"{key} is the ladder's to set: use --experiment, --minutes, --seeds, --out"
        )
    return text


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = common.parser("ladder", __doc__, timing=False)
    add = parser.add_argument
    add("--experiment", default=None, help="the preset (default: multi30k_cpu)")
    add("--minutes", type=minutes_list, default=None, help="the rungs (default: 6.5,13,26)")
    add("--seeds", type=common.number(), default=1, help="seeds 1..N at every rung (default: 1)")
    extra_help = "one more seed at one rung (default: 13=2; none with --quick)"
    add("--extra-seeds", type=extra_seed, nargs="*", metavar="MIN=SEED", help=extra_help)
    out_help = "one run dir per rung and seed, <out>/min<m>_seed<s> (default: "
    out_help += "outputs/ladder/<experiment>); the same --out again resumes the ladder"
    add("--out", type=Path, default=None, help=out_help)
    add("--json", type=common.json_output("ladder"), metavar="PATH", help="write results")
    add("--quick", action="store_true", help="quickstart at 0.1 and 0.2 minutes: a smoke check")
    overrides_help = "Hydra overrides for every run, e.g. data.dir=../shared/data/multi30k"
    add("overrides", nargs="*", type=override, metavar="KEY=VALUE", help=overrides_help)
    args = parser.parse_args(argv)
    defaults = QUICK if args.quick else {"experiment": "multi30k_cpu", "minutes": [6.5, 13.0, 26.0]}
    args.experiment = args.experiment or defaults["experiment"]
    args.minutes = args.minutes or defaults["minutes"]
    if args.extra_seeds is None:
        args.extra_seeds = defaults.get("extra_seeds", [(13.0, 2)])
    args.out = args.out or Path("outputs/ladder") / args.experiment
    args.overrides = [*(QUICK_OVERRIDES if args.quick else []), *args.overrides]  # theirs win
    for minutes, _ in args.extra_seeds:
        if minutes not in args.minutes:
            parser.error(f"--extra-seeds {minutes:g}=...: {minutes:g} is not one of --minutes")
    return args


def rungs(args: argparse.Namespace) -> list[tuple[float, int]]:
    """Every (minutes, seed) to run, in order: shortest rung first, its seeds ascending."""
    plan = {(m, s) for m in args.minutes for s in range(1, args.seeds + 1)}
    return sorted(plan | set(args.extra_seeds))


def rung_name(minutes: float, seed: int) -> str:
    return f"min{minutes:g}_seed{seed}"


def train_command(args: argparse.Namespace, minutes: float, seed: int) -> list[str]:
    run_dir = hydra_quoted(str(args.out / rung_name(minutes, seed)))
    own = [f"experiment={args.experiment}", f"trainer.max_minutes={minutes:g}", f"seed={seed}"]
    own += [f"hydra.run.dir={run_dir}", "trainer.resume=auto", "trainer.progress_bar=false"]
    return [sys.executable, "-m", "translate.train", *own, *args.overrides]


@contextlib.contextmanager
def signals_noted() -> Iterator[list[int]]:
    """While a rung trains: SIGINT and SIGTERM to the ladder are noted, not raised (Ctrl-C
    reaches the run, which saves and exits; ``subprocess.run`` would kill it on a raise)."""
    noted: list[int] = []
    previous = {sig: signal.signal(sig, lambda n, _: noted.append(n)) for sig in _STOP}
    try:
        yield noted
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_rung(args: argparse.Namespace, minutes: float, seed: int) -> dict:
    """Train one rung (or find it finished) and read its results."""
    name, run_dir = rung_name(minutes, seed), args.out / rung_name(minutes, seed)
    results_file = run_dir / "results.json"
    before = results_file.read_bytes() if results_file.is_file() else None
    if before is None:
        print(f"{name}: training (trainer.max_minutes={minutes:g}, seed {seed})", flush=True)
    with signals_noted() as noted:
        proc = subprocess.run(train_command(args, minutes, seed), capture_output=True, text=True)
    stop_on_signal(name, run_dir, noted, proc.returncode)
    if proc.returncode:
        log = run_dir / "train.log"
        raise UserError(
            f"{name}: python -m translate.train exited {proc.returncode}: "
            f"{child_error(proc.stderr)}{f' (its log: {log})' if log.is_file() else ''}; the "
            "rungs before it are kept: fix that and run the same command again to go on"
        )
    row = rung_row(name, minutes, seed, run_dir)
    row["skipped"] = before == results_file.read_bytes()
    what = "skipped, finished before" if row["skipped"] else "finished"
    print(
        f"{name}: {what}: {row['steps']:,} updates in {row['train_minutes']:.3g} min, "
        f"test BLEU {common.fmt(row['bleu'], '.2f')} (greedy "
        f"{common.fmt(row['bleu_greedy'], '.2f')}), {row['scored_checkpoint']}.pt scored",
        flush=True,
    )
    return row


def child_error(stderr: str) -> str:
    """A failed run's ``error:`` line, else (Hydra refusing an override) its first line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line.removeprefix("error: ") for line in lines if line.startswith("error: ")]
    return errors[-1] if errors else lines[0] if lines else "no message"


def stop_on_signal(name: str, run_dir: Path, noted: list[int], returncode: int) -> None:
    """A signal to the ladder or its rung stops the ladder: one line, exit 128 + signal."""
    by_signal = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else None
    stop = noted[0] if noted else by_signal
    if stop is None:
        return
    where = f"after {name} finished" if returncode == 0 else f"at {name} (saved in {run_dir})"
    print(
        f"error: stopped by {signal.Signals(stop).name} {where}; run the same command again "
        "to resume the ladder there",
        file=sys.stderr,
    )
    raise SystemExit(128 + stop)


def dev_curve(run_dir: Path) -> list[dict]:
    """Each validation's step, dev loss and dev BLEU from TensorBoard (repeated step: the later)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    tags = events.Tags().get("scalars", [])
    curve: dict[int, dict] = {}
    for tag, key in (("dev/loss", "dev_loss"), ("dev/bleu", "dev_bleu")):
        for event in events.Scalars(tag) if tag in tags else []:
            curve.setdefault(event.step, {"step": event.step})[key] = event.value
    return [curve[step] for step in sorted(curve)]


def lowest_dev_loss(curve: list[dict]) -> tuple[int | None, float | None]:
    """The step of a dev curve's lowest loss, and how far its last loss is above it."""
    losses = [point for point in curve if "dev_loss" in point]
    if not losses:
        return None, None
    lowest = min(losses, key=lambda point: point["dev_loss"])
    return lowest["step"], losses[-1]["dev_loss"] - lowest["dev_loss"]


def rose(rise: float | None) -> bool:
    """Whether a run's last dev loss is above its lowest by more than :data:`ROSE_BY`."""
    return rise is not None and rise > ROSE_BY


def rung_row(name: str, minutes: float, seed: int, run_dir: Path) -> dict:
    results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    curve = dev_curve(run_dir)
    lowest_step, rise = lowest_dev_loss(curve)
    greedy = results["bleu_greedy"]
    ran = ("steps", "precision", "device", "train_minutes", "tokens_per_s")
    return {
        "rung": name,
        "minutes": minutes,
        "seed": seed,
        "run_dir": str(run_dir),
        **{k: results[k] for k in ran},
        "validations": len(curve),
        "dev_curve": curve,
        "best_dev_loss_step": lowest_step,
        "last_dev_loss_above_min": rise,
        # The step a dev loss without a new low started the cooldown (optim.cooldown_patience).
        "early_cooldown_from": (results.get("early_cooldown") or [None])[0],
        **{k: results[k] for k in ("scored_checkpoint", "beam_size", "bleu")},
        # A greedy recipe scores greedy: its test BLEU is the greedy one.
        "bleu_greedy": results["bleu"] if greedy is None else greedy,
    }


def summarize(rows: list[dict], minutes: list[float]) -> dict:
    """Per rung the mean test BLEU over its seeds and whether any run's dev loss rose at the end
    (:func:`rose`); whether the longest rung scores below the one before it."""
    summary, means = {}, {}
    for m in sorted(minutes):
        mine = [row for row in rows if row["minutes"] == m]
        means[m] = statistics.fmean(row["bleu"] for row in mine)
        summary[f"bleu_min{m:g}"] = means[m]
        rises = [row["last_dev_loss_above_min"] for row in mine]
        summary[f"dev_loss_rose_min{m:g}"] = any(rose(r) for r in rises)
    if len(means) > 1:
        *_, previous, longest = means.values()
        summary["longest_below_previous"] = longest < previous
    return summary


def main(argv: Sequence[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    plan = rungs(args)
    print(
        f"ladder: {args.experiment}, {len(plan)} runs "
        f"({', '.join(rung_name(m, s) for m, s in plan)}) into {args.out}",
        flush=True,
    )
    rows = [run_rung(args, minutes, seed) for minutes, seed in plan]
    print()
    common.print_table(rows, COLUMNS, title=f"Budget ladder: {args.experiment}")
    sections = {"experiment": args.experiment, "overrides": args.overrides, "rows": rows}
    summary = summarize(rows, args.minutes)
    return common.finish("ladder", argv, args, torch.device("cpu"), summary, **sections)


if __name__ == "__main__":
    exit_on_user_error(main)()  # a failed or stopped rung: one line
