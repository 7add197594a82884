"""Ctrl-C anywhere in a command: one line ``error: interrupted ...``, exit 130, no traceback,
and no file half-written (issue 41, item 4).

Each command is stopped at a known point: a ``sitecustomize`` (on the child's path) pauses it
there, prints a marker and sleeps; the test sends SIGINT once the marker is out, so the signal
lands exactly there however loaded the machine is.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SHORT_DECODE

MARKER = "paused for the test"

SITECUSTOMIZE = f'''
import importlib, os, sys, time


def _pause():
    print("{MARKER}", file=sys.stderr, flush=True)
    time.sleep(600)


class _PauseAtImport:
    def find_spec(self, name, path=None, target=None):
        if name == os.environ.get("PAUSE_IMPORT"):
            _pause()


sys.meta_path.insert(0, _PauseAtImport())
if "PAUSE_AT" in os.environ:  # module:function or module:Class.method, @N: at the Nth call
    where, _, nth = os.environ["PAUSE_AT"].partition("@")
    module, _, attr = where.partition(":")
    owner = importlib.import_module(module)
    *path, name = attr.split(".")
    for part in path:
        owner = getattr(owner, part)
    real, calls = getattr(owner, name), []

    def paused(*args, **kwargs):
        calls.append(1)
        if len(calls) == int(nth or 1):
            _pause()
        return real(*args, **kwargs)

    setattr(owner, name, paused)
'''


def interrupted(tmp_path: Path, pause: dict[str, str], module: str, *args: str):
    """``python -m module args`` stopped by SIGINT where ``pause`` (PAUSE_AT or PAUSE_IMPORT)
    says; returns the finished process with its stdout and stderr."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "TRANSLATE_DEBUG")}
    path = os.pathsep.join(p for p in (str(site), str(ROOT), env.get("PYTHONPATH")) if p)
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env={**env, **pause, "PYTHONPATH": path},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    before = []
    for line in proc.stderr:  # until the marker: the command is paused where asked
        before.append(line)
        if MARKER in line:
            break
    else:
        proc.wait()
        pytest.fail(f"{module} ended before the pause:\n{''.join(before)}")
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    proc.stderr_text = "".join(before) + stderr
    proc.stdout_text = stdout
    return proc


def assert_interrupted(proc) -> str:
    """Exit 130, one ``error: interrupted`` line and no traceback; returns the line."""
    stderr = proc.stderr_text
    assert proc.returncode == 130, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, stderr
    assert "Traceback" not in stderr + proc.stdout_text
    assert "interrupted" in errors[0]
    return errors[0]


def partial_files(folder: Path) -> list[str]:
    return [p.name for p in folder.rglob("*.tmp")]


@pytest.fixture
def checkpoint(trained_run) -> Path:
    return trained_run[0] / "checkpoints" / "best.pt"


@pytest.fixture
def sources(tmp_path) -> Path:
    src = tmp_path / "src.de"
    src.write_text("Ein Hund läuft.\nZwei Katzen.\n")
    return src


def test_evaluate_stopped_while_decoding(checkpoint, sources, tmp_path):
    out = tmp_path / "eval"
    proc = interrupted(
        tmp_path,
        {"PAUSE_AT": "translate.decoding.translator:Translator.translate_ids"},
        "translate.evaluate",
        f"checkpoint={checkpoint}",
        f"src={sources}",
        f"ref={sources}",
        f"hydra.run.dir={out}",
        *SHORT_DECODE,
    )
    line = assert_interrupted(proc)
    assert "python -m translate.evaluate stopped before it finished" in line
    assert not (out / "hyp.txt").exists() and not (out / "scores.json").exists()
    assert not partial_files(out)


def test_translate_stopped_while_decoding(checkpoint, sources, tmp_path):
    output = tmp_path / "out.en"
    proc = interrupted(
        tmp_path,
        {"PAUSE_AT": "translate.decoding.translator:Translator.translate_ids"},
        "translate.translate",
        f"checkpoint={checkpoint}",
        f"input={sources}",
        f"output={output}",
        *SHORT_DECODE,
    )
    assert_interrupted(proc)
    assert not output.exists() and not partial_files(tmp_path)


def test_average_stopped_while_loading_its_second_checkpoint(trained_run, tmp_path):
    steps = sorted((trained_run[0] / "checkpoints").glob("step_*.pt"))
    output = tmp_path / "avg.pt"
    proc = interrupted(
        tmp_path,
        {"PAUSE_AT": "translate.checkpoint:load_checkpoint@2"},
        "translate.average",
        f"checkpoints=[{','.join(map(str, steps[-2:]))}]",
        f"output={output}",
    )
    assert_interrupted(proc)
    assert not output.exists() and not partial_files(tmp_path)


def test_analyze_stopped_while_loading(checkpoint, tmp_path):
    out = tmp_path / "analysis"
    proc = interrupted(
        tmp_path,
        {"PAUSE_AT": "translate.checkpoint:load_checkpoint"},
        "translate.analyze",
        f"checkpoint={checkpoint}",
        f"hydra.run.dir={out}",
    )
    assert_interrupted(proc)
    assert not any(p.suffix in (".json", ".png", ".tsv", ".tmp") for p in out.rglob("*"))


def test_export_stopped_while_torch_loads(checkpoint, tmp_path):
    """Before: the KeyboardInterrupt traceback of whichever import of torch it hit, before any
    code of the command could catch it."""
    output = tmp_path / "model"
    proc = interrupted(
        tmp_path,
        {"PAUSE_IMPORT": "torch"},
        "translate.export",
        f"checkpoint={checkpoint}",
        f"output={output}",
    )
    line = assert_interrupted(proc)
    assert "python -m translate.export stopped" in line
    assert not output.exists()


def test_train_stopped_while_reading_its_data(tmp_path, cache_dir):
    """Before its first step (no checkpoint to save yet): the run's own stop handling is not
    there yet."""
    run = tmp_path / "run"
    proc = interrupted(
        tmp_path,
        {"PAUSE_AT": "translate.data.corpus:load_corpus"},
        "translate.train",
        "experiment=quickstart",
        f"hydra.run.dir={run}",
        f"data.cache_dir={cache_dir}",
    )
    assert_interrupted(proc)
    assert not (run / "checkpoints").exists() or not any((run / "checkpoints").iterdir())
    assert not partial_files(run)
