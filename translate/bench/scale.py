"""IWSLT2017 at its real size on the CPU, stage by stage: what a GPU user waits for around the
GPU, measured on a stand-in corpus of the real size (``translate/bench/scale_corpus.py``).

    python -m translate.bench.scale_corpus --pairs 206112 --out /tmp/iwslt-scale
    python -m translate.bench.scale --data /tmp/iwslt-scale --json docs/scale.json
    python -m translate.bench.scale --data /tmp/iwslt-scale --stages tokenizer,data

Stages (``--stages``, in this order; each adds its section to ``--json``, so a subset updates
the sections it runs and keeps the others):

- ``tokenizer``: the recipe's 16k unigram over both sides of train, with
  ``input_sentence_size`` 0 (all) and ``--sample-sentences``: time, peak RSS, and the mean
  subwords per dev sentence each gives (the vocabulary's quality on dev);
- ``data``: ``load_corpus`` (read, encode, filter) with the tokenizer cached and the encodings
  not, then again from the cache; one epoch's token batches; time, peak RSS, cache size;
- ``start``: ``python -m translate.train experiment=iwslt2017 data.path=...`` from a cold cache,
  then a warm one: seconds from the command to its first update;
- ``d512``: tokens/s of the recipe's model (d_model 512) training on the CPU, a checkpoint save;
- ``host``: the training loop (``fit``) with a tiny model at the recipe's 8,192-token batches:
  updates/s and where an update's time goes (:mod:`translate.bench.scale_host`);
- ``syncs``: value reads on the host (device synchronisations on CUDA) per update, by line;
- ``decode``: the (untrained) d512 model decoding the 888 dev sentences greedy and beam 5 and
  the test split beam 5 (``--test-sentences`` to cap it): time per sentence, peak RSS;
- ``ddp``: torchrun with 2 gloo ranks from a cold cache: builds, rank 1's wait and its limit;
- ``sweep``: a 2-job multirun from a cold cache through the local launcher: builds;
- ``scaling``: the tokenizer and data stages at ``--scaling`` pairs (prefixes of the corpus)
  and the full size, the fastest of ``--scaling-rounds`` runs each: the growth exponent of
  each stage's time.

Every stage runs in a process of its own (its peak resident size is its own, ``VmHWM``); the
training commands run as a user runs them. Timings on a shared machine vary with its load: the
load average is recorded beside each stage, and ``--threads 1`` keeps torch's threads from
spinning against the other jobs.

Goals (``summary``, each said met or not): cold command to first update <= 300 s; a cached
start to the start of training <= 20 s (``start_to_training_cached_s``; the first update after
it is one d512 update on the CPU, ``first_update_cached_s``); data stages' peak RSS <= 6 GB;
the loop's host side <= 10 ms an update (``host_loop_updates_per_s`` >= 100: the loop without
the step, whose tiny-model time on the CPU is mostly the 16k-vocabulary projection and loss,
compute a GPU runs asynchronously; the step's own host floor is ``ops_per_update`` times this
CPU's dispatch cost, ``dispatch_floor_updates_per_s``); one tokenizer build for 2 DDP ranks and
for a 2-job sweep; no stage's time growing faster than pairs^1.15.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from translate.bench import common
from translate.bench import scale_commands as commands
from translate.bench.scale_report import print_tables, summarize
from translate.cli import run_plain_command

STAGES = ("tokenizer", "data", "start", "d512", "host", "syncs", "decode", "ddp", "sweep")
STAGES += ("scaling",)
TARGETS = {
    "first_update_cold_s": ("<=", 300.0),
    "start_to_training_cached_s": ("<=", 20.0),
    "data_peak_rss_mb": ("<=", 6144.0),
    "host_loop_updates_per_s": (">=", 100.0),
    "ddp_tokenizer_builds": ("<=", 1.0),
    "sweep_tokenizer_builds": ("<=", 1.0),
    "scaling_worst_exponent": ("<=", 1.15),
}


def params(args: argparse.Namespace, cache: Path, **extra) -> dict:
    """What a stage process is given (as JSON)."""
    return {
        "data": str(args.data),
        "cache": str(cache),
        "run_dir": str(args.work / "run"),
        "device": args.device,
        "threads": args.threads,
        "overrides": args.override,
        "seed": args.seed,
        "sentence_size": 0,
        "updates": args.updates,
        "host_updates": args.host_updates,
        "sync_updates": args.sync_updates,
        "sentences": 0,
        "command_timeout": args.command_timeout,
        **extra,
    }


def child(stage: str, p: dict) -> dict:
    """Run ``python -m translate.bench.scale_child stage`` in a fresh process; its result, with
    its wall time."""
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "translate.bench.scale_child", stage, json.dumps(p)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=common.ROOT,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or not lines:
        return {"error": f"exit {proc.returncode}; see its log above", "wall_s": _since(start)}
    return {**json.loads(lines[-1][len("RESULT ") :]), "wall_s": _since(start)}


def _since(start: float) -> float:
    return time.perf_counter() - start


def fresh(folder: Path) -> Path:
    """``folder`` emptied (a cold cache or run dir); only folders under ``--work`` are."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def run_tokenizer(args) -> dict:
    cache = args.work / "cache"
    shutil.rmtree(cache, ignore_errors=True)  # the data stage then encodes with this model
    sampled = fresh(args.work / "cache-sampled")
    return {
        "all": child("tokenizer", params(args, cache)),
        "sampled": child("tokenizer", params(args, sampled, sentence_size=args.sample_sentences)),
    }


