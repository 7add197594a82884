"""Shared fixtures: Hydra configs composed from conf/ and shrunk to run in seconds on a CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"

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
]


def compose_config(config_name: str, overrides: list[str]):
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        return compose(config_name, overrides=overrides)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One tokenizer/encoding cache for the whole session, as a heads sweep shares one."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def tiny_train_cfg(tmp_path, cache_dir):
    """``make(*overrides)`` -> the quickstart config shrunk to seconds, writing under tmp_path."""

    def make(*overrides: str, run_dir: Path | None = None):
        run = run_dir or tmp_path / "run"
        base = [*TINY, f"run_dir={run}", f"data.cache_dir={cache_dir}"]
        return compose_config("train", [*base, *overrides])

    return make
