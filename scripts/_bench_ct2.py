"""``bench_decode.py --checkpoint CKPT --ct2``: our engine against CTranslate2 on one checkpoint.

The checkpoint is exported for CTranslate2 (float32 and int8, by
:func:`translate.decoding.ct2_export.export_checkpoint`, into a temporary folder) and loaded by
:func:`translate.decoding.ct2.load_exported`; ours is loaded by
:func:`translate.decoding.translator.load_translator`. Every engine decodes through its
:class:`~translate.decoding.translator.Translator`, so batching (``data.eval_max_tokens``),
truncation and the decode settings are the same: the checkpoint's length penalty, beam
``--beam-size`` and the script's length limits. Timed, all in one set of interleaved rounds
(:func:`_bench.interleaved`): greedy and beam search of each engine at each ``--ct2-threads``
(torch's threads and CTranslate2's ``intra_threads`` equal), at batch size 1 on the first
``--latency-sentences`` sources (ms per sentence) and at the evaluation batch on all of them
(the whole set's seconds, sentences/s).

Outputs: CTranslate2's greedy search takes the same argmax as ours, so its hypotheses should be
ours token for token (float32; int8 changes the weights); its beam search stops by another rule
above length penalty 0 (:mod:`translate.decoding.ct2`), so some hypotheses differ and the count
of identical ones is reported.

Imported by ``bench_decode.py`` as a sibling module, like ``_bench``.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import tempfile
from pathlib import Path

import _bench
import numpy as np
import torch

from translate.decoding.ct2 import import_ctranslate2, load_exported, output_limit
from translate.decoding.ct2_export import export_checkpoint
from translate.decoding.translator import Translator, load_translator
from translate.errors import UserError

EXPORTS = ("float32", "int8")  # CTranslate2 quantizations compared with ours
ENGINES = ("ours", *(f"ct2 {q}" for q in EXPORTS))
COLUMNS = [
    ("threads", "threads", ""),
    ("batch", "batch", ""),
    ("mode", "mode", ""),
    ("engine", "engine", ""),
    ("seconds", "s", ".3g"),
    *_bench.DECODE_COLUMNS,
    ("ours_vs_this", "ours/this", ".2f"),
    ("agree", "same as ours", ""),
]


def load_engines(args, device, folder: Path) -> dict[tuple[str, int], Translator]:
    """Translators by ``(engine, threads)``: ours, the checkpoint as ``translate.evaluate``
    loads it (torch's threads are set per call), and its CTranslate2 exports written into
    ``folder``, loaded once per thread count (``intra_threads`` is torch's at load time). All
    decode with the checkpoint's settings but ``--beam-size`` and the length limits."""
    ours = load_translator(args.checkpoint, str(device), args.precision)
    translator = ours.translator
    translator.decode = dataclasses.replace(
        translator.decode,
        strategy="beam",
        beam_size=args.beam_size,
        max_len_a=args.max_len_a,
        max_len_b=args.max_len_b,
    )
    cap = ours.data.eval_cap  # positions for the longest source and output these limits allow
    rows = None if cap is None else max(cap, output_limit(cap, translator.decode))
    engines = {("ours", t): translator for t in args.ct2_threads}
    for quantization in EXPORTS:
        exported = export_checkpoint(args.checkpoint, folder / quantization, quantization, rows)
        for t in args.ct2_threads:
            torch.set_num_threads(t)
            loaded = load_exported(exported, str(device), translator.decode)
            engines[f"ct2 {quantization}", t] = loaded.translator
    return engines


def time_engines(engines: dict, ids: list[list[int]], args, device) -> list[dict]:
    """Greedy and beam search of every engine at every ``--ct2-threads``, at batch size 1 on
    the first ``--latency-sentences`` sources and at the evaluation batch on all of them, all
    interleaved; one row each, with its time against ours and how many hypotheses are ours."""
    sources = {"1": ids[: args.latency_sentences], "eval": ids}
    beam = f"beam{args.beam_size}"
    outputs = {}

    def run(key: tuple, translator: Translator) -> None:
        threads, batch, mode = key[:3]
        torch.set_num_threads(threads)
        size = 1 if mode == "greedy" else args.beam_size
        if batch == "1":
            hyps = [translator.translate_ids([s], beam_size=size)[0] for s in sources[batch]]
        else:
            hyps = translator.translate_ids(sources[batch], beam_size=size)
        outputs[key] = hyps

    grid = itertools.product(args.ct2_threads, sources, ("greedy", beam), ENGINES)
    fns = {key: functools.partial(run, key, engines[key[3], key[0]]) for key in grid}
    times = _bench.interleaved(fns, device, args.warmup, args.rounds)
    rows = []
    for (t, batch, mode, engine), runs in times.items():
        hyps, ours = outputs[t, batch, mode, engine], outputs[t, batch, mode, "ours"]
        row = {"threads": t, "batch": batch, "mode": mode, "engine": engine}
        row.update(seconds=_bench.median(runs), **_bench.decode_row(mode, runs, hyps, len(hyps)))
        row["ours_vs_this"] = _bench.median(times[t, batch, mode, "ours"]) / row["seconds"]
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


def title(args, ours: Translator, n_latency: int, n_sentences: int) -> str:
    d = ours.decode
    return (
        f"Ours (precision {args.precision}) against CTranslate2, {args.checkpoint}: batch 1 = the "
        f"first {n_latency} sentences one at a time (ms/sent), eval = all {n_sentences} at the "
        f"evaluation batch ({ours.max_tokens} padded source tokens, as Translator batches; s = "
        f"the whole set); beam {d.beam_size}, length penalty {d.length_penalty}, at most "
        f"{d.max_len_a} x source + {d.max_len_b} tokens; medians of {args.rounds} interleaved "
        "rounds; ours/this = our time over the row's"
    )


def section(args, sources: list[np.ndarray], device) -> dict:
    """Ours against the checkpoint's CTranslate2 exports, printed, and as the JSON's ``ct2``
    section with its ``summary`` entries; without ctranslate2, a section that says so."""
    try:
        ctranslate2 = import_ctranslate2()
    except UserError as err:
        print(f"\nCTranslate2 comparison skipped: {err}")
        return {"skipped": str(err), "summary": {}}
    ids, threads = [s.tolist() for s in sources], torch.get_num_threads()
    try:
        with tempfile.TemporaryDirectory(prefix="bench_decode_ct2_") as folder:
            engines = load_engines(args, device, Path(folder))
            rows = time_engines(engines, ids, args, device)
    finally:
        torch.set_num_threads(threads)  # --threads again, as the report's machine section says
    ours, n_latency = engines["ours", args.ct2_threads[0]], min(args.latency_sentences, len(ids))
    print()
    _bench.print_table(rows, COLUMNS, title=title(args, ours, n_latency, len(ids)))
    return {
        "ctranslate2": ctranslate2.__version__,
        "decode": dataclasses.asdict(ours.decode),
        "max_tokens": ours.max_tokens,
        "latency_sentences": n_latency,
        "threads": args.ct2_threads,
        "rows": rows,
        "summary": summary(rows, args, len(ids)),
    }
