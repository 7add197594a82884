"""``python -m translate.ablation report|speed|align SWEEP_DIR [options]``: each command is
its module's ``main``."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from translate.cli import run_plain_command
from translate.errors import EXIT_USER_ERROR

USAGE = "usage: python -m translate.ablation {report,speed,align} SWEEP_DIR [options]"
HELP = f"""{USAGE}

The heads study's commands, on a sweep's folder (python -m translate.train -m heads=1,4,8,16):
  report   write the sweep's report (ablation.md, .csv, .png: quality and size per heads)
  speed    time the sweep's models side by side
  align    every model's alignment heads: each cross head's AER (docs/alignment.md)

python -m translate.ablation COMMAND --help lists a command's options.
Example: python -m translate.ablation report outputs/multirun/<time>"""


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["-h"], ["--help"]):
        print(HELP)
        return 0
    if not argv or argv[0] not in ("report", "speed", "align"):
        got = f"unknown command {argv[0]!r}" if argv else "no command"
        print(f"{USAGE}\nerror: {got}: choose report, speed or align", file=sys.stderr)
        return EXIT_USER_ERROR
    command = importlib.import_module(f"translate.ablation.{argv[0]}")
    return command.main(argv[1:], prog=f"python -m translate.ablation {argv[0]}")


if __name__ == "__main__":
    run_plain_command(main)
