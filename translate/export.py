"""Export a checkpoint for CTranslate2:
``python -m translate.export checkpoint=<ckpt> output=<dir> [quantization=int8]``: one folder
(:mod:`translate.decoding.ct2_export`) for ``engine=ctranslate2 model_dir=<dir>``.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from translate.cli import exit_on_user_error, run_command
from translate.errors import override_word
from translate.schema.commands import ExportCommand
from translate.settings import command_settings
from translate.training.signals import Stopped, StopRequest


@hydra.main(version_base="1.3", config_path="../conf", config_name="export")
@exit_on_user_error
def main(cfg: DictConfig) -> None:
    command = command_settings(ExportCommand, cfg)
    from translate.decoding.ct2_export import export_checkpoint

    try:
        # SIGINT/SIGTERM raise Stopped, so the export removes its partial folder on the way out.
        with StopRequest(immediate=True):
            out = export_checkpoint(
                command.checkpoint, command.output, command.quantization, command.max_positions
            )
    except Stopped as stop:
        print(
            f"error: {stop} interrupted the export; nothing was written to {command.output}",
            file=sys.stderr,
        )
        raise SystemExit(128 + stop.signum) from None
    print(f"exported {command.checkpoint} ({command.quantization}) to {out}")
    model_dir = override_word("model_dir", str(out))
    print(f"translate with: python -m translate.translate engine=ctranslate2 {model_dir}")


if __name__ == "__main__":
    run_command(main, "export")
