"""The IWSLT2017 recipe from a cold cache with more than one process, on a small corpus in the
release layout (tests/iwslt_fixture.py): a sweep's jobs started together build the tokenizer
and the encodings once. See docs/scale_out.md."""

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
    drop = ("HYDRA_FULL_ERROR", "TRANSLATE_DEBUG")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    # Several batches of 8,192 tokens, and a test split the size of a talk.
    return write_release(tmp_path_factory.mktemp("iwslt") / "corpus", pairs=2500, test_pairs=60)


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _cache_files(cache: Path) -> list[str]:
    return sorted(Path(name).suffix for name in listing(cache))


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
