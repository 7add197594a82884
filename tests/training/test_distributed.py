"""Data-parallel training through torchrun (gloo, two CPU processes). See docs/scale_out.md."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import ROOT, TINY, compose_config

from translate.checkpoint import load_checkpoint
from translate.data.corpus import EncodedSplit
from translate.data.registry import MULTI30K_ORIGIN
from translate.errors import EXIT_PEER_FAILED, UserError
from translate.io import MARKS
from translate.train import train
from translate.training.distributed import Dist, from_env, shard
from translate.training.loop import TrainBatches

# Short decoding: validation, test scoring and latency are not what these tests are about.
FAST = [
    *TINY,
    "trainer.val_bleu_sentences=4",
    "trainer.latency_sentences=1",
    "decode.max_len_a=0",
    "decode.max_len_b=8",
]
# Dropout off: a single process cannot draw the random masks that two ranks draw.
EXACT = [
    *FAST,
    "model.dropout=0",
    "model.attention_dropout=0",
    "model.activation_dropout=0",
    "runtime.num_threads=1",
    "trainer.val_every_n_steps=3",
]
TRACE = re.compile(r"rank (\d+) update: loss (\S+) \| params (\S+) \| examples (.*)$")


def _env() -> dict[str, str]:
    drop = ("HYDRA_FULL_ERROR", "TRANSLATE_DEBUG", "RANK", "WORLD_SIZE", "LOCAL_RANK")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["OMP_NUM_THREADS"] = "1"
    return env


# ---------------------------------------------------------------- sharding


def test_shards_are_disjoint_covering_deterministic_and_equal():
    order = list(range(23))
    for n in (1, 2, 3, 4, 8):
        shares = [shard(order, r, n) for r in range(n)]
        assert len({len(s) for s in shares}) == 1  # every rank takes the same number of steps
        flat = [i for s in shares for i in s]
        assert len(flat) == len(set(flat))  # disjoint
        assert sorted(flat) == order[: len(order) - len(order) % n]  # all but the ragged tail
        assert shares == [shard(order, r, n) for r in range(n)]  # deterministic
    assert shard(order, 0, 1) == order


def _split(n: int = 300) -> EncodedSplit:
    rng = np.random.default_rng(0)
    src = [rng.integers(4, 60, rng.integers(1, 30)).astype(np.int32) for _ in range(n)]
    tgt = [rng.integers(4, 60, rng.integers(1, 30)).astype(np.int32) for _ in range(n)]
    return EncodedSplit("train", [""] * n, [""] * n, src, tgt)


def test_two_ranks_split_each_update_of_one_process_and_resume_in_global_counts():
    split = _split()
    single = list(TrainBatches(split, 128, seed=3).epoch(1, 0, 2))
    ranks = [TrainBatches(split, 128, seed=3, rank=r, world_size=2) for r in (0, 1)]
    shares = [list(tb.epoch(1, 0, 1)) for tb in ranks]
    assert len(shares[0]) == len(shares[1]) >= len(single) - 1 > 5
    for k, (a, b) in enumerate(zip(*shares)):
        # update k of two ranks = update k of one process accumulating two micro-batches
        assert [a[0].indices, b[0].indices] == [m.indices for m in single[k]]
        assert not set(a[0].indices) & set(b[0].indices)
    # A resumed rank skips the micro-batches that all ranks consumed (the saved, global count).
    skip = 3 * ranks[1].consumed(shares[1][0])
    assert skip == 6
    resumed = [g[0].indices for g in ranks[1].epoch(1, skip, 1)]
    assert resumed == [g[0].indices for g in shares[1][3:]]
    # Another epoch, another order; the same epoch, the same order.
    assert [g[0].indices for g in ranks[0].epoch(2, 0, 1)] != [g[0].indices for g in shares[0]]
    assert [g[0].indices for g in ranks[0].epoch(1, 0, 1)] == [g[0].indices for g in shares[0]]


def test_too_few_batches_for_the_ranks_is_a_user_error():
    with pytest.raises(UserError, match="fewer than the 8 processes"):
        TrainBatches(_split(5), 4096, seed=0, rank=0, world_size=8)


def test_torchrun_environment_is_detected():
    assert from_env({}) == Dist() and not Dist().enabled and Dist().is_main
    d = from_env({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "x"})
    assert d == Dist(rank=1, local_rank=1, world_size=2) and d.enabled and not d.is_main
    with pytest.raises(UserError, match="outside WORLD_SIZE"):
        from_env({"RANK": "2", "WORLD_SIZE": "2"})


def test_a_late_rank_moves_its_log_into_rank_0s_run_dir(tmp_path, monkeypatch):
    """Hydra names the run dir after the second each rank started: a rank that started later
    follows rank 0, and the dir Hydra made for it (config copies and its log) disappears."""
    from translate.training import distributed

    main_dir, own = tmp_path / "18-00-00", tmp_path / "18-00-01"
    (own / ".hydra").mkdir(parents=True)
    main_dir.mkdir()
    (own / ".hydra" / "config.yaml").write_text("x: 1\n")
    monkeypatch.setattr(distributed, "broadcast", lambda obj: str(main_dir))
    root = logging.getLogger()
    handler = logging.FileHandler(own / "train.log")
    root.addHandler(handler)
    try:
        assert distributed.adopt_run_dir(Dist(1, 1, 2), own) == main_dir
        files = [h.baseFilename for h in root.handlers if isinstance(h, logging.FileHandler)]
        assert handler not in root.handlers
        assert [f for f in files if f.startswith(str(tmp_path))] == [str(main_dir / "train.log")]
    finally:
        for h in root.handlers[:]:
            if isinstance(h, logging.FileHandler) and "18-00-0" in h.baseFilename:
                root.removeHandler(h)
                h.close()
    assert not own.exists()
    # A dir holding anything else is left alone; rank 0 keeps its own.
    (own / "notes.txt").parent.mkdir()
    (own / "notes.txt").write_text("mine")
    assert distributed.adopt_run_dir(Dist(1, 1, 2), own) == main_dir and own.exists()
    assert distributed.adopt_run_dir(Dist(0, 0, 2), main_dir) == main_dir


MAIN_LAST = """
import sys, time
import torch.distributed as tdist
from translate.training import distributed
rank, store, log = int(sys.argv[1]), sys.argv[2], sys.argv[3]
tdist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2)
with distributed.main_last(distributed.Dist(rank, rank, 2)):
    if rank == 0:
        time.sleep(1)  # scoring the test split
        with open(log, "a") as f:
            print("rank 0 scored", file=f)
