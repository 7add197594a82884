"""Outputs never land on each other: a command's output dir is its own (named to the
microsecond, locked while it writes, refused when it holds another command's outputs), an
average never replaces a file that is not an average, a sweep dir belongs to one sweep, and a
dangling symbolic link as run dir is one line before anything is created."""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import (
    CONF,
    ROOT,
    SHORT,
    SHORT_DECODE,
    TINY,
    assert_one_line_error,
    compose_config,
    run_cli,
)
from hydra import compose, initialize_config_dir

from translate.analyze import analyze
from translate.average import average
from translate.checkpoint import FORMAT_VERSION, load_checkpoint, save_checkpoint
from translate.errors import UserError
from translate.evaluate import evaluate
from translate.training.averaging import average_checkpoints, step_checkpoints
from translate.training.rundir import LOCK_NAME


def _hold_lock(directory: Path) -> subprocess.Popen:
    """Another process holding ``directory``'s lock, as a command writing there would."""
    code = (
        "import sys; from pathlib import Path; from translate.training.rundir import RunLock; "
        f"RunLock(Path({str(directory)!r})).acquire(); print('locked', flush=True); "
        "sys.stdin.read()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout.readline().strip() == "locked"
    return proc


def _release(holder: subprocess.Popen) -> None:
    holder.kill()
    holder.wait()


def _files(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory``, byte for byte, but the lock another process holds (a
    refused command leaves no Hydra record: translate/record.py)."""
    out = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file() and path.name != LOCK_NAME:
            out[str(path.relative_to(directory))] = path.read_bytes()
    return out


# -- evaluate and analyze: each command its own output dir ----------------------------------


@pytest.mark.parametrize("command", ["evaluate", "analyze"])
def test_default_output_dirs_are_named_to_the_microsecond(command):
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        run_dir = compose(command, return_hydra_config=True).hydra.run.dir
    assert re.fullmatch(rf"outputs/{command}/\d{{4}}(-\d\d){{2}}_\d\d(-\d\d){{2}}_\d{{6}}", run_dir)


def _evaluate_cli(trained_run, out: Path, *args: str):
    ckpt = trained_run[1]["checkpoint"]
    return run_cli("translate.evaluate", f"checkpoint={ckpt}", "decode=greedy", *SHORT_DECODE,
                   f"hydra.run.dir={out}", *args)  # fmt: skip


def test_a_second_evaluate_into_the_same_dir_is_refused_and_the_first_kept(trained_run, tmp_path):
    """The first evaluate in this process (what it leaves is the point, not its process), the
    second from the command line."""
    out = tmp_path / "eval"
    ckpt = trained_run[1]["checkpoint"]
    first = ["decode=greedy", *SHORT_DECODE, f"output_dir={out}"]
    evaluate(compose_config("evaluate", [f"checkpoint={ckpt}", *first]))
    before = _files(out)
    assert {"hyp.txt", "scores.json"} <= set(before)
    second = _evaluate_cli(trained_run, out, "decode.max_len_b=2")
    assert_one_line_error(
        second, f"{out} already holds the outputs of an earlier evaluate (hyp.txt, scores.json)",
        "pass another hydra.run.dir=",
    )  # fmt: skip
    assert _files(out) == before


def test_evaluate_into_a_dir_another_process_holds_fails_at_once(trained_run, tmp_path):
    out = tmp_path / "eval"
    holder = _hold_lock(out)
    try:
        proc = _evaluate_cli(trained_run, out)
        assert_one_line_error(proc, f"{out} is in use by another run (pid {holder.pid} on")
    finally:
        _release(holder)
    assert "BLEU" not in proc.stdout
    assert not (out / "hyp.txt").exists() and not (out / "scores.json").exists()


def test_analyze_into_a_dir_with_an_earlier_analysis_is_refused(trained_run, tmp_path):
    earlier = {"analysis.json": b"{}\n", "heatmaps/sentence0/encoder_self_layer0.png": b"png"}
    for name, data in earlier.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    overrides = [f"checkpoint={trained_run[1]['checkpoint']}", f"output_dir={tmp_path}"]
    small = [
        "runtime.device=cpu",
        "analysis.max_sentences=4",
        "analysis.importance.bleu_sentences=0",
        "analysis.pruning.bleu_sentences=1",
        "analysis.pruning.fractions=[1.0]",
    ]
    with pytest.raises(UserError) as err:
        analyze(compose_config("analyze", [*overrides, *small]))
    message = str(err.value)
    assert "earlier analyze (analysis.json, heatmaps); pass another hydra.run.dir=" in message
    assert _files(tmp_path) == earlier


def test_analyze_into_a_training_run_says_so_and_leaves_nothing(trained_run, tmp_path):
    """Before: 'already holds the outputs of an earlier analyze (tensorboard)', an empty
    analyze.log and a .hydra/runs/<time>/ record left in the run."""
    run = tmp_path / "run"
    shutil.copytree(trained_run[0], run)
    before = _files(run)
    proc = run_cli(
        "translate.analyze", f"checkpoint={run / 'checkpoints' / 'best.pt'}", f"hydra.run.dir={run}"
    )
    assert_one_line_error(
        proc, f"{run} is a training run's dir (checkpoints, results.json)",
        "analyze writes into a dir of its own: pass another hydra.run.dir=<folder>",
    )  # fmt: skip
    assert "earlier analyze" not in proc.stderr
    assert _files(run) == before


@pytest.mark.parametrize("inside", ["checkpoints", "tensorboard", "sweep"])
def test_evaluate_inside_a_run_or_a_sweep_is_refused_and_leaves_nothing(
    trained_run, tmp_path, inside
):
    """Before: accepted; evaluate.log, hyp.txt and a .hydra/ landed in the run's checkpoints/
    (or tensorboard/), and a dir inside a sweep became a phantom failed job of its report."""
    run = tmp_path / "run"
    shutil.copytree(trained_run[0], run)
    if inside == "sweep":
        (tmp_path / "multirun.yaml").write_text("hydra: {}\n")
    where = {"sweep": tmp_path, "checkpoints": run, "tensorboard": run}[inside]
    out = (run / inside if inside != "sweep" else tmp_path) / "eval"
    before = _files(tmp_path)
    ckpt = run / "checkpoints" / "best.pt"
    proc = run_cli("translate.evaluate", f"checkpoint={ckpt}", f"hydra.run.dir={out}")
    what = "a sweep's dir" if inside == "sweep" else "a training run's dir"
    assert_one_line_error(proc, f"{out} is inside {where}, {what}", "outside runs and sweeps")
    assert _files(tmp_path) == before and not out.exists()


# -- average: never over a file that is not an average ---------------------------------------


def _steps(trained_run) -> list[Path]:
    return step_checkpoints(trained_run[0] / "checkpoints")[-2:]


@pytest.mark.parametrize("existing", ["results.json", "mine.pt"])
def test_average_refuses_to_write_over_a_file_that_is_not_an_average(
    trained_run, tmp_path, existing
):
    """A run's results, or a checkpoint that training wrote under another name."""
    steps = _steps(trained_run)
    target = tmp_path / existing
    shutil.copy(trained_run[0] / "results.json" if existing == "results.json" else steps[0], target)
    before = target.read_bytes()
    proc = run_cli("translate.average", f"checkpoints=[{steps[0]},{steps[1]}]", f"output={target}")
    what = "a file of the run" if existing == "results.json" else "a checkpoint"
    assert_one_line_error(proc, f"output={target} is {what}", "pass another output=<file>")
    assert target.read_bytes() == before


def test_average_may_replace_an_earlier_average(trained_run, tmp_path):
    steps, out = _steps(trained_run), tmp_path / "averaged.pt"
    average(compose_config("average", [f"checkpoints=[{steps[0]},{steps[1]}]", f"output={out}"]))
    average(compose_config("average", [f"checkpoints=[{steps[1]},{steps[0]}]", f"output={out}"]))
    assert load_checkpoint(out)["averaged_from"] == [str(steps[1]), str(steps[0])]


def _best(run: Path, d_model: int = 4, width: int = 3) -> Path:
    path = run / "checkpoints" / "best.pt"
    path.parent.mkdir(parents=True)
    save_checkpoint(
        {
            "format_version": FORMAT_VERSION,
            "model": {"w": torch.zeros(width)},
            "config": {"model": {"d_model": d_model}},
            "tokenizer": b"spm",
            "step": 1,
        },
        path,
    )
    return path


@pytest.mark.parametrize(
    "other,differs",
    [
        ({"d_model": 8}, "model.d_model=4 in {a}, 8 in {b}"),
        ({"width": 2}, "model.w is float32 (3,) in {a}, float32 (2,) in {b}"),
    ],
)
def test_checkpoints_that_do_not_fit_are_named_by_their_full_paths(tmp_path, other, differs):
    """Two best.pt of different runs: the message tells them apart."""
    a, b = _best(tmp_path / "run_a"), _best(tmp_path / "run_b", **other)
    with pytest.raises(UserError) as err:
        average_checkpoints([a, b])
    assert differs.format(a=a, b=b) in str(err.value)


# -- sweeps: a sweep dir belongs to one sweep -------------------------------------------------

# One tiny job in a dir of a fixed name; 4 updates and short decodes: the tests need a job that
# completes, not TINY's 1,000 updates (20-30 s).
SWEEP = [o for o in TINY if not o.startswith("heads=")] + ["heads=1", "hydra.sweep.subdir=job"]
SWEEP += [*SHORT, *SHORT_DECODE]


def _sweep(sweep: Path, cache_dir: Path):
    return run_cli("translate.train", "-m", *SWEEP, f"data.cache_dir={cache_dir}",
                   f"hydra.sweep.dir={sweep}")  # fmt: skip


def test_a_sweep_into_a_sweep_dir_another_sweep_holds_is_refused_in_one_line(tmp_path, cache_dir):
    sweep = tmp_path / "sweep"
    (sweep / "job" / "checkpoints").mkdir(parents=True)  # a job the other sweep completed
    (sweep / "job" / "results.json").write_text('{"status": "completed"}\n')
    (sweep / "job" / "checkpoints" / "last.pt").write_bytes(b"weights")
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    before = _files(sweep)
    holder = _hold_lock(sweep)
    try:
        proc = _sweep(sweep, cache_dir)
        assert_one_line_error(
            proc, f"{sweep} is in use by another run (pid {holder.pid} on", "hydra.sweep.dir="
        )
    finally:
        _release(holder)
    assert _files(sweep) == before


def test_the_same_sweep_again_without_resume_ends_in_its_failed_jobs_line(tmp_path, cache_dir):
    """Its jobs are refused (their dirs hold the first sweep's runs, whose results the report
    still lists): the sweep does not claim success, as it did ("0 failed", exit 0)."""
    sweep = tmp_path / "sweep"
    assert _sweep(sweep, cache_dir).returncode == 0
    results = (sweep / "job" / "results.json").read_bytes()
    proc = _sweep(sweep, cache_dir)
    assert_one_line_error(proc, "1 of 1 sweep jobs failed (job: ", "already holds a run")
    assert (sweep / "job" / "results.json").read_bytes() == results


def test_a_job_whose_dir_another_process_holds_gets_no_error_txt(tmp_path, cache_dir):
    """That job dir is the other process's: the failure is logged, nothing written there."""
    sweep = tmp_path / "sweep"
    holder = _hold_lock(sweep / "job")
    try:
        proc = _sweep(sweep, cache_dir)
    finally:
        _release(holder)
    assert proc.returncode != 0
    assert f"in use by another run (pid {holder.pid} on" in proc.stdout + proc.stderr
    assert not (sweep / "job" / "error.txt").exists()


def test_a_full_disk_while_recording_a_failed_job_is_one_warning(tmp_path, monkeypatch, caplog):
    """The sweep still reaches its closing line: the refused write is logged, never raised."""
    from translate import io, sweeps

    def full(path, *args, **kwargs):
        raise io.WriteFailed(f"no space left on the device for {path}", errno.ENOSPC)

    monkeypatch.setattr(io, "write", full)
    sweeps._write_error(tmp_path, ValueError("heads=3 is bad"))
    assert not (tmp_path / "error.txt").exists()
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "no space left" in caplog.records[0].getMessage()


# -- a dangling symbolic link as run dir ------------------------------------------------------


@pytest.mark.parametrize(
    "command,key",
    [
        (["translate.train", *TINY], "hydra.run.dir"),
        (["translate.train", "-m", *TINY], "hydra.sweep.dir"),
        (["translate.evaluate", "checkpoint=x.pt"], "hydra.run.dir"),
        (["translate.analyze", "checkpoint=x.pt"], "hydra.run.dir"),
    ],
)
def test_a_dangling_symlink_as_run_dir_is_one_line_and_creates_nothing(tmp_path, command, key):
    link, target = tmp_path / "run", Path(os.path.realpath(tmp_path)) / "gone" / "run"
    link.symlink_to(target)
    proc = run_cli(*command, f"{key}={link}")
    assert_one_line_error(
        proc,
        f"{key}={link} is a symbolic link to {target}, which does not exist; create {target} "
        f"or pass another {key}",
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"] and link.is_symlink()
