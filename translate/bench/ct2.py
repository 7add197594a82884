"""``python -m translate.bench.decode --checkpoint CKPT --ct2``: our engine against CTranslate2
on one checkpoint.

The checkpoint is exported for CTranslate2 (float32 and int8, by
:func:`translate.decoding.ct2_export.export_checkpoint`, into a temporary folder) and loaded by
:func:`translate.decoding.ct2.load_exported`; ours is loaded by
:func:`translate.decoding.translator.load_translator`. Every engine decodes through its
:class:`~translate.decoding.translator.Translator`, so batching (``data.eval_max_tokens``),
truncation and the decode settings are the same: the checkpoint's length penalty, beam
``--beam-size`` and the script's length limits. Timed: greedy and beam search of each engine at
each ``--ct2-threads`` (torch's threads and CTranslate2's ``intra_threads`` equal), at batch
size 1 on the first ``--latency-sentences`` sources (ms per sentence) and at the evaluation
batch on all of them (the whole set's seconds, sentences/s). Each engine at each thread count
runs in a process of its own, once per round, the processes of a round in rotated order
(:func:`time_engines`); a row is the median of ``--rounds``. On the CPU only.

Outputs: CTranslate2's greedy search takes the same argmax as ours, so its hypotheses should be
ours token for token (float32; int8 changes the weights); its beam search stops by another rule
above length penalty 0 (:mod:`translate.decoding.ct2`), so some hypotheses differ and the count
of identical ones is reported.

Imported by :mod:`translate.bench.decode`; ``python -m translate.bench.ct2 JOB OUT`` is one
timing process.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from translate.bench import common
from translate.decoding.ct2 import import_ctranslate2, load_exported, output_limit
from translate.decoding.ct2_export import export_checkpoint
from translate.decoding.translator import load_translator
from translate.errors import UserError
from translate.runtime.memory import keep_freed_memory
from translate.runtime.timing import rotated, timed
from translate.schema import DecodeSettings

EXPORTS = ("float32", "int8")  # CTranslate2 quantizations compared with ours
ENGINES = ("ours", *(f"ct2 {q}" for q in EXPORTS))
COLUMNS = [
    ("threads", "threads", ""),
    ("batch", "batch", ""),
    ("mode", "mode", ""),
    ("engine", "engine", ""),
    ("seconds", "s", ".3g"),
    *common.DECODE_COLUMNS,
    ("ours_vs_this", "ours/this", ".2f"),
    ("agree", "same as ours", ""),
]


def time_engines(spec: dict, exports: dict[str, Path], args) -> tuple[dict, dict]:
    """Seconds and hypotheses of every (threads, batch, mode, engine), each engine at each
    thread count timed in a process of its own (two thread pools in one process, ours and
    CTranslate2's, would take turns spinning on the same cores), the processes of a round in
    :func:`~translate.runtime.timing.rotated` order; the median over ``--rounds``."""
    jobs = [(t, e) for t in args.ct2_threads for e in ENGINES]
    times: dict[tuple, list[float]] = {}
    outputs: dict[tuple, list] = {}
    for r in range(args.rounds):
        for threads, engine in rotated(jobs, r):
            job = {**spec, "threads": threads, "engine": engine}
            job["model_dir"] = None if engine == "ours" else str(exports[engine[4:]])
            for (batch, mode), (seconds, hyps) in _run_worker(job).items():
                key = (threads, batch, mode, engine)
                times.setdefault(key, []).append(seconds)
                outputs[key] = hyps
    return times, outputs


def _run_worker(job: dict) -> dict[tuple, tuple[float, list]]:
    proc = subprocess.run(
        [sys.executable, "-m", "translate.bench.ct2"],
        input=json.dumps(job),
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise UserError(f"the {job['engine']} timing process failed: {proc.stderr.strip()[-500:]}")
    return {tuple(k.split("|")): tuple(v) for k, v in json.loads(proc.stdout).items()}


def worker(job: dict) -> dict[str, tuple[float, list]]:
    """In its own process: one engine at one thread count, each (batch, mode) decoded once
    after a short warm-up; ``"batch|mode" -> (seconds, hypotheses)``."""
    torch.set_num_threads(job["threads"])  # before CTranslate2 loads: its intra_threads
    if job["keep_freed_memory"]:  # as the parent process, and the commands, run
        keep_freed_memory()
    decode = DecodeSettings(**job["decode"])
    if job["engine"] == "ours":
        translator = load_translator(job["checkpoint"], "cpu", job["precision"]).translator
        translator.decode = decode
    else:
        translator = load_exported(Path(job["model_dir"]), "cpu", decode).translator
    ids = job["ids"]
    sources = {"1": ids[: job["latency_sentences"]], "eval": ids}
    out = {}
    for batch, mode in itertools.product(sources, ("greedy", job["beam"])):
        size = 1 if mode == "greedy" else decode.beam_size
        if batch == "1":

            def fn(src=sources[batch], size=size):
                return [translator.translate_ids([s], beam_size=size)[0] for s in src]
        else:

            def fn(src=sources[batch], size=size):
                return translator.translate_ids(src, beam_size=size)

        translator.translate_ids(sources[batch][:8], beam_size=size)  # warm-up
        hyps, seconds = timed(fn, torch.device("cpu"))
        out[f"{batch}|{mode}"] = (seconds, hyps)
    return out


def rows_from(times: dict, outputs: dict) -> list[dict]:
    """One row per (threads, batch, mode, engine), with its time against ours and how many of
    its hypotheses are ours."""
    rows = []
    for (t, batch, mode, engine), runs in times.items():
        hyps, ours = outputs[t, batch, mode, engine], outputs[t, batch, mode, "ours"]
        row = {"threads": t, "batch": batch, "mode": mode, "engine": engine}
        row.update(seconds=common.median(runs), **common.decode_row(mode, runs, hyps, len(hyps)))
        row["ours_vs_this"] = common.median(times[t, batch, mode, "ours"]) / row["seconds"]
        row["same_as_ours"] = sum(a == b for a, b in zip(hyps, ours))
        row["agree"] = f"{row['same_as_ours']}/{len(hyps)}"
        rows.append(row)
    return rows


def summary(rows: list[dict], args, n_sentences: int) -> dict:
    """Our time over CTranslate2's per export and thread count (> 1: CTranslate2 is faster),
    for the whole set at the evaluation batch and for batch-1 latency; and how many of its
    whole-set hypotheses are ours (the fewest over the thread counts)."""
    row = {(r["threads"], r["batch"], r["mode"], r["engine"]): r for r in rows}
    modes = {"beam": f"beam{args.beam_size}", "greedy": "greedy"}
    out = {}
    for quantization in EXPORTS:
        engine = f"ct2 {quantization}"
        for t in args.ct2_threads:
            at = f"ct2_{quantization}_threads{t}"
            for (batch, measure), (name, mode) in itertools.product(
                (("eval", "time"), ("1", "latency")), modes.items()
            ):
                out[f"{name}_{measure}_ours_vs_{at}"] = row[t, batch, mode, engine]["ours_vs_this"]
        for name, mode in modes.items():
            same = [row[t, "eval", mode, engine]["same_as_ours"] for t in args.ct2_threads]
            out[f"{name}_identical_ct2_{quantization}"] = min(same)
    out["ct2_compared_sentences"] = n_sentences
    return out


def title(args, d: DecodeSettings, max_tokens: int, n_latency: int, n_sentences: int) -> str:
    return (
        f"Ours (precision {args.precision}) against CTranslate2, {args.checkpoint}: batch 1 = the "
        f"first {n_latency} sentences one at a time (ms/sent), eval = all {n_sentences} at the "
        f"evaluation batch ({max_tokens} padded source tokens, as Translator batches; s = "
        f"the whole set); beam {d.beam_size}, length penalty {d.length_penalty}, at most "
        f"{d.max_len_a} x source + {d.max_len_b} tokens; each engine and thread count in a "
        f"process of its own, medians of {args.rounds} rounds; ours/this = our time over the row's"
    )


def section(args, sources: list[np.ndarray], device) -> dict:
    """Ours against the checkpoint's CTranslate2 exports, printed, and as the JSON's ``ct2``
    section with its ``summary`` entries; without ctranslate2, a section that says so."""
    try:
        ctranslate2 = import_ctranslate2()
    except UserError as err:
        print(f"\nCTranslate2 comparison skipped: {err}")
        return {"skipped": str(err), "summary": {}}
    if device.type != "cpu":
        raise UserError("--ct2 compares engines on the CPU; run it with --device cpu")
    ids = [s.tolist() for s in sources]
    loaded = load_translator(args.checkpoint, "cpu", args.precision)
    decode = dataclasses.replace(
        loaded.translator.decode, strategy="beam", beam_size=args.beam_size,
        max_len_a=args.max_len_a, max_len_b=args.max_len_b,
    )  # fmt: skip
    cap = loaded.data.eval_cap  # positions for the longest source and output the limits allow
    positions = None if cap is None else max(cap, output_limit(cap, decode))
    n_latency = min(args.latency_sentences, len(ids))
    spec = {
        "checkpoint": str(args.checkpoint), "precision": args.precision, "ids": ids,
        "decode": dataclasses.asdict(decode), "latency_sentences": n_latency,
        "beam": f"beam{args.beam_size}", "keep_freed_memory": not args.system_malloc,
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench_decode_ct2_") as folder:
        exports = {
            q: export_checkpoint(args.checkpoint, Path(folder) / q, q, positions) for q in EXPORTS
        }
        times, outputs = time_engines(spec, exports, args)
    rows = rows_from(times, outputs)
    max_tokens = loaded.translator.max_tokens
    print()
    common.print_table(rows, COLUMNS, title=title(args, decode, max_tokens, n_latency, len(ids)))
    return {
        "ctranslate2": ctranslate2.__version__,
        "decode": dataclasses.asdict(decode),
        "max_tokens": max_tokens,
        "latency_sentences": n_latency,
        "threads": args.ct2_threads,
        "rows": rows,
        "summary": summary(rows, args, len(ids)),
    }


if __name__ == "__main__":  # a timing process of time_engines: the job in, the times out
    print(json.dumps(worker(json.load(sys.stdin))))
