"""``python -m translate.ablation report|speed SWEEP_DIR [options]``: the heads study's commands.

- ``report``: write the heads-ablation report of a sweep (:mod:`translate.ablation.report`);
- ``speed``: time a sweep's models side by side (:mod:`translate.ablation.speed`).

``python -m translate.ablation COMMAND --help`` lists a command's options.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from translate.cli import run_plain_command
from translate.errors import EXIT_USER_ERROR

COMMANDS = {"report": "translate.ablation.report", "speed": "translate.ablation.speed"}
USAGE = "usage: python -m translate.ablation {report,speed} SWEEP_DIR [options]"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv[0]`` with the rest of ``argv`` (default: the command line)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["-h"], ["--help"]):
        print(f"{USAGE}\n\n{__doc__.split(chr(10) * 2, 1)[1].strip()}")
        return 0
    if not argv or argv[0] not in COMMANDS:
        got = f"unknown command {argv[0]!r}" if argv else "no command"
        print(f"{USAGE}\nerror: {got}: choose report or speed", file=sys.stderr)
        return EXIT_USER_ERROR
    command = importlib.import_module(COMMANDS[argv[0]])
    return command.main(argv[1:], prog=f"python -m translate.ablation {argv[0]}")


if __name__ == "__main__":
    run_plain_command(main)
