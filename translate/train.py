"""Train a Transformer: ``python -m translate.train heads=8`` (see README.md).

``train(cfg) -> dict`` is the whole job as a plain function (tests call it through Hydra's
``compose``); ``main`` only wraps it for the command line. Everything is written under
``cfg.run_dir``: ``checkpoints/``, ``tensorboard/``, ``test.hyp.txt`` and ``results.json``.
"""

from __future__ import annotations

import logging
import shlex

import hydra
from omegaconf import DictConfig

from translate.cli import exit_on_user_error, task_overrides
from translate.settings import train_settings
from translate.training import distributed
from translate.training.loop import Run, fit, setup
from translate.training.report import finish_run

log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> dict:
    """Train, validate, checkpoint, then score the best checkpoint on the test split.

    Returns the ``results.json`` dict. Under torchrun every process runs this as one rank of
    DistributedDataParallel (translate/training/distributed.py); rank 0 alone evaluates and
    writes, the other ranks return ``{"status": "completed", "rank": r, "steps": n,
    "bleu": None}``.
    """
    settings = train_settings(cfg)
    dist = distributed.from_env()
    try:
        run = setup(settings, dist)
        stop_reason, sig = fit(run)
        if sig is not None:
            _exit_with_resume_hint(run, stop_reason, sig)
        log.info(
            "training stopped (%s) after %d steps, %.1f min",
            stop_reason,
            run.progress.step,
            run.progress.train_seconds / 60,
        )
        if not dist.is_main:  # rank 0 alone scores the test split and writes results.json
            return {
                "status": "completed",
                "rank": dist.rank,
                "steps": run.progress.step,
                "bleu": None,
            }
        return finish_run(run)
    finally:
        if dist.enabled:
            distributed.shutdown()


def _exit_with_resume_hint(run: Run, stop_reason: str, sig: int) -> None:
    """A signal stopped training after a checkpoint: say how to resume, exit 128 + signal."""
    log.log(
        logging.WARNING if run.dist.is_main else logging.DEBUG,  # the resume command once
        "stopped by %s at step %d; saved %s. Resume with:\n  %s %s %s trainer.resume=true",
        stop_reason,
        run.progress.step,
        run.ckpts.last,
        "torchrun <same options> -m translate.train"
        if run.dist.enabled
        else "python -m translate.train",
        " ".join(shlex.quote(o) for o in task_overrides()),
        # Quoted twice: job dirs of sweeps hold '=' and ',' (Hydra) and the shell sees it too.
        shlex.quote(f'hydra.run.dir="{run.run_dir}"'),
    )
    raise SystemExit(128 + sig)


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
@exit_on_user_error
def main(cfg: DictConfig) -> float:
    return train(cfg)["bleu"]  # the value a Hydra optimisation sweeper would maximise


if __name__ == "__main__":
    main()
