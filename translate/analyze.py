"""What the heads learned: ``python -m translate.analyze checkpoint=<path> [data overrides]``.

The work is :mod:`translate.analysis.head_report`'s; everything goes into this command's Hydra
run dir (``outputs/analyze/<time>/``), held while it runs; one holding these outputs is refused."""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

from translate.cli import exit_on_user_error, own_output_dir, run_command
from translate.schema.commands import AnalyzeCommand
from translate.settings import command_settings


def analyze(cfg: DictConfig) -> dict:
    """Run every diagnostic, write the outputs; returns the ``analysis.json`` dict."""
    command = command_settings(AnalyzeCommand, cfg)
    from translate.analysis.head_report import OUTPUTS, analyze_heads

    with own_output_dir(Path(command.output_dir), OUTPUTS, "analyze") as out_dir:
        return analyze_heads(command, command.analysis, command.split, out_dir, command.data)


@hydra.main(version_base="1.3", config_path="../conf", config_name="analyze")
@exit_on_user_error
def main(cfg: DictConfig) -> None:
    analyze(cfg)


if __name__ == "__main__":
    run_command(main, "analyze")
