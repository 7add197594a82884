"""Average checkpoints: ``python -m translate.average checkpoints='[a.pt,b.pt]' output=avg.pt``,
or ``run_dir=<run> n=5 [output=<file>]`` for a run's newest ``n`` ``checkpoints/step_*.pt``
(into ``<run>/checkpoints/averaged_last<n>.pt`` by default): the element-wise mean of the
weights (:mod:`translate.training.averaging`) as an inference checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

from translate.cli import exit_on_user_error, run_command
from translate.errors import UserError
from translate.schema.commands import AverageCommand
from translate.settings import command_settings


def _inputs(command: AverageCommand) -> tuple[list[Path], Path]:
    if command.checkpoints is not None:
        paths = [Path(str(p)) for p in command.checkpoints]
        missing = [p for p in paths if not p.is_file()]
        if missing:
            raise UserError(f"checkpoint not found: {missing[0]} (from checkpoints=)")
        return paths, Path(command.output)
    from translate.training.averaging import last_step_checkpoints

    run_dir, n = Path(command.run_dir), command.n
    default = run_dir / "checkpoints" / f"averaged_last{n}.pt"
    return last_step_checkpoints(run_dir, n), Path(command.output or default)


def average(cfg: DictConfig) -> dict:
    paths, output = _inputs(command_settings(AverageCommand, cfg))
    from translate.training.averaging import average_into, check_output

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
    run_command(main, "average")