with open(log, "a") as f:
    print("rank", rank, "leaves", file=f)
tdist.destroy_process_group()
"""


@pytest.mark.slow
def test_the_other_ranks_leave_only_after_rank_0_has_scored(tmp_path):
    """main_last: a rank that left the process group while rank 0 was still working aborted
    now and then (SIGABRT), and torchrun then stopped rank 0 in the middle of scoring."""
    store, log = str(tmp_path / "store"), tmp_path / "order.txt"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", MAIN_LAST, str(rank), store, str(log)],
            cwd=ROOT,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (1, 0)  # rank 1 first: it would leave first if nothing held it
    ]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    lines = log.read_text().splitlines()
    assert lines[0] == "rank 0 scored" and sorted(lines[1:]) == ["rank 0 leaves", "rank 1 leaves"]


# ---------------------------------------------------------------- torchrun end to end


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _updates(lines) -> dict[int, list[tuple[float, str, list[list[int]]]]]:
    """rank -> [(loss, params checksum, examples per micro-batch)] in update order."""
    out: dict[int, list] = {}
    for line in lines:
        m = TRACE.search(line)
        if m:
            rank, loss, params, examples = m.groups()
            out.setdefault(int(rank), []).append((float(loss), params, json.loads(examples)))
    return out


def _torchrun(run_dir: Path, cache_dir: Path, *overrides: str) -> None:
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        "-m", "translate.train", *EXACT, f"data.cache_dir={cache_dir}",
        f"hydra.run.dir={run_dir}", "hydra.verbose=translate.training.step", *overrides,
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=_env()
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


@pytest.fixture(scope="module")
def ddp_vs_single(tmp_path_factory, cache_dir):
    """One process accumulating 2 micro-batches for 6 updates; two torchrun ranks with 1 each
    for 3 updates, then resumed to 6. Returns both run dirs, the traces, and the first DDP
    run's files."""
    root = tmp_path_factory.mktemp("ddp")
    logger = logging.getLogger("translate.training.step")
    handler, level, threads = _Lines(), logger.level, torch.get_num_threads()
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:  # in-process; also warms the tokenizer cache the ranks then share
        single = train(
            compose_config(
                "train",
                [
                    *EXACT,
                    f"data.cache_dir={cache_dir}",
                    f"run_dir={root / 'single'}",
                    "trainer.accumulate_grad_batches=2",
                    "trainer.max_steps=6",
                ],
            )
        )
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        torch.set_num_threads(threads)  # runtime.num_threads=1 is global
    ddp = root / "ddp"
    _torchrun(ddp, cache_dir, "trainer.max_steps=3")
    first_files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    _torchrun(ddp, cache_dir, "trainer.max_steps=6", "trainer.resume=true")
    log_lines = (ddp / "train.log").read_text().splitlines()
    return {
        "root": root,
        "single": (root / "single", single, _updates(handler.lines)[0]),
        "ddp": (ddp, json.loads((ddp / "results.json").read_text()), _updates(log_lines)),
        "first_files": first_files,
    }


