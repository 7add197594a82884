"""The checkpoint file: loading never runs code from it, and format-1 checkpoints (written
before the package layout) and format-2 ones (before grouped-query attention) still load, give
the same translations and count as the same model config."""

from __future__ import annotations

import copy
import logging
import pathlib
import shutil

import numpy as np
import pytest
import torch
from conftest import SHORT_DECODE, TINY, assert_one_line_error, compose_config, run_cli

from translate.checkpoint import FORMAT_VERSION, load_checkpoint
from translate.errors import UserError
from translate.evaluate import evaluate
from translate.settings import train_settings
from translate.train import train
from translate.training.resume import check_same_experiment, finished_results


class _Payload:
    """Unpickling this creates ``marker``: what a hostile checkpoint could do instead."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return pathlib.Path.touch, (self.marker,)


@pytest.fixture
def hostile(trained_run, tmp_path) -> tuple[pathlib.Path, pathlib.Path]:
    """``(checkpoint, marker)``: the trained checkpoint plus an object whose unpickling
    creates ``marker``."""
    ckpt = load_checkpoint(trained_run[1]["checkpoint"])
    marker = tmp_path / "pwned"
    path = tmp_path / "hostile.pt"
    torch.save({**ckpt, "extra": _Payload(marker)}, path)
    return path, marker


def test_the_hostile_payload_is_live_when_loaded_unsafely(hostile):
    """The control: pickle's default loading really runs the payload."""
    path, marker = hostile
    torch.load(path, weights_only=False)
    assert marker.exists()


def test_load_checkpoint_refuses_code_and_runs_none(hostile):
    path, marker = hostile
    with pytest.raises(UserError, match="holds Python objects .* refused") as err:
        load_checkpoint(path)
    assert "\n" not in str(err.value) and not marker.exists()


@pytest.mark.parametrize(
    "module,extra",
    [
        ("translate.evaluate", ["decode=greedy"]),
        ("translate.translate", []),
        ("translate.analyze", []),
    ],
)
def test_commands_refuse_a_hostile_checkpoint(hostile, tmp_path, module, extra):
    path, marker = hostile
    proc = run_cli(module, f"checkpoint={path}", f"hydra.run.dir={tmp_path}", *extra, stdin="Hallo")
    assert_one_line_error(proc, "holds Python objects", "refused")
    assert not marker.exists()


def test_resume_refuses_a_hostile_last_checkpoint(hostile, tmp_path, cache_dir):
    path, marker = hostile
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copy(path, run / "checkpoints" / "last.pt")
    cfg = compose_config(
        "train", [*TINY, f"run_dir={run}", f"data.cache_dir={cache_dir}", "trainer.resume=true"]
    )
    with pytest.raises(UserError, match="holds Python objects"):
        train(cfg)
    assert not marker.exists()


def _as_format_2(ckpt: dict) -> dict:
    """What translate wrote before grouped-query attention: no ``num_kv_heads`` (nor the
    top-level ``kv_heads``) in the config."""
    model = {k: v for k, v in ckpt["config"]["model"].items() if k != "num_kv_heads"}
    config = {k: v for k, v in ckpt["config"].items() if k != "kv_heads"}
    return {**ckpt, "format_version": 2, "config": {**config, "model": model}}


def _as_format_1(ckpt: dict) -> dict:
    """What translate wrote before the package layout: numpy's RNG state as a numpy array,
    the token table as ``embed.weight``, and (as format 2) no ``num_kv_heads``."""
    name, keys, pos, has_gauss, cached = ckpt["rng"]["numpy"]
    rng = {**ckpt["rng"], "numpy": (name, keys.numpy().astype(np.uint32), pos, has_gauss, cached)}
    model = {
        ("embed.weight" if k == "embedding.embed.weight" else k): v
        for k, v in ckpt["model"].items()
    }
    return {**_as_format_2(ckpt), "format_version": 1, "rng": rng, "model": model}


def test_a_format_1_checkpoint_loads_and_translates_the_same(trained_run, tmp_path):
    run, results = trained_run
    ckpt = load_checkpoint(results["checkpoint"])
    assert ckpt["format_version"] == FORMAT_VERSION == 3
    old = tmp_path / "old.pt"
    torch.save(_as_format_1(ckpt), old)
    loaded = load_checkpoint(old)
    assert set(loaded["model"]) == set(ckpt["model"])
    assert loaded["config"]["model"] == ckpt["config"]["model"]
    scores = []
    for path, out in ((results["checkpoint"], tmp_path / "new"), (old, tmp_path / "old")):
        overrides = [f"checkpoint={path}", f"output_dir={out}", "decode=greedy"]
        scores.append(evaluate(compose_config("evaluate", overrides)))
        scores[-1]["hyps"] = (out / "hyp.txt").read_text()
    assert scores[0]["bleu"] == scores[1]["bleu"] and scores[0]["hyps"] == scores[1]["hyps"]


def test_a_format_2_checkpoint_gets_kv_heads_equal_to_heads(trained_run, tmp_path):
    """Saved without ``num_kv_heads``: on load its model is multi-head, the same config a run
    composes today, so a finished run resumed with today's config is still finished."""
    run, results = trained_run
    ckpt = load_checkpoint(run / "checkpoints" / "last.pt")
    old = _as_format_2(ckpt)
    assert "num_kv_heads" not in old["config"]["model"]
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    torch.save(old, copy / "checkpoints" / "last.pt")
    loaded = load_checkpoint(copy / "checkpoints" / "last.pt")
    model = loaded["config"]["model"]
    assert model["num_kv_heads"] == model["num_heads"] == 2  # TINY: heads=2
    assert model == ckpt["config"]["model"]

    overrides = [
        *TINY,
        f"run_dir={copy}",
        f"data.cache_dir={ckpt['config']['data']['cache_dir']}",
        "trainer.max_steps=8",
        "trainer.val_every_n_steps=4",
        "trainer.resume=true",
        *SHORT_DECODE,
    ]
    settings = train_settings(compose_config("train", overrides))
    assert settings.config["model"] == model
    assert finished_results(settings) is not None


def _before_the_runtime_group(ckpt: dict) -> dict:
    """``ckpt`` as written before the runtime group: trainer.device, trainer.precision, ..."""
    config = copy.deepcopy(ckpt["config"])
    config["trainer"].update(config.pop("runtime"))
    return {**ckpt, "config": config}


def test_a_checkpoint_from_before_the_runtime_group_reads_them_as_runtime(
    trained_run, tmp_path, caplog
):
    """Its trainer.device/precision/num_threads/keep_freed_memory load as runtime.*: the config
    a run composes today, so a resume compares them, and a changed precision is logged."""
    run, results = trained_run
    ckpt = load_checkpoint(run / "checkpoints" / "last.pt")
    old = _before_the_runtime_group(ckpt)
    assert "runtime" not in old["config"] and old["config"]["trainer"]["precision"] == "32"
    torch.save(old, tmp_path / "old.pt")
    loaded = load_checkpoint(tmp_path / "old.pt")
    assert loaded["config"] == ckpt["config"]

    here = copy.deepcopy(ckpt["config"])
    here["runtime"]["precision"] = "bf16"
    with caplog.at_level(logging.WARNING, logger="translate.training.resume"):
        check_same_experiment("the run", loaded, here, None)
    assert "runtime.precision=32 in the checkpoint, bf16 here" in caplog.text
