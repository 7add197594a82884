"""Nothing lost: a run dir belongs to one run, resume is idempotent, and faults after
training (a full disk, a signal while scoring, a second Ctrl-C) leave a resumable run."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SHORT, TINY, file_size_limit, snapshot
from conftest import short_config as config

from translate.errors import UserError
from translate.train import train
from translate.training import rundir


@pytest.fixture(scope="module")
def finished_template(short_run) -> tuple[Path, dict]:
    return short_run, json.loads((short_run / "results.json").read_text())


@pytest.fixture
def finished(finished_template, tmp_path) -> tuple[Path, dict]:
    """``(run dir, results)`` of a finished 4-step run, a private copy for each test."""
    template, results = finished_template
    run = tmp_path / "run"
    shutil.copytree(template, run)
    return run, json.loads((run / "results.json").read_text())


def test_a_fresh_run_into_a_used_dir_stops_and_changes_nothing(finished, cache_dir):
    run, _ = finished
    before = snapshot(run)
    with pytest.raises(UserError) as err:
        train(config(run, cache_dir, "seed=2"))
    message = str(err.value)
    assert "already holds a run" in message and "\n" not in message
    for way in ("trainer.resume=true", "hydra.run.dir=", "trainer.overwrite=true"):
        assert way in message
    assert snapshot(run) == before


def test_overwrite_replaces_the_earlier_run_on_request(finished, cache_dir):
    run, first = finished
    second = train(config(run, cache_dir, "trainer.overwrite=true", "trainer.max_steps=2"))
    assert first["steps"] == 4 and second["steps"] == 2
    assert json.loads((run / "results.json").read_text())["steps"] == 2
    assert not (run / "checkpoints" / "step_00000004.pt").exists()


@pytest.mark.parametrize("holds", ["the user's own files", "a linked checkpoints folder"])
def test_overwrite_removes_only_what_this_package_wrote(tmp_path, cache_dir, holds):
    """trainer.overwrite=true onto a folder that only looks like a run (before: the user's
    results.json, test.hyp.txt and checkpoints/*.pt were deleted, exit 0; a checkpoints/ that
    is a symbolic link was an rmtree traceback): one line, nothing removed."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "results.json").write_text('{"mine": true}\n')
    (run / "checkpoints" / "mymodel.pt").write_bytes(b"PK\x03\x04 the user's model")
    if holds == "a linked checkpoints folder":
        elsewhere = tmp_path / "other-disk"
        (run / "checkpoints").rename(elsewhere)
        (run / "checkpoints").symlink_to(elsewhere)
    before = snapshot(tmp_path)
    with pytest.raises(UserError, match="overwrite=true would remove .*nothing was removed"):
        train(config(run, cache_dir, "trainer.overwrite=true"))
    assert snapshot(tmp_path) == before


def _hold_lock(run: Path) -> subprocess.Popen:
    """Another process holding the run dir's lock, as a second training run would."""
    code = (
        "import sys; from pathlib import Path; from translate.training.rundir import RunLock; "
        f"RunLock(Path({str(run)!r})).acquire(); print('locked', flush=True); sys.stdin.read()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_second_concurrent_run_fails_at_once_and_changes_nothing(finished, cache_dir):
    run, _ = finished
    before = snapshot(run)
    holder = _hold_lock(run)
    try:
        with pytest.raises(UserError, match=rf"in use by another run \(pid {holder.pid} on"):
            train(config(run, cache_dir, "trainer.resume=true", "trainer.max_steps=6"))
        assert snapshot(run) == before
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_of_a_dead_run_is_taken_over_with_a_warning(tmp_path, cache_dir, caplog):
    run = tmp_path / "run"
    holder = _hold_lock(run)
    holder.kill()  # dies holding the lock: the OS frees it, the file still names the holder
    holder.wait()
    assert f"pid {holder.pid}" in (run / rundir.LOCK_NAME).read_text()
    with caplog.at_level("WARNING", logger="translate.training.rundir"):
        train(config(run, cache_dir, "trainer.max_steps=2"))
    assert f"pid {holder.pid}" in caplog.text and "no longer running" in caplog.text
    assert not (run / rundir.LOCK_NAME).exists()  # a clean end leaves no holder behind


def test_an_unwritable_run_dir_is_one_line(tmp_path, cache_dir, monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(rundir.os, "open", refuse)  # root ignores chmod: refuse the open itself
    with pytest.raises(UserError, match="cannot write to the run dir .* hydra.run.dir="):
        train(config(tmp_path / "run", cache_dir))


def test_default_run_dirs_of_two_launches_differ():
    cmd = [sys.executable, "-m", "translate.train", "--cfg", "hydra", "--resolve"]
    cmd += ["-p", "hydra.run.dir"]
    procs = [subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True) for _ in (0, 1)]
    dirs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(d.startswith("outputs/runs/") for d in dirs) and dirs[0] != dirs[1]


@pytest.mark.parametrize("mode", ["true", "auto"])
def test_resuming_a_finished_run_only_reports_it(finished, cache_dir, mode):
    run, results = finished
    before = snapshot(run)
    again = train(config(run, cache_dir, f"trainer.resume={mode}"))
    assert again == results and snapshot(run) == before
    # More budget is not "finished": the run continues from its checkpoint.
    longer = train(config(run, cache_dir, f"trainer.resume={mode}", "trainer.max_steps=6"))
    assert longer["steps"] == 6


def test_a_failed_resume_changes_nothing_and_says_why_in_one_line(finished, cache_dir):
    run, _ = finished
    before = snapshot(run)
    with pytest.raises(UserError) as err:
        train(config(run, cache_dir, "trainer.resume=true", "model.d_model=64"))
    message = str(err.value)
    assert "model.d_model=32 in the checkpoint, 64 here" in message and "\n" not in message
    assert snapshot(run) == before


def test_a_full_disk_keeps_the_last_checkpoint_and_says_what_to_do(finished, cache_dir):
    """A real refused write inside torch's zip writer: the run resumes under a file-size limit
    (RLIMIT_FSIZE) that its logs fit in and a checkpoint (1.1 MB) does not."""
    run, _ = finished
    ckpts = run / "checkpoints"
    before = snapshot(ckpts)
    args = [*TINY, *SHORT, f"data.cache_dir={cache_dir}", f"hydra.run.dir={run}"]
    args += ["trainer.resume=true", "trainer.max_steps=6"]
    proc = subprocess.run(
        [sys.executable, "-m", "translate.train", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=file_size_limit(800_000),
    )
    assert proc.returncode == 2, proc.stderr
    (message,) = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert f"could not save step_00000006.pt in {ckpts}" in message
    assert "more than this process may write (ulimit -f)" in message  # the limit, not the disk
    assert "MiB free" not in message and "trainer.resume=true" in message
    assert "Traceback" not in proc.stderr
    assert snapshot(ckpts) == before  # no partial file; last.pt still the step-4 checkpoint
    assert not (run / rundir.LOCK_NAME).exists()


def _signal_self_when(
    monkeypatch, target, name: str, sig: int, times: int = 1, on_call: int = 1
) -> None:
    """Send ``sig`` to this process ``times`` times at the ``on_call``-th call of
    ``target.name``."""
    original, calls = getattr(target, name), []

    def wrapped(*args, **kwargs):
        calls.append(1)
        if len(calls) == on_call:
            for _ in range(times):
                os.kill(os.getpid(), sig)
        return original(*args, **kwargs)

    monkeypatch.setattr(target, name, wrapped)


def test_a_signal_while_scoring_leaves_a_run_that_resume_finishes(
    tmp_path, cache_dir, monkeypatch, caplog
):
    from translate.decoding.translator import Translator

    run = tmp_path / "run"
    with monkeypatch.context() as patch:
        _signal_self_when(patch, Translator, "timed_translate_ids", signal.SIGTERM)
        with pytest.raises(SystemExit) as stop, caplog.at_level("WARNING"):
            train(config(run, cache_dir))
    assert stop.value.code == 128 + signal.SIGTERM
    assert (
        "SIGTERM while scoring the test split" in caplog.text
        and "trainer.resume=true" in caplog.text
    )
    assert not (run / "results.json").exists()
    results = train(config(run, cache_dir, "trainer.resume=true"))
    assert results["steps"] == 4  # scored, with no step past max_steps


def test_a_second_ctrl_c_stops_at_once_and_keeps_the_last_checkpoint(
    tmp_path, cache_dir, monkeypatch, caplog
):
    from translate.training.step import Trainer

    run = tmp_path / "run"
    _signal_self_when(monkeypatch, Trainer, "step", signal.SIGINT, times=2, on_call=3)
    with pytest.raises(SystemExit) as stop, caplog.at_level("WARNING"):
        train(config(run, cache_dir))
    assert stop.value.code == 128 + signal.SIGINT
    assert "second SIGINT: stopped at once, without saving" in caplog.text
    ckpts = run / "checkpoints"
    assert (ckpts / "last.pt").read_bytes() == (ckpts / "step_00000002.pt").read_bytes()
    assert not (run / rundir.LOCK_NAME).exists()


def test_a_huge_validation_line_is_cut_to_the_models_length(tmp_path, cache_dir, caplog):
    """A 20,000-word dev and test line once took the run's memory (the OOM killer, no message):
    sources are cut to data.eval_max_len for decoding, the pair is left out of the dev loss,
    the log counts it, and no batch the model sees is longer than the cap."""
    from translate.data.sources import sample_dir
    from translate.nn.model import TokenEmbedding

    corpus = tmp_path / "corpus"
    shutil.copytree(sample_dir(), corpus)
    huge = " ".join(["Hausboot"] * 20_000)
    for split in ("validation", "test"):
        for lang in ("de", "en"):
            path = corpus / f"{split}.{lang}"
            path.write_text(huge + "\n" + path.read_text().split("\n", 1)[1])
    longest, forward = [], TokenEmbedding.forward

    def spy(self, tokens, offset=0):
        longest.append(tokens.size(1))
        return forward(self, tokens, offset)

    overrides = [f"data.dir={corpus}", "data.eval_max_len=48", "trainer.latency_sentences=1"]
    with caplog.at_level("WARNING", logger="translate.data"), pytest.MonkeyPatch.context() as m:
        m.setattr(TokenEmbedding, "forward", spy)
        results = train(config(tmp_path / "run", cache_dir, *overrides))
    assert results["status"] == "completed" and max(longest) <= 48
    for role, split in (("valid", "validation"), ("test", "test")):
        assert f"data {role} ({split}): 1 of 200 pairs are longer than data.eval_max_len=48" in (
            caplog.text
        )


@pytest.mark.parametrize(
    "name",
    ['say "hi"', "it's", "a b=c,d", "back\\slash\\", "${now:%Y}", "$HOME `x`", "q\\'"],
)
def test_the_printed_resume_command_names_any_run_dir_exactly(name):
    """Before, a run dir holding '"' gave a command Hydra could not parse."""
    import shlex

    from translate.train import resume_command

    run_dir = f"/runs/{name}"
    words = shlex.split(resume_command(run_dir))
    assert words[:3] == ["python", "-m", "translate.train"]
    cfg = compose_config_with_hydra(words[3:])
    assert cfg.hydra.run.dir == run_dir and cfg.trainer.resume is True


def compose_config_with_hydra(overrides: list[str]):
    from conftest import CONF
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        return compose("train", overrides=overrides, return_hydra_config=True)