@pytest.mark.slow
def test_ranks_see_different_batches_and_keep_identical_weights(ddp_vs_single):
    _, _, ranks = ddp_vs_single["ddp"]
    assert sorted(ranks) == [0, 1] and len(ranks[0]) == len(ranks[1]) == 6
    for (loss0, params0, ex0), (loss1, params1, ex1) in zip(ranks[0], ranks[1]):
        assert not set(sum(ex0, [])) & set(sum(ex1, []))  # different examples
        assert params0 == params1  # same weights after every update, to the last bit
        assert loss0 == loss1  # both report the loss of the whole (global) batch


@pytest.mark.slow
def test_two_ranks_train_exactly_like_one_process_with_the_same_global_batch(ddp_vs_single):
    single_dir, single, single_updates = ddp_vs_single["single"]
    ddp_dir, results, ranks = ddp_vs_single["ddp"]
    assert len(single_updates) == 6
    for k, (loss, _, examples) in enumerate(single_updates):
        assert examples == ranks[0][k][2] + ranks[1][k][2]  # the same global batch
        assert ranks[0][k][0] == pytest.approx(loss, rel=1e-5)
    a = load_checkpoint(single_dir / "checkpoints" / "last.pt")
    b = load_checkpoint(ddp_dir / "checkpoints" / "last.pt")
    assert b["model"].keys() == a["model"].keys()  # no DDP "module." prefix
    for name, tensor in a["model"].items():
        torch.testing.assert_close(b["model"][name], tensor, rtol=1e-4, atol=1e-6, msg=name)
    # Counters in global terms: the resumed run went on where the first stopped.
    for key in ("step", "epoch", "batches_in_epoch", "tokens"):
        assert b["progress"][key] == a["progress"][key], key
    assert len(b["rng_ranks"]) == 2
    assert results["steps"] == single["steps"] == 6
    # tokens/s counts both ranks' tokens: the same tokens as the single process trained on
    tokens = results["tokens_per_s"] * results["train_minutes"] * 60
    assert tokens == pytest.approx(a["progress"]["tokens"], rel=1e-6)


@pytest.mark.slow
def test_only_rank_0_writes_the_run_files(ddp_vs_single):
    files = ddp_vs_single["first_files"]
    ddp = [f for f in files if f.startswith("ddp/")]
    assert sum(f.endswith("results.json") for f in files) == 2  # the single run's and rank 0's
    assert "ddp/results.json" in ddp and "ddp/test.hyp.txt" in ddp
    assert sum("tfevents" in f for f in ddp) == 1
    # one checkpoint set: step_3 (final validation), last and best
    ckpts = sorted(f for f in ddp if f.startswith("ddp/checkpoints/") and MARKS not in f)
    assert ckpts == [
        "ddp/checkpoints/best.pt",
        "ddp/checkpoints/last.pt",
        "ddp/checkpoints/step_00000003.pt",
    ]
    log = (ddp_vs_single["root"] / "ddp" / "train.log").read_text()
    assert log.count("test BLEU") == 2  # one per torchrun (rank 0), not one per rank
    assert "DistributedDataParallel: 2 processes, backend gloo" in log


# ---------------------------------------------------------------- one rank fails

