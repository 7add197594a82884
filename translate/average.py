"""Average checkpoints: ``python -m translate.average checkpoints='[a.pt,b.pt]' output=avg.pt``,
or ``python -m translate.average run_dir=<run> n=5 [output=<file>]`` for a run's newest ``n``
``checkpoints/step_*.pt`` (written to ``<run>/checkpoints/averaged_last<n>.pt`` by default).

The element-wise mean of the model weights (:mod:`translate.training.averaging`), written
atomically as an inference checkpoint that ``evaluate``, ``translate`` and ``analyze`` read.
Every problem (a missing file, mixed model configs or tokenizers, ``n`` larger than the run
has, an output in a missing folder or over a file that is not an earlier average) is one line
before anything is written.
"""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

from translate.cli import exit_on_user_error, run_command
from translate.errors import UserError
from translate.settings import optional_path, plain
from translate.training.averaging import average_into, check_output, last_step_checkpoints

USAGE = "pass checkpoints='[a.pt,b.pt]' output=<file>, or run_dir=<run> n=<count>"


def _listed(cfg: DictConfig) -> tuple[list[Path], Path]:
    """``checkpoints=[...] output=<file>``: the files, each checked to exist."""
    listed = plain(cfg.checkpoints, "checkpoints")
    paths = [Path(str(p)) for p in (listed if isinstance(listed, list) else [listed])]
    if len(paths) < 2:
        raise UserError(f"checkpoints= names {len(paths)} file; averaging needs at least 2")
    missing = [p for p in paths if not p.is_file()]
    if missing:
        raise UserError(f"checkpoint not found: {missing[0]} (from checkpoints=)")
    output = optional_path(cfg, "output")
    if output is None:
        raise UserError("pass output=<file> for the averaged checkpoint")
    return paths, Path(output)


def _of_run(cfg: DictConfig) -> tuple[list[Path], Path]:
    """``run_dir=<run> n=<count>``: the run's newest ``n`` step checkpoints."""
    n = plain(cfg.get("n"), "n")
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise UserError(
            f"n={n} must be an integer >= 2: how many of the run's newest "
            "checkpoints/step_*.pt to average"
        )
    run_dir = Path(str(cfg.run_dir))
    paths = last_step_checkpoints(run_dir, n)
    output = optional_path(cfg, "output")
    return paths, Path(output) if output else run_dir / "checkpoints" / f"averaged_last{n}.pt"


def average(cfg: DictConfig) -> dict:
    """Average and write; returns ``{"output", "averaged_from", "step"}``."""
    if (cfg.get("checkpoints") is None) == (cfg.get("run_dir") is None):
        raise UserError(USAGE)
    paths, output = _listed(cfg) if cfg.get("checkpoints") is not None else _of_run(cfg)
    output = check_output(output, paths)
    averaged = average_into(paths, output)
    print(f"averaged {len(paths)} checkpoints: {', '.join(str(p) for p in paths)}")
    print(
        f"wrote {output} (step {averaged['step']}: the newest one's config and tokenizer, "
        "no optimizer state)"
    )
    print(f"score it: python -m translate.evaluate checkpoint={output}")
    return {
        "output": str(output),
        "averaged_from": averaged["averaged_from"],
        "step": averaged["step"],
    }


@hydra.main(version_base="1.3", config_path="../conf", config_name="average")
@exit_on_user_error
def main(cfg: DictConfig) -> None:
    average(cfg)


if __name__ == "__main__":
    run_command(main)
