"""docs/extending.md, "A preset": ``conf/experiment/quickstart_gqa.yaml`` (kept beside this test
and found through Hydra's search path) composes into valid settings that differ from the
quickstart's in its own keys only."""

from __future__ import annotations

from pathlib import Path

from conftest import compose_config
from omegaconf import OmegaConf

from translate.settings import train_settings

SEARCH_PATH = f"hydra.searchpath=[file://{Path(__file__).parent / 'conf'}]"


def composed(preset: str) -> dict:
    cfg = compose_config("train", [f"experiment={preset}", "run_dir=unused", SEARCH_PATH])
    train_settings(cfg)  # valid: raises UserError otherwise
    return OmegaConf.to_container(cfg, resolve=True)


def own_keys(cfg: dict) -> list:
    """The keys the preset sets (or derives), taken out of ``cfg``."""
    return [cfg.pop("task_name"), cfg.pop("kv_heads"), cfg["model"].pop("num_kv_heads")]


def test_the_preset_is_the_quickstart_with_two_kv_heads():
    preset, parent = composed("quickstart_gqa"), composed("quickstart")
    assert own_keys(preset) == ["quickstart_gqa", 2, 2]
    assert own_keys(parent) == ["quickstart", 4, 4]
    assert preset == parent  # the rest, the model's other keys included
