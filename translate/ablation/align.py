"""Alignment heads of a heads sweep's models: ``python -m translate.ablation align <sweep_dir>``.

Each finished job's cross heads' AER against one reference for the sweep (docs/alignment.md)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from translate import io
from translate.ablation.results import (
    ALIGN_FILE,
    Job,
    at_least_one,
    existing_sweep_dir,
    job_fields,
)
from translate.ablation.speed import completed_jobs, sentence_pairs
from translate.analysis.alignment import pharaoh
from translate.analysis.alignment_heads import cross_links, head_aer, reference_alignments
from translate.analysis.heads import make_batches
from translate.decoding.translator import load_translator
from translate.errors import EXIT_USER_ERROR, UserError, debug_enabled, plain_text

MAX_TOKENS = 4096  # padded tokens per teacher-forced batch, as translate.analyze's default


def _job_entry(job: Job, path: Path, args, sources, refs, ref) -> dict:
    """One job's every cross head's AER and its best (the model's alignment head)."""
    loaded = load_translator(path, args.device, args.precision)
    tok, cap, tr = loaded.tokenizer, loaded.data.eval_cap, loaded.translator
    batches = make_batches(tok.encode(sources), tok.encode(refs), MAX_TOKENS, cap, cap)
    measured = head_aer(cross_links(loaded.model, batches, tok, tr.device, tr.precision), ref)
    return job_fields(job) | {
        "checkpoint": str(path),
        "best_aer": measured["best"]["aer"],
        "best": measured["best"],
        "best_per_layer": measured["best_per_layer"],
        "heads_aer": measured["heads"],
    }


def run_align(sweep_dir: str | Path, args) -> tuple[dict, Path]:
    """Reference alignments once, every finished job's head AERs, the file written."""
    sweep_dir, not_measured, start = existing_sweep_dir(sweep_dir), [], time.time()
    path = Path(args.json) if args.json else sweep_dir / ALIGN_FILE
    output = io.check_output_file(path, "--json", "ablation alignment")  # before any work
    found = completed_jobs(sweep_dir, not_measured)
    first = load_translator(found[0][1], "cpu", "32").data  # the sweep's data: one reference
    split, pairs = sentence_pairs(first, args.split)
    sources, refs = map(list, zip(*pairs[: args.sentences]))
    ref = reference_alignments(args.alignments, args.silver_train_pairs, first, sources, refs)
    if ref is None:
        raise UserError("no reference alignments to measure against (the line above says why)")
    jobs = []
    for n, (job, ckpt) in enumerate(found, 1):
        print(f"[{n}/{len(found)}] {job.name}", file=sys.stderr, flush=True)
        jobs.append(_job_entry(job, ckpt, args, sources, refs, ref))
    payload = {
        "sweep_dir": str(sweep_dir.resolve()),  # the report uses only its own sweep's file
        "device": args.device,
        "precision": args.precision,
        "reference": {"kind": ref.kind, "origin": ref.origin, "split": split},
        "sentences": len(sources),
        "seconds": time.time() - start,
        "not_measured": not_measured,
        "jobs": jobs,
        "reference_links": [pharaoh(links) for links in ref.sure],  # silver: to look at
    }
    output.write(json.dumps(payload, indent=2) + "\n")
    return payload, path


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=plain_text(__doc__.splitlines()[0]))
    parser.add_argument("sweep_dir", help="a multirun dir, e.g. outputs/multirun/<date_time>")
    parser.add_argument("--split", default="test", choices=("test", "valid"), help="default test")
    parser.add_argument(
        "--sentences", type=int, default=500, help="the split's first N pairs (default 500)"
    )
    parser.add_argument(
        "--alignments",
        help="gold alignments: one Pharaoh line (0-based i-j sure, i?j possible) per pair of "
        "the split's prefix; default: silver ones from eflomal",
    )
    parser.add_argument(
        "--silver-train-pairs",
        type=int,
        default=100_000,
        help="training pairs eflomal learns from (default %(default)s)",
    )
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    parser.add_argument("--precision", default="auto", help="auto, 32, bf16 or fp16")
    parser.add_argument("--json", help=f"output (default SWEEP_DIR/{ALIGN_FILE})")
    args = parser.parse_args(argv)
    try:
        at_least_one([("--sentences", args.sentences)])
        payload, path = run_align(args.sweep_dir, args)
    except UserError as err:
        if debug_enabled():
            raise
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    kind = payload["reference"]["kind"]
    for job in payload["jobs"]:
        b = job["best"]
        print(f"{job['name']}: best head layer {b['layer']} head {b['head']}, AER {b['aer']:.3f}")
    for job in payload["not_measured"]:
        print(f"not measured: {job['name']}: {job['reason']}")
    print(f"AER against {kind} alignments of {payload['sentences']} sentences; wrote {path}")
    return 0
