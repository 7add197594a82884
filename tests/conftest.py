"""Shared fixtures: Hydra configs composed from conf/ and shrunk to run in seconds on a CPU."""

from __future__ import annotations

import fcntl
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

# Registers the resolvers and decode/from_run before a test composes a config, as every
# command does on import.
import translate.settings  # noqa: F401
from translate.io import MARKS
from translate.training.rundir import LOCK_NAME

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"

# The Ctrl-C tests need their commands to start as a terminal's foreground job does. A shell
# that runs the suite in the background (`pytest &`, a CI script under nohup) starts it with
# SIGINT ignored, every child inherits that, and our commands rightly keep it ignored
# (translate/errors.py): the interrupted commands then slept on until the test timed out.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

TINY = [
    "experiment=quickstart",
    "heads=2",
    "model.d_model=32",
    "model.d_ff=64",
    "trainer.progress_bar=false",
    "trainer.max_minutes=null",
    "trainer.log_every_n_steps=2",
    "trainer.latency_sentences=3",
    "trainer.val_bleu_sentences=20",
    "data.tokenizer.vocab_size=300",
    # Drawing every head's heatmaps took most of a 4-update run (7.5 of 10.4 s profiled, two
    # validations); the shared trained run (below) draws them, and the figures' tests their own.
    "trainer.attention_heatmaps=false",
]

# What the shared trained run decodes with; evaluate/translate tests that compare against its
# results pass the same limits.
SHORT_DECODE = ["decode.max_len_a=0", "decode.max_len_b=4"]


# A 4-update run that validates and checkpoints twice: the run-dir and resume tests' unit.
SHORT = ["trainer.max_steps=4", "trainer.val_every_n_steps=2", "trainer.latency_sentences=2"]


def short_config(run: Path, cache_dir: Path, *overrides: str):
    """The TINY config of a :data:`SHORT` run writing into ``run``."""
    base = [*TINY, *SHORT, f"run_dir={run}", f"data.cache_dir={cache_dir}"]
    return compose_config("train", [*base, *overrides])


def listing(folder: Path) -> list[str]:
    """The names in ``folder``, sorted, but the marks of the one door for writes
    (translate.io.MARKS): what a user's ``ls`` shows."""
    return sorted(p.name for p in Path(folder).iterdir() if p.name != MARKS)


def snapshot(run: Path) -> dict[str, bytes]:
    """Every file of a run dir, byte for byte (but a lock another process holds)."""
    files = (p for p in sorted(run.rglob("*")) if p.is_file() and p.name != LOCK_NAME)
    return {str(p.relative_to(run)): p.read_bytes() for p in files}


def run_cli(
    module: str, *args: str, stdin: str | bytes | None = None, timeout: int = 120, cwd: Path = ROOT
):
    """``python -m module args`` as a user runs it; stdin as given (text is sent as UTF-8),
    stdout and stderr decoded without any newline translation. From another ``cwd`` it
    imports this checkout's package still."""
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "TRANSLATE_DEBUG")}
    if cwd != ROOT:
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    data = stdin.encode("utf-8") if isinstance(stdin, str) else stdin
    command = [sys.executable, "-m", module, *args]
    proc = subprocess.run(
        command, cwd=cwd, input=data, capture_output=True, timeout=timeout, env=env
    )
    proc.stdout = proc.stdout.decode("utf-8", errors="replace")
    proc.stderr = proc.stderr.decode("utf-8", errors="replace")
    return proc


def file_size_limit(limit: int):
    """``preexec_fn`` for a child whose files cannot grow past ``limit`` bytes (RLIMIT_FSIZE):
    its writes past that fail with EFBIG, a real refused write as a full quota gives (the
    SIGXFSZ the kernel sends first is ignored, as a process that handles it sees)."""

    def setup() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return setup


def assert_plain_help(proc) -> str:
    """A ``--help`` as every one must be: exit 0, some text (a module without a main prints
    nothing), and no reST markup (``x``, :mod:`x`). Returns the text."""
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip(), "no help printed"
    assert "``" not in proc.stdout and not re.search(r":\w+:`", proc.stdout), proc.stdout
    return proc.stdout


def assert_one_line_error(proc, *fragments: str) -> None:
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    for fragment in fragments:
        assert fragment in errors[0]


def compose_config(config_name: str, overrides: list[str]):
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        return compose(config_name, overrides=overrides)


def data_config(name: str):
    """``conf/data/<name>.yaml`` as Hydra composes it (over ``conf/data/base.yaml``), a node of
    its own that tests may change (``merge_with_dotlist``)."""
    node = compose_config("train", ["~experiment", f"data={name}"]).data
    return OmegaConf.create(OmegaConf.to_container(node))


def pytest_configure(config) -> None:
    """Under pytest-xdist each worker is one of the suite's parallel processes: one torch thread
    each (and in the commands it starts), so the workers do not oversubscribe the cores."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)


def built_once(tmp_path_factory, name: str, build: Callable[[Path], object]) -> Path:
    """A folder that ``build(folder)`` fills once for the whole test run, for tests that only
    read it. Under pytest-xdist, whose workers are processes of their own that each set up
    every session and module fixture they use, once for all of them: the first worker to ask
    builds it beside the workers' own temporary folders, the others wait for it (an flock)
    and read it."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        folder = tmp_path_factory.mktemp(name)
        build(folder)
        return folder
    root = tmp_path_factory.getbasetemp().parent  # this run's, shared by its workers
    folder, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # what a failed build left
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One tokenizer/encoding cache for the whole session, as a heads sweep shares one (and
    for all the xdist workers, as the jobs of a sweep started together share one)."""
    return built_once(tmp_path_factory, "cache", lambda folder: None)


@pytest.fixture
def tiny_train_cfg(tmp_path, cache_dir):
    """``make(*overrides)`` -> the quickstart config shrunk to seconds, writing under tmp_path."""

    def make(*overrides: str, run_dir: Path | None = None):
        run = run_dir or tmp_path / "run"
        base = [*TINY, f"run_dir={run}", f"data.cache_dir={cache_dir}"]
        return compose_config("train", [*base, *overrides])

    return make


@pytest.fixture(scope="session")
def short_run(tmp_path_factory, cache_dir) -> Path:
    """A finished :data:`SHORT` run (checkpoints at steps 2 and 4), trained once for the test
    run (:func:`built_once`): the template the run-dir and resume tests copy."""
    from translate.train import train

    def build(folder: Path) -> None:
        train(short_config(folder / "run", cache_dir))

    return built_once(tmp_path_factory, "short-run", build) / "run"


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory, cache_dir):
    """``(run_dir, results)`` of one tiny training run, shared by every test that only reads
    its outputs (results, checkpoints, evaluate, translate, analyze).

    8 updates with a validation every 4; an untrained model decodes to the length limit, so
    4 output tokens (``decode.max_len_*``) keep every decode of this checkpoint short.
    """
    from translate.train import train

    def build(run: Path) -> None:
        overrides = [
            *TINY,
            f"run_dir={run}",
            f"data.cache_dir={cache_dir}",
            "trainer.max_steps=8",
            "trainer.val_every_n_steps=4",
            "trainer.attention_heatmaps=true",
            *SHORT_DECODE,
        ]
        train(compose_config("train", overrides))

    run = built_once(tmp_path_factory, "trained", build)
    return run, json.loads((run / "results.json").read_text())  # what train() returned
