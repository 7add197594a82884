"""Decoding timed in a process of its own (``python -m translate.analysis.timing_process``: the
jobs as JSON on standard input, the times on standard output), one engine at one thread count:
two engines in one process would take turns spinning their thread pools on the same cores.
``bench.decode --ct2`` and ``ablation speed`` time CTranslate2 through :func:`time_in_process`.
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
    """Per job, ``(inputs, mode) -> (seconds, hypotheses)`` of each of ``job["inputs"]`` (name ->
    source ids; :data:`ONE_AT_A_TIME` one sentence per call, any other name the whole list at
    the evaluation batch) decoded in each of ``job["modes"]`` (name -> beam size, 1: greedy),
    once each after a short warm-up. The jobs run one after the other in one new process at
    ``threads`` threads (torch's, and CTranslate2's ``intra_threads``), with freed memory kept
    there as in this process. A job: ``engine`` (``"ours"``, with ``checkpoint`` and
    ``precision``; else a CTranslate2 export's ``model_dir``), ``device``, ``decode``
    (:class:`DecodeSettings` as a dict)."""
    spec = {"keep_freed_memory": keeps_freed_memory(), "threads": threads, "jobs": jobs}
    proc = subprocess.run(
        [sys.executable, "-m", __name__], input=json.dumps(spec), capture_output=True, text=True
    )
    if proc.returncode != 0:
        engines = ", ".join(sorted({job["engine"] for job in jobs}))
        raise UserError(f"the {engines} timing process failed: {proc.stderr.strip()[-500:]}")
    return [
        {tuple(k.split("|")): tuple(v) for k, v in times.items()}
        for times in json.loads(proc.stdout)
    ]


def _time(spec: dict) -> list[dict[str, tuple[float, list]]]:
    torch.set_num_threads(spec["threads"])  # before CTranslate2 loads: its intra_threads
    if spec["keep_freed_memory"]:
        keep_freed_memory()
    return [_time_one(job) for job in spec["jobs"]]


def _time_one(job: dict) -> dict[str, tuple[float, list]]:
    decode = DecodeSettings(**job["decode"])
    if job["engine"] == "ours":
        translator = load_translator(job["checkpoint"], job["device"], job["precision"]).translator
        translator.decode = decode
    else:
        translator = load_exported(job["model_dir"], job["device"], decode).translator
    out = {}
    for (name, ids), (mode, size) in itertools.product(job["inputs"].items(), job["modes"].items()):
        if name == ONE_AT_A_TIME:

            def fn(ids=ids, size=size):
                return [translator.translate_ids([s], beam_size=size)[0] for s in ids]
        else:

            def fn(ids=ids, size=size):
                return translator.translate_ids(ids, beam_size=size)

        translator.translate_ids(ids[:8], beam_size=size)  # warm-up
        hyps, seconds = timed(fn, translator.device)
        out[f"{name}|{mode}"] = (seconds, hyps)
    return out


if __name__ == "__main__":  # a timing process of time_in_process: the jobs in, the times out
    print(json.dumps(_time(json.load(sys.stdin))))
