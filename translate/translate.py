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

from translate.checkpoint import load_checkpoint, restore_model
from translate.config import decode_settings
from translate.errors import UserError, exit_on_user_error
from translate.inference import Translator
from translate.runtime import resolve_device, resolve_precision
from translate.sources import read_lines


def translate_lines(cfg: DictConfig, lines: list[str]) -> list[str]:
    if cfg.checkpoint is None:
        raise UserError("pass checkpoint=<run_dir>/checkpoints/best.pt")
    device = resolve_device(cfg.device)
    precision = resolve_precision(cfg.precision, device)
    model, tokenizer, train_cfg = restore_model(load_checkpoint(cfg.checkpoint), device)
    translator = Translator(
        model,
        tokenizer,
        decode_settings(cfg.decode),
        device,
        precision,
        int(train_cfg.data.eval_max_tokens),
        train_cfg.data.filter.max_src_len,
    )
    return translator.translate(lines)


@hydra.main(version_base="1.3", config_path="../conf", config_name="translate")
@exit_on_user_error
def main(cfg: DictConfig) -> None:
    lines = read_lines(Path(cfg.input)) if cfg.input else sys.stdin.read().splitlines()
    text = "".join(line + "\n" for line in translate_lines(cfg, lines))
    if cfg.output:
        Path(cfg.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
