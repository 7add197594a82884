"""Translate text with a checkpoint: ``python -m translate.translate checkpoint=<path>``, or with
an exported model: ``engine=ctranslate2 model_dir=<dir>`` (:mod:`translate.decoding.engine_switch`).

Reads stdin (or ``input=<file>``, ``.gz`` accepted) and writes one translation per input line
to stdout (or ``output=<file>``, which is never the input or a file of a run: the rule of
:mod:`translate.io`), so output stays aligned with input: lines end at ``\n`` (or
``\r\n``) alone, the same for stdin and files, and empty and whitespace-only lines give empty
lines. Lines longer than the run's source cap (its ``data.eval_max_len``) are translated
after truncation, with a warning on stderr. Batching by length happens internally.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from translate.cli import exit_on_user_error, run_command
from translate.data.sources import decode_input, read_input_lines
from translate.decoding.engine_switch import describe_decode, load_engine
from translate.io import STDOUT, check_output_file
from translate.settings import decode_overrides, engine_command, optional_path

STDIN = "/dev/stdin"  # the file standard input reads, where it is one


def translate_lines(cfg: DictConfig, lines: list[str]) -> list[str]:
    overrides = decode_overrides(cfg.decode)
    loaded = load_engine(engine_command(cfg), overrides)
    # stdout carries translations only: what they were decoded with goes to stderr.
    print(describe_decode(loaded.translator.decode, overrides), file=sys.stderr)
    return loaded.translator.translate(lines)


@hydra.main(version_base="1.3", config_path="../conf", config_name="translate")
@exit_on_user_error
def main(cfg: DictConfig) -> None:
    source = optional_path(cfg, "input")
    # A bad output fails now, not after all the decoding; it never replaces what is read.
    # Standard input too: `< out.en` with output=out.en would replace what is being read.
    inputs = [p for p in (source or STDIN, cfg.get("checkpoint")) if p]
    output = check_output_file(
        optional_path(cfg, "output") or STDOUT, "output", "translation", inputs
    )
    # One output line per input line: both split on \n (and \r\n) only.
    lines = read_input_lines(Path(source)) if source else decode_input(sys.stdin.buffer.read())
    output.write("".join(line + "\n" for line in translate_lines(cfg, lines)))


if __name__ == "__main__":
    run_command(main)
