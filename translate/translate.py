"""Translate text with a checkpoint: ``python -m translate.translate checkpoint=<path>``.

Reads stdin (or ``input=<file>``, ``.gz`` accepted) and writes one translation per input line
to stdout (or ``output=<file>``), so output stays aligned with input: empty and whitespace-only
lines give empty lines. Lines longer than the model's maximum source length are translated
after truncation, with a warning on stderr. Batching by length happens internally.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from translate.cli import exit_on_user_error
from translate.data.sources import read_lines
from translate.decoding.translator import load_translator
from translate.settings import checkpoint_command, decode_settings, optional_path


def translate_lines(cfg: DictConfig, lines: list[str]) -> list[str]:
    command = checkpoint_command(cfg)
    loaded = load_translator(
        command.checkpoint, command.device, command.precision, decode_settings(cfg.decode)
    )
    return loaded.translator.translate(lines)


@hydra.main(version_base="1.3", config_path="../conf", config_name="translate")
@exit_on_user_error
def main(cfg: DictConfig) -> None:
    source = optional_path(cfg, "input")
    lines = read_lines(Path(source)) if source else sys.stdin.read().splitlines()
    text = "".join(line + "\n" for line in translate_lines(cfg, lines))
    target = optional_path(cfg, "output")
    if target:
        Path(target).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
