"""``python -m translate.bench.decode --checkpoint CKPT --ct2``: our engine against CTranslate2
on one checkpoint, exported (float32 and int8) into a temporary folder, on the CPU.

Each engine decodes through its ``Translator``, greedy and beam, at batch 1 and at the evaluation
batch. Greedy float32 hypotheses should be ours token for token; beam search stops by another
rule above length penalty 0 (:mod:`translate.decoding.ct2`): the identical ones are counted.
"""

from __future__ import annotations

import dataclasses
import itertools
import tempfile
from pathlib import Path

import numpy as np

from translate.bench import common
from translate.decoding.ct2 import import_ctranslate2, output_limit
from translate.decoding.ct2_export import export_checkpoint
from translate.decoding.timing_process import ONE_AT_A_TIME, time_in_process
from translate.decoding.translator import load_translator
from translate.errors import UserError
from translate.runtime.timing import rotated
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


def time_engines(spec: dict, exports: dict[str, str], args) -> tuple[dict, dict]:
    """Seconds (by round) and hypotheses of every (threads, batch, mode, engine); each engine at
    each thread count in a process of its own (no competing thread pools), rotated."""
    jobs = [(t, e) for t in args.ct2_threads for e in ENGINES]
    times, outputs = {}, {}
    for r in range(args.rounds):
        for threads, engine in rotated(jobs, r):
            job = {**spec, "engine": engine, "model_dir": exports.get(engine)}
            for (batch, mode), (seconds, hyps) in time_in_process([job], threads)[0].items():
                key = (threads, batch, mode, engine)
                times.setdefault(key, []).append(seconds)
                outputs[key] = hyps
    return times, outputs


def rows_from(times: dict, outputs: dict) -> list[dict]:
    """One row per (threads, batch, mode, engine), with its time and hypotheses against ours."""
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
    """Our time over CTranslate2's (> 1: it is faster); how many of its hypotheses are ours."""
    row = {(r["threads"], r["batch"], r["mode"], r["engine"]): r for r in rows}
    modes = {"beam": f"beam{args.beam_size}", "greedy": "greedy"}.items()
    threads, batches, out = args.ct2_threads, (("eval", "time"), ("1", "latency")), {}
    for q in EXPORTS:
        for t, (batch, measure), (name, mode) in itertools.product(threads, batches, modes):
            key = f"{name}_{measure}_ours_vs_ct2_{q}_threads{t}"
            out[key] = row[t, batch, mode, f"ct2 {q}"]["ours_vs_this"]
        for name, mode in modes:
            same = [row[t, "eval", mode, f"ct2 {q}"]["same_as_ours"] for t in threads]
            out[f"{name}_identical_ct2_{q}"] = min(same)
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
    """The JSON's ``ct2`` section with its ``summary``; without ctranslate2, one that says so."""
    try:
        ctranslate2 = import_ctranslate2()
    except UserError as err:
        print(f"\nCTranslate2 comparison skipped: {err}")
        return {"skipped": str(err), "summary": {}}
    if device.type != "cpu":
        raise UserError("--ct2 compares engines on the CPU; run it with --device cpu")
    ids = [s.tolist() for s in sources]
    loaded = load_translator(args.checkpoint, "cpu", args.precision)
    limits = {"max_len_a": args.max_len_a, "max_len_b": args.max_len_b}
    decode = dataclasses.replace(
        loaded.translator.decode, strategy="beam", beam_size=args.beam_size, **limits
    )
    cap = loaded.data.eval_cap  # positions for the longest source and output the limits allow
    positions = None if cap is None else max(cap, output_limit(cap, decode))
    n_latency = min(args.latency_sentences, len(ids))
    spec = {
        "checkpoint": str(args.checkpoint),
        "precision": args.precision,
        "device": "cpu",
        "decode": dataclasses.asdict(decode),
        "inputs": {ONE_AT_A_TIME: ids[:n_latency], "eval": ids},
        "modes": {"greedy": 1, f"beam{args.beam_size}": args.beam_size},
    }
    with tempfile.TemporaryDirectory(prefix="bench_decode_ct2_") as folder:
        exports = {
            f"ct2 {q}": str(export_checkpoint(args.checkpoint, Path(folder) / q, q, positions))
            for q in EXPORTS
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
