"""A command's ``.hydra/`` record is made once the command is accepted (translate/record.py):
a refused command leaves the run dir as it found it, so the record there is always the run's.
Before, Hydra wrote it first: a refused ``heads=3`` then a good ``heads=2`` into one dir
trained 2 heads under a ``.hydra/config.yaml`` and ``overrides.yaml`` that said 3."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from conftest import SHORT, SHORT_DECODE, TINY, assert_one_line_error, built_once, run_cli, snapshot


def _overrides(run: Path) -> list[str]:
    return yaml.safe_load((run / ".hydra" / "overrides.yaml").read_text())


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory, cache_dir) -> Path:
    """A finished 4-step heads=2 run trained from the command line, with the .hydra/ record it
    made: trained once for the test run (conftest.built_once); the tests take a copy."""

    def build(folder: Path) -> None:
        args = [*TINY, *SHORT, f"data.cache_dir={cache_dir}", f"hydra.run.dir={folder / 'run'}"]
        proc = run_cli("translate.train", *args, timeout=300)
        assert proc.returncode == 0, proc.stderr

    return built_once(tmp_path_factory, "record-cli-run", build) / "run"


def test_a_refused_train_leaves_no_record_and_the_next_run_is_recorded(tmp_path, cache_dir):
    run = tmp_path / "run"
    args = [*TINY, *SHORT, f"data.cache_dir={cache_dir}", f"hydra.run.dir={run}"]
    refused = run_cli("translate.train", *args, "heads=3")
    assert_one_line_error(refused, "is not divisible by heads=3")
    assert not run.exists()  # nor the dir Hydra made for it
    run.mkdir()
    assert_one_line_error(run_cli("translate.train", *args, "heads=3"), "heads=3")
    assert list(run.iterdir()) == []  # a dir that was there stays, empty: no log, no record

    proc = run_cli("translate.train", *args, "heads=2", timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "heads=2" in _overrides(run) and "heads=3" not in _overrides(run)
    assert yaml.safe_load((run / ".hydra" / "config.yaml").read_text())["heads"] == 2
    assert not (run / ".hydra" / "runs").exists()


def test_a_refused_resume_leaves_the_runs_record_and_a_good_one_adds_its_own(
    cli_run, tmp_path, cache_dir
):
    run = Path(shutil.copytree(cli_run, tmp_path / "run"))
    args = [*TINY, *SHORT, f"data.cache_dir={cache_dir}", f"hydra.run.dir={run}"]
    record = snapshot(run / ".hydra")
    proc = run_cli("translate.train", *args, "trainer.resume=true", "model.d_model=64")
    assert_one_line_error(proc, "model.d_model=32 in the checkpoint, 64 here")
    assert snapshot(run / ".hydra") == record  # before: the refused command's .hydra/runs/<time>

    proc = run_cli("translate.train", *args, "trainer.resume=true", "trainer.max_steps=6")
    assert proc.returncode == 0, proc.stderr
    (resumed,) = (run / ".hydra" / "runs").iterdir()
    assert "trainer.max_steps=6" in yaml.safe_load((resumed / "overrides.yaml").read_text())
    assert (run / ".hydra" / "config.yaml").read_bytes() == record["config.yaml"]


def test_a_refused_evaluate_leaves_no_record(trained_run, tmp_path):
    out = tmp_path / "eval"
    ckpt = trained_run[1]["checkpoint"]
    args = [f"checkpoint={ckpt}", "decode=greedy", *SHORT_DECODE, f"hydra.run.dir={out}"]
    missing = tmp_path / "missing.de"
    refused = run_cli("translate.evaluate", *args, f"src={missing}", f"ref={missing}")
    assert_one_line_error(refused, f"{missing} does not exist")
    assert not out.exists()

    proc = run_cli("translate.evaluate", *args)
    assert proc.returncode == 0, proc.stderr
    assert not any("src=" in o for o in _overrides(out))
    assert not (out / ".hydra" / "runs").exists()


def test_an_overwrite_makes_the_record_its_own_and_sets_the_old_one_aside(
    cli_run, tmp_path, cache_dir
):
    """trainer.overwrite=true heads=4 over a heads=2 run (before: .hydra/config.yaml still said
    heads 2, the run replaced, and a later refusal pointed there): the new run's record is the
    top one; the old one is kept under .hydra/runs/<time>_replaced/."""
    run = Path(shutil.copytree(cli_run, tmp_path / "run"))
    args = [*TINY, *SHORT, f"data.cache_dir={cache_dir}", f"hydra.run.dir={run}"]
    old = (run / ".hydra" / "config.yaml").read_bytes()
    assert yaml.safe_load(old)["heads"] == 2
    proc = run_cli("translate.train", *args, "heads=4", "trainer.overwrite=true", timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load((run / ".hydra" / "config.yaml").read_text())["heads"] == 4
    (aside,) = (run / ".hydra" / "runs").iterdir()
    assert aside.name.endswith("_replaced") and (aside / "config.yaml").read_bytes() == old
