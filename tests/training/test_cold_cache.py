"""The IWSLT2017 recipe from a cold cache with more than one process, on a small corpus in the
release layout (tests/iwslt_fixture.py): torchrun's ranks and a sweep's jobs started together
build the tokenizer and the encodings once, and a rank waiting for rank 0's build outlasts the
process group's timeout. See docs/scale_out.md."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, TINY, listing
from iwslt_fixture import write_release

# The recipe's data with a small vocabulary; a short run whose end (validation, test) is quick.
RECIPE = [
    "experiment=iwslt2017",
    *[o for o in TINY if not o.startswith(("experiment=", "heads="))],
    "data.tokenizer.vocab_size=600",
    "trainer.max_steps=2",
    "trainer.val_every_n_steps=2",
    "trainer.val_bleu_sentences=4",
    "trainer.latency_sentences=1",
    "runtime.num_threads=1",
    "runtime.device=cpu",
    "decode.max_len_a=0",
    "decode.max_len_b=4",
]
BUILT = re.compile(r"tokenizer: training SentencePiece")
ENCODED = re.compile(r"tokenizer: encoding [\d,]+ sentence pairs")


def _env() -> dict[str, str]:
    drop = ("HYDRA_FULL_ERROR", "TRANSLATE_DEBUG", "RANK", "WORLD_SIZE", "LOCAL_RANK")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    # Enough batches of 8,192 tokens for two ranks, and a test split the size of a talk.
    return write_release(tmp_path_factory.mktemp("iwslt") / "corpus", pairs=2500, test_pairs=60)


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _cache_files(cache: Path) -> list[str]:
    return sorted(Path(name).suffix for name in listing(cache))


WAIT = """
import datetime, sys, time
import torch.distributed as tdist
from translate.training import distributed
rank, store = int(sys.argv[1]), sys.argv[2]
tdist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2,
                         timeout=datetime.timedelta(seconds=2))
with distributed.main_first(distributed.Dist(rank, rank, 2)):
    if rank == 0:
        time.sleep(6)  # a build three times the process group's timeout
tdist.barrier()
print("rank", rank, "through")
tdist.destroy_process_group()
"""


@pytest.mark.slow
def test_a_rank_outwaits_a_build_longer_than_the_process_group_timeout(tmp_path):
    store = str(tmp_path / "store")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WAIT, str(rank), store],
            cwd=ROOT,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        for rank in (0, 1)
    ]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    for rank, (proc, out) in enumerate(zip(procs, outputs)):
        assert proc.returncode == 0 and f"rank {rank} through" in out, out[-2000:]


@pytest.mark.slow
def test_two_ranks_from_a_cold_cache_build_it_once(corpus, tmp_path):
    cache = tmp_path / "cache"
    verbose = "hydra.verbose=[translate.data.tokenizer,translate.training.distributed]"
    proc = _run(
        [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
            "-m", "translate.train", *RECIPE, f"data.path={corpus}", f"data.cache_dir={cache}",
            f"hydra.run.dir={tmp_path / 'run'}", verbose,
        ]
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert len(BUILT.findall(out)) == 1  # both ranks log (hydra.verbose): one trained it
    assert len(ENCODED.findall(out)) == 3  # train, validation and test, each once
    assert re.search(r"rank 1 waited [\d.]+ s for rank 0 to build the data caches", out)
    assert _cache_files(cache) == [".model", ".npz", ".npz", ".npz"]
    assert (tmp_path / "run" / "results.json").is_file()


@pytest.mark.slow
def test_a_two_job_sweep_from_a_cold_cache_builds_it_once(corpus, tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    cache, sweep = tmp_path / "cache", tmp_path / "sweep"
    _run(
        [
            sys.executable, "-m", "translate.train", "-m", "hydra/launcher=local", *RECIPE,
            f"data.path={corpus}", f"data.cache_dir={cache}", f"hydra.sweep.dir={sweep}",
            "hydra.sweep.subdir=job${hydra.job.num}", "heads=1,2",
        ]
    )  # fmt: skip
    logs = [log.read_text() for log in sorted(sweep.glob("job*/train.log"))]
    assert len(logs) == 2 and all("test BLEU" in log for log in logs)
    assert sum(len(BUILT.findall(log)) for log in logs) == 1
    assert sum(len(ENCODED.findall(log)) for log in logs) == 3
    assert _cache_files(cache) == [".model", ".npz", ".npz", ".npz"]