def run_data(args) -> dict:
    cache = args.work / "cache"
    for stale in cache.glob("encoded-*.npz"):  # cold encodings, the tokenizer kept
        stale.unlink()
    return {
        "cold": child("data", params(args, cache)),
        "cached": child("data", params(args, cache)),
    }


def run_start(args) -> dict:
    p = params(args, fresh(args.work / "cache-start"))
    out = {}
    for name in ("cold", "cached"):
        try:
            out[name] = commands.first_update(p, fresh(args.work / f"start-{name}"))
        except (RuntimeError, TimeoutError) as err:
            out[name] = {"error": str(err)}
    return out


def run_decode(args) -> dict:
    cache = args.work / "cache"
    valid = params(args, cache, role="valid", beams=[1, 5], sentences=args.valid_sentences)
    test = params(args, cache, role="test", beams=[5], sentences=args.test_sentences)
    return {"valid": child("decode", valid), "test": child("decode", test)}


def run_commands(args, stage: str) -> dict:
    p = params(args, fresh(args.work / f"cache-{stage}"))
    target = args.work / f"{stage}-run"
    shutil.rmtree(target, ignore_errors=True)
    try:
        return getattr(commands, stage)(p, target)
    except TimeoutError as err:
        return {"error": str(err)}


def prefix_corpus(source: Path, folder: Path, pairs: int) -> Path:
    """The first ``pairs`` training pairs of the release in ``source`` and all of its dev and
    test pairs, written as a release folder (the scaling check's smaller corpora)."""
    from translate.data.iwslt import IwsltRelease
    from translate.data.iwslt_write import write_release

    release, langs = IwsltRelease(source), ("de", "en")
    splits = {}
    for name in ("train", "validation", "test"):
        rows = release.split(name, langs)["translation"]
        rows = rows[:pairs] if name == "train" else rows
        splits[name] = {lang: [r[lang] for r in rows] for lang in langs}
    write_release(folder, splits)
    return folder


def run_scaling(args) -> dict:
    """The tokenizer and data stages at each ``--scaling`` size and the full one, in
    ``--scaling-rounds`` rounds (ascending, then descending, ...), each size keeping its
    fastest run: on a shared machine one run's time moved fivefold with the load, which no
    single pass at each size can tell from growth."""
    full = _pairs(args.data)
    sizes = sorted({*args.scaling, full})
    folders = {full: args.data}
    for pairs in sizes[:-1]:
        base = fresh(args.work / f"scale-{pairs}")
        folders[pairs] = prefix_corpus(args.data, base / "data", pairs)
    out: dict = {str(n): {"tokenizer_s_runs": [], "data_s_runs": []} for n in sizes}
    for round_ in range(args.scaling_rounds):
        for pairs in sizes if round_ % 2 == 0 else sizes[::-1]:
            scaled = argparse.Namespace(**{**vars(args), "data": folders[pairs]})
            cache = fresh(args.work / f"scale-{pairs}" / "cache")
            node = out[str(pairs)]
            for stage, key in (("tokenizer", "train_s"), ("data", "load_s")):
                run = child(stage, params(scaled, cache))
                node[f"{stage}_s_runs"].append(run.get(key))
                if stage not in node or (run.get(key) or math.inf) < node[stage].get(key, math.inf):
                    node[stage] = run
    return out


