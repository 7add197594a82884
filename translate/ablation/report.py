"""Write the heads-ablation report of a sweep: ``python -m translate.ablation report <sweep_dir>``.

The same code the Hydra callback runs after every job of ``python -m translate.train -m ...``
(``translate.sweeps.write_report``): ``ablation.csv``, ``ablation.md`` and ``ablation.png``
in the sweep dir (the figure where it has something to plot, and never at the cost of the
tables), from the jobs' ``results.json`` and test hypotheses alone: run again, it
re-creates them (how docs/ablation-multi30k.{csv,md,png} are made from the study's sweep dir).
Exits 1 (after writing the report) when the runs' parameter counts differ, 2 with a one-line
error, writing nothing, when the sweep dir does not exist or holds no sweep job (a single
run's dir, an empty folder), or on another user error.
"""

from __future__ import annotations

import argparse
import logging
import sys

from translate.analysis.ablation import BASELINE_HEADS, check_sweep_dir
from translate.errors import EXIT_USER_ERROR, UserError, debug_enabled
from translate.sweeps import write_report


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", help="a multirun dir, e.g. outputs/multirun/<date_time>")
    parser.add_argument(
        "--baseline-heads",
        type=int,
        default=BASELINE_HEADS,
        help="head count the p-values and the summary compare against (default %(default)s); "
        "a sweep without that row compares with its largest head count, and the report says so",
    )
    parser.add_argument(
        "--bootstrap-samples",
        type=int,
        default=1000,
        help="paired-bootstrap resamples (default %(default)s)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        check_sweep_dir(args.sweep_dir)
        report = write_report(args.sweep_dir, args.baseline_heads, args.bootstrap_samples)
    except UserError as err:
        if debug_enabled():
            raise
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    print((report.sweep_dir / "ablation.md").read_text(encoding="utf-8"))
    for path in report.written:
        print(f"wrote {path}")
    if report.failed or report.missing:
        print(f"{len(report.failed)} failed and {len(report.missing)} missing jobs (listed above)")
    if not report.params_equal:
        print(f"\nWARNING: {report.params_message}", file=sys.stderr)
        return 1
    return 0
