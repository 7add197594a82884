"""Decoding timed in a process of its own (the jobs as JSON on stdin, the times on stdout), one
engine at one thread count: two engines in one process would spin their thread pools on the
same cores. ``bench.decode --ct2`` and ``ablation speed`` time CTranslate2 through it.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import torch

from translate.decoding.ct2 import load_exported
from translate.decoding.translator import load_translator
from translate.errors import UserError
from translate.runtime.memory import keep_freed_memory, keeps_freed_memory
from translate.runtime.timing import timed
from translate.schema import DecodeSettings

ONE_AT_A_TIME = "1"  # the inputs decoded one sentence per call (batch-1 latency)


def time_in_process(jobs: list[dict], threads: int) -> list[dict[tuple[str, str], tuple]]:
    """Per job, ``(inputs, mode) -> (seconds, hypotheses)`` of each ``job["inputs"]`` (name -> ids)
    in each ``job["modes"]`` (name -> beam size), in one new process at ``threads`` threads. A
    job: ``engine`` (``"ours"``: ``checkpoint``, ``precision``; else ``model_dir``), ``device``,
    ``decode`` (a dict)."""
    spec = {"keep_freed_memory": keeps_freed_memory(), "threads": threads, "jobs": jobs}
    proc = subprocess.run(
        [sys.executable, "-m", __name__], input=json.dumps(spec), capture_output=True, text=True
    )
    if proc.returncode != 0:
        engines = ", ".join(sorted({job["engine"] for job in jobs}))
        raise UserError(f"the {engines} timing process failed: {proc.stderr.strip()[-500:]}")
    return [{(name, mode): tuple(v) for name, mode, *v in job} for job in json.loads(proc.stdout)]


def decode_timed(translator, ids: list, beam_size: int, one_at_a_time: bool) -> tuple[list, float]:
    """``(hypotheses, seconds)`` of ``ids`` decoded one per call or at the evaluation batch."""
    calls = [[s] for s in ids] if one_at_a_time else [ids]
    return timed(
        lambda: [hyp for c in calls for hyp in translator.translate_ids(c, beam_size=beam_size)],
        translator.device,
    )


def _time(job: dict) -> list[tuple[str, str, float, list]]:
    decode = DecodeSettings(**job["decode"])
    if job["engine"] == "ours":
        translator = load_translator(job["checkpoint"], job["device"], job["precision"]).translator
        translator.decode = decode
    else:
        translator = load_exported(job["model_dir"], job["device"], decode).translator
    out = []
    for (name, ids), (mode, size) in itertools.product(job["inputs"].items(), job["modes"].items()):
        translator.translate_ids(ids[:8], beam_size=size)  # warm-up
        hyps, seconds = decode_timed(translator, ids, size, name == ONE_AT_A_TIME)
        out.append((name, mode, seconds, hyps))
    return out


if __name__ == "__main__":  # a timing process of time_in_process: the jobs in, the times out
    spec = json.load(sys.stdin)
    torch.set_num_threads(spec["threads"])  # before CTranslate2 loads: its intra_threads
    if spec["keep_freed_memory"]:
        keep_freed_memory()
    print(json.dumps([_time(job) for job in spec["jobs"]]))