def _pairs(folder: Path) -> int:
    """Training pairs of a release folder (lines of train.tags.*.de that are not markup)."""
    path = next(Path(folder).rglob("train.tags.*.de"))
    with path.open(encoding="utf-8") as f:
        return sum(not line.startswith("<") for line in f)


def run_stage(args, stage: str, argv: list[str]) -> dict:
    """One stage's section: its results, and when, how and under what load it ran."""
    start, load = time.perf_counter(), os.getloadavg()[0]
    print(f"\n=== {stage} ===", file=sys.stderr, flush=True)
    if stage in ("d512", "host", "syncs"):
        result = child(stage, params(args, args.work / "cache"))
    elif stage in ("ddp", "sweep"):
        result = run_commands(args, stage)
    elif stage == "scaling":
        result = run_scaling(args)
    else:
        result = RUNNERS[stage](args)
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": shlex.join(["python", "-m", "translate.bench.scale", *argv]),
        "stage_s": _since(start),
        "load_before": load,
        "load_after": os.getloadavg()[0],
    }
    return {**result, "meta": meta}


RUNNERS = {"tokenizer": run_tokenizer, "data": run_data, "start": run_start, "decode": run_decode}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m translate.bench.scale", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--data", type=Path, required=True, help="translate.bench.scale_corpus's --out"
    )
    parser.add_argument("--work", type=Path, default=common.ROOT / "outputs" / "rehearse_scale")
    parser.add_argument("--stages", default=",".join(STAGES), help="comma-separated subset")
    parser.add_argument("--json", type=common.json_output("scale"), default=None, metavar="PATH")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--threads",
        type=int,
        default=os.cpu_count() or 1,
        help="torch threads; 1 on a busy machine (2 threads on 2 shared cores ran the tiny "
        "model's update 11x slower than 1)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sample-sentences", type=int, default=100_000)
    parser.add_argument("--updates", type=int, default=3, help="timed d512 updates")
    parser.add_argument("--host-updates", type=int, default=300)
    parser.add_argument("--sync-updates", type=int, default=3)
    parser.add_argument("--valid-sentences", type=int, default=0, help="0: the whole dev split")
    parser.add_argument("--test-sentences", type=int, default=0, help="0: the whole test split")
    parser.add_argument("--scaling", default="50000,100000", help="smaller corpus sizes")
    parser.add_argument("--scaling-rounds", type=int, default=2, help="fastest of N runs")
    parser.add_argument("--command-timeout", type=float, default=3600.0, metavar="SECONDS")
    parser.add_argument(
        "--override", action="append", default=[], help="a Hydra override for every stage"
    )
    args = parser.parse_args(argv)
    args.stages = [s for s in args.stages.split(",") if s]
    unknown = sorted(set(args.stages) - set(STAGES))
    if unknown:
        parser.error(f"unknown stage(s) {unknown}; choose from {','.join(STAGES)}")
    args.scaling = [int(n) for n in args.scaling.split(",") if n]
    args.data, args.work = args.data.resolve(), args.work.resolve()
    if not args.data.is_dir():
        parser.error(
            f"--data {args.data} is not a folder (make it with translate.bench.scale_corpus)"
        )
    return args


def main(argv: Sequence[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    done = {}
    if args.json is not None and args.json.path is not None and args.json.path.is_file():
        done = json.loads(args.json.path.read_text()).get("stages", {})
    for stage in (s for s in STAGES if s in args.stages):
        done[stage] = run_stage(args, stage, argv)
        write(args, argv, done, quiet=True)  # after every stage: a stop loses little
    return write(args, argv, done, quiet=False)


def write(args, argv: list[str], done: dict, quiet: bool) -> dict:
    """The JSON document of the stages done so far (and, unless ``quiet``, the tables)."""
    summary = summarize(done)
    if not quiet:
        print_tables(done)
        common.print_summary(summary, TARGETS)
    result = common.report(
        "scale",
        argv,
        args,
        torch.device(args.device),
        summary,
        targets={k: list(v) for k, v in TARGETS.items()},
        stages=done,
    )
    if args.json is not None:
        args.json.write(json.dumps(result, indent=2, default=str) + "\n")
        if not quiet:
            print(f"wrote {args.json.path}")
    return result


if __name__ == "__main__":
    run_plain_command(main)
