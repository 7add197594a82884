"""trainer.resume=auto: continue a run that is there, start where the dir holds none. The study
presets use it, so one of their jobs run alone into a new dir starts (issue 31 case 7); a run
resumed or finished under auto is the one trainer.resume=true gives (test_train.py,
test_rundir.py)."""

from __future__ import annotations

import json
import logging

import pytest
from conftest import CONF, SHORT, TINY, compose_config

from translate.errors import UserError
from translate.train import train

STUDIES = sorted(path.stem for path in (CONF / "experiment").glob("*ablation*.yaml"))


@pytest.mark.parametrize("preset", STUDIES)
def test_a_study_job_alone_into_a_new_dir_starts_from_step_0(preset, tmp_path, cache_dir, caplog):
    """The issue's command, shrunk: experiment=<study> seed=1 into a dir of its own."""
    run = tmp_path / "job"
    shrink = ["data=sample", "decode=greedy", "runtime.device=cpu", "runtime.precision=32"]
    shrink += ["runtime.num_threads=1", "trainer.average_last_n=0"]
    overrides = [f"experiment={preset}", *shrink, *TINY[1:], *SHORT, "seed=1"]
    cfg = compose_config("train", [*overrides, f"run_dir={run}", f"data.cache_dir={cache_dir}"])
    with caplog.at_level(logging.INFO):
        results = train(cfg)
    assert results["status"] == "completed" and results["steps"] == 4
    assert f"{run}: no checkpoint yet, starting" in caplog.text
    assert "resumed from" not in caplog.text


def test_auto_refuses_results_without_a_checkpoint_as_true_does(tiny_train_cfg, tmp_path):
    """A dir with results.json but no last.pt is no run to continue, nor an empty dir."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").write_text(json.dumps({"status": "completed"}))
    for mode in ("true", "auto"):
        with pytest.raises(UserError) as err:
            train(tiny_train_cfg(f"trainer.resume={mode}", run_dir=run))
        message = str(err.value)
        assert f"trainer.resume={mode} but" in message and "holds no run to resume" in message
    assert [p.name for p in run.iterdir() if p.name != ".lock"] == ["results.json"]
