"""Translate text with a checkpoint: ``python -m translate.translate checkpoint=<path>``, or with
an exported model: ``engine=ctranslate2 model_dir=<dir>``.

stdin (or ``input=``) to stdout (or ``output=``), one line per line; on a terminal (no
``input=``/``output=``) a prompt instead, the model loaded once.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import hydra
from omegaconf import DictConfig

from translate.cli import exit_on_user_error, run_command
from translate.data.sources import decode_input, read_input_lines
from translate.decoding.engine_switch import describe_decode, load_engine
from translate.io import STDOUT, check_output_file
from translate.schema.commands import TranslateCommand
from translate.settings import command_settings, decode_overrides

if TYPE_CHECKING:
    from translate.decoding.translator import Translator

STDIN = "/dev/stdin"  # the file standard input reads, where it is one


def load(command: TranslateCommand) -> Translator:
    overrides = decode_overrides(command.decode)
    loaded = load_engine(command, overrides)
    # stdout carries translations only: what they were decoded with goes to stderr.
    print(describe_decode(loaded.translator.decode, overrides), file=sys.stderr)
    return loaded.translator


def translate_lines(command: TranslateCommand, lines: list[str]) -> list[str]:
    return load(command).translate(lines)


def prompt(command: TranslateCommand) -> None:
    """Translate each line typed until Ctrl-D or Ctrl-C (the prompt on stderr)."""
    translator = load(command)
    print("type German, Enter translates; Ctrl-D ends", file=sys.stderr)
    try:
        while True:
            print("> ", end="", file=sys.stderr, flush=True)
            line = sys.stdin.readline()
            if not line:  # Ctrl-D
                break
            print(translator.translate([line.rstrip("\r\n")])[0], flush=True)
    except KeyboardInterrupt:
        pass
    print(file=sys.stderr)  # the shell's prompt starts a line of its own


@hydra.main(version_base="1.3", config_path="../conf", config_name="translate")
@exit_on_user_error
def main(cfg: DictConfig) -> None:
    command = command_settings(TranslateCommand, cfg)
    if command.input is None and command.output is None and sys.stdin and sys.stdin.isatty():
        prompt(command)
        return
    source = command.input
    # A bad output fails now, not after all the decoding; it never replaces what is read.
    # Standard input too: `< out.en` with output=out.en would replace what is being read.
    inputs = [p for p in (source or STDIN, command.checkpoint) if p]
    output = check_output_file(command.output or STDOUT, "output", "translation", inputs)
    # One output line per input line: both split on \n (and \r\n) only.
    lines = read_input_lines(Path(source)) if source else decode_input(sys.stdin.buffer.read())
    output.write("".join(line + "\n" for line in translate_lines(command, lines)))


if __name__ == "__main__":
    run_command(main, "translate")