# torchrun with one rank whose node lacks the data (FAILING_RANK): its load_corpus refuses.
ONE_RANK_FAILS = """
import os, runpy
from translate.errors import EXIT_PEER_FAILED, UserError
from translate.training import run
if os.environ["RANK"] == os.environ["FAILING_RANK"]:
    def missing(settings):
        raise UserError("data folder /mnt/node-b/multi30k does not exist")
    run.load_corpus = missing
runpy.run_module("translate.train", run_name="__main__", alter_sys=True)
"""
# torchrun's own report of a failed job: its traceback, whatever the ranks did.
TORCHRUN_REPORT = re.compile(
    r"Traceback \(most recent call last\):\n(?:  .*\n)*"
    r"torch\.distributed\.elastic\.multiprocessing\.errors\.ChildFailedError:"
)


def _torchrun_failing(entry: list[str], tmp_path: Path, cache_dir: Path, *overrides: str, env=()):
    """The combined output of a torchrun job that fails, and the root cause torchrun names:
    (rank, exit code, message)."""
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        *entry, *FAST, f"data.cache_dir={cache_dir}", f"hydra.run.dir={tmp_path / 'run'}",
        *overrides,
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        timeout=300, env={**_env(), **dict(env)},
    )  # fmt: skip
    assert proc.returncode != 0, proc.stdout[-4000:]
    root = re.search(
        r"Root Cause.*?rank\s*: (\d+).*?exitcode\s*: (\S+).*?traceback : (.*)", proc.stdout, re.S
    )
    assert root, proc.stdout[-4000:]
    return proc.stdout, (int(root[1]), root[2], root[3].splitlines()[0])


def _one_line(out: str, message: str) -> None:
    """The job said ``message`` on one ``error:`` line, and no rank printed a traceback."""
    assert [line for line in out.splitlines() if line.startswith("error:")] == [message], out
    assert "Traceback" not in TORCHRUN_REPORT.sub("", out), out


@pytest.mark.slow
@pytest.mark.parametrize("failing", [0, 1])
def test_the_rank_that_fails_is_the_one_named_and_the_others_leave_quietly(
    failing, tmp_path, cache_dir
):
    """Before: the rank waiting for the failed one died in its gloo collective ("Connection
    closed by peer") with a traceback, and torchrun's summary could name it as the root cause.
    Rank 0 fails at a real missing data folder, while rank 1 waits for the data caches; rank 1
    fails after them, while rank 0 waits in DDP's first broadcast."""
    if failing == 0:
        folder = tmp_path / "missing"
        entry, overrides, env = (
            ["-m", "translate.train"],
            ["data=multi30k", f"data.dir={folder}"],
            {},
        )
        files = "train.de, train.en, val.de, val.en, test_2016_flickr.de, test_2016_flickr.en"
        held = f"it must hold {files} (each may be .gz){MULTI30K_ORIGIN}"
        message = f"error: data folder {folder} does not exist; {held}"
    else:
        script = tmp_path / "one_rank_fails.py"
        script.write_text(ONE_RANK_FAILS)
        entry, overrides, env = [str(script)], [], {"FAILING_RANK": "1"}
        message = "error: data folder /mnt/node-b/multi30k does not exist"
    out, root = _torchrun_failing(entry, tmp_path, cache_dir, *overrides, env=env)
    _one_line(out, message)
    assert root == (failing, "2", message)
    # The other rank stopped with EXIT_PEER_FAILED, or was stopped by torchrun's SIGTERM first.
    other = re.search(rf"rank\s*: {1 - failing} .*?exitcode\s*: (\S+)", out, re.S)
    assert other and other[1] in (str(EXIT_PEER_FAILED), "-15"), out


@pytest.mark.slow
def test_a_resume_every_rank_refuses_is_said_once(tmp_path, cache_dir):
    run = tmp_path / "run"
    run.mkdir()
    out, root = _torchrun_failing(
        ["-m", "translate.train"], tmp_path, cache_dir, "trainer.resume=true"
    )
    message = (
        f"error: trainer.resume=true but {run}/checkpoints/last.pt does not exist: {run} holds no "
        "run to resume; pass the interrupted run's dir with hydra.run.dir=<run_dir>, or leave out "
        "trainer.resume=true to start a new run there"
    )
    _one_line(out, message)
    assert root[1:] == ("2", message)


def test_torchrun_means_ddp_even_for_one_process():
    """A single-GPU torchrun job trains with DDP (and so on nccl), as README promises."""
    one = from_env({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"})
    assert one.enabled and one.is_main and one.world_size == 1
    assert not from_env({}).enabled
