"""What the rehearsal's stage processes share (``translate/bench/scale.py``): the
``iwslt2017`` recipe composed as the training command composes it, the run it sets up, and
the process's resident size and the cache's size on disk."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir

from translate.settings import train_settings

ROOT = Path(__file__).resolve().parents[2]


def recipe(p: dict, *extra: str):
    """The ``iwslt2017`` recipe on ``p["data"]``, as the training command composes it."""
    overrides = [*recipe_overrides(p), f"run_dir={p['run_dir']}", *extra]
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        return compose("train", overrides=overrides)


def recipe_overrides(p: dict) -> list[str]:
    """What every stage adds to ``experiment=iwslt2017``: the folder, the cache, the device."""
    return [
        "experiment=iwslt2017",
        f"data.path={p['data']}",
        f"data.cache_dir={p['cache']}",
        f"runtime.device={p['device']}",
        f"runtime.num_threads={p['threads']}",
        "trainer.progress_bar=false",
        *p["overrides"],
    ]


def rss_mb() -> float:
    """The resident size now (``VmRSS``), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 2**10
    return float("nan")


def cache_mb(folder: Path) -> dict[str, float]:
    """MiB on disk of the cache's tokenizer models and encoded splits."""
    files = [f for f in Path(folder).glob("*") if f.is_file()]
    return {
        "tokenizer_mb": sum(f.stat().st_size for f in files if f.suffix == ".model") / 2**20,
        "encoded_mb": sum(f.stat().st_size for f in files if f.suffix == ".npz") / 2**20,
    }


def setup_run(p: dict, *extra: str):
    """The recipe's run as training sets it up (data from the cache, model, optimizer)."""
    from translate.training.distributed import Dist
    from translate.training.run import setup  # loads torch and the model: not at import

    settings = train_settings(recipe(p, "trainer.overwrite=true", *extra))
    return setup(settings, Dist())
