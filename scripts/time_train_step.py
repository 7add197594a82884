"""Time (and optionally profile) training's own step on a preset's real batches.

    python scripts/time_train_step.py --precision bf16 --no-pad data.dir=../shared/data/multi30k
    python scripts/time_train_step.py --precision bf16 --profile data.dir=../shared/data/multi30k

``translate.bench.train`` repeats a few synthetic batches, so every matmul shape recurs; training
draws batches whose shapes almost never recur, which is what made bf16 on a CPU no faster than
fp32 until batches were padded (docs/benchmarks.md, "bf16 on the CPU"). This script steps
``translate.training.step.Trainer`` through the first batches of epoch 0 of the preset's
training split, each once, after a few untimed ones, and prints tokens/s; ``--profile``: each
op's share of the CPU time. Lab tooling: outside the package, not a benchmark with targets.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

from translate.data.corpus import load_corpus
from translate.runtime.device import resolve_precision
from translate.runtime.rng import seed_everything
from translate.settings import train_settings
from translate.training.loop import TrainBatches
from translate.training.optim import Schedule
from translate.training.step import Trainer, pads_shapes

CONF = Path(__file__).resolve().parents[1] / "conf"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", default="multi30k_cpu")
    parser.add_argument("--precision", default="32", choices=["32", "bf16"])
    parser.add_argument("--no-pad", action="store_true", help="bf16 without padded shapes")
    parser.add_argument("--steps", type=int, default=300, help="timed steps")
    parser.add_argument("--warmup", type=int, default=20, help="untimed steps before")
    parser.add_argument("--profile", action="store_true", help="each op's share (torch.profiler)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. data.dir=...")
    args = parser.parse_args()
    overrides = [f"experiment={args.experiment}", f"runtime.precision={args.precision}"]
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose("train", [*overrides, "run_dir=unused", *args.overrides])
    settings = train_settings(cfg)
    settings.runtime.apply_to_process()
    seed_everything(settings.seed)
    corpus = load_corpus(settings.data)
    device = torch.device("cpu")
    precision = resolve_precision(settings.runtime.precision, device, training=True)
    model = settings.model.build(corpus.tokenizer.vocab_size, corpus.tokenizer.PAD)
    pad = pads_shapes(device, precision) and not args.no_pad
    schedule = Schedule(settings.optim.warmup_steps)
    pad_id = corpus.tokenizer.PAD
    trainer = Trainer(
        model, settings.optim, device, precision, pad_id, schedule=schedule, pad_shapes=pad
    )
    batches = TrainBatches(corpus.splits["train"], corpus.max_tokens, settings.seed)
    groups = list(itertools.islice(batches.epoch(0, 0, 1), args.warmup + args.steps))
    for group in groups[: args.warmup]:
        trainer.step(group)
    profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    with profiler if args.profile else contextlib.nullcontext():
        start, tokens = time.perf_counter(), 0
        for group in groups[args.warmup :]:
            tokens += trainer.step(group).tokens
        seconds = time.perf_counter() - start
    print(
        f"{args.experiment}: precision {precision}, {settings.model.attention_impl} attention, "
        f"padded shapes {pad}, {torch.get_num_threads()} threads: {args.steps} steps, "
        f"{args.steps / seconds:.2f} steps/s, {tokens / seconds:,.0f} tokens/s"
        + (" (under the profiler)" if args.profile else "")
    )
    if args.profile:
        print(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=20))


if __name__ == "__main__":
    main()
