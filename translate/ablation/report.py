"""Write the heads-ablation report of a sweep: ``python -m translate.ablation report <sweep_dir>``.

``ablation.csv``, ``.md`` and ``.png`` from the jobs' files alone (docs/ablation.md)."""

from __future__ import annotations

import argparse
import csv
import io
import logging
import math
import os
import shlex
import sys
from pathlib import Path

import yaml

from translate.ablation import results
from translate.ablation.figure import ablation_figure
from translate.ablation.results import BASELINE_HEADS, Report
from translate.ablation.stats import LEVEL, detected, heads_key, p_column
from translate.ablation.stats import smallest_permutation_p as lowest_p
from translate.errors import EXIT_USER_ERROR, UserError, counted, debug_enabled, plain_text
from translate.io import WriteFailed, check, write
from translate.training.rundir import parse_overrides

log = logging.getLogger(__name__)
FIGURE = "ablation.png"
REPORT = "ablation report"  # what the one door for writes (translate.io) knows the files as
DOC = 'docs/ablation.md, "The report" and "Speed, side by side"'
# The job lists of earlier sweeps into the same dir, set aside by a later one (translate.sweeps).
EARLIER_SWEEPS = "multirun.*.yaml"


def expected_jobs(sweep_dir: Path) -> tuple[list[str], list[dict[str, str]]]:
    """``(swept keys, one {key: value} per job)`` of the sweeps Hydra's basic sweeper recorded
    in ``multirun.yaml`` and :data:`EARLIER_SWEEPS`; empty without them."""
    if not (sweep_dir / "multirun.yaml").is_file():
        return [], []
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    combos = []
    for path in sorted(sweep_dir.glob(EARLIER_SWEEPS)) + [sweep_dir / "multirun.yaml"]:
        hydra_cfg = (yaml.safe_load(path.read_text()) or {}).get("hydra", {})
        sweeper = hydra_cfg.get("sweeper", {})
        if "BasicSweeper" not in str(sweeper.get("_target_", "BasicSweeper")):
            continue
        arguments = [f"{k}={v}" for k, v in (sweeper.get("params") or {}).items()]
        arguments += [str(o) for o in hydra_cfg.get("overrides", {}).get("task", [])]
        parsed = OverridesParser.create().parse_overrides(arguments)
        jobs = map(parse_overrides, BasicSweeper.split_arguments(parsed, None)[0])
        combos += [c for c in jobs if c not in combos]
    keys = [k for k in (combos[0] if combos else {}) if len({c.get(k) for c in combos}) > 1]
    return keys, [{k: c.get(k) for k in keys} for c in combos]


def missing_jobs(report: Report) -> list[str]:
    keys, expected = expected_jobs(report.sweep_dir)

    def label(overrides: dict[str, str]) -> str:
        return ",".join(f"{k}={overrides.get(k, '?')}" for k in keys)

    found = {label(j.overrides) for j in report.jobs}
    # Without swept keys (a one-job "sweep") the sweep defines nothing beyond the dir it made.
    return [lbl for lbl in map(label, expected) if lbl not in found] if keys else []


def write_report(
    sweep_dir: str | Path, baseline_heads: int = BASELINE_HEADS, bootstrap_samples: int = 1000
) -> Report:
    report = results.build_report(sweep_dir, baseline_heads, bootstrap_samples)
    report.missing = missing_jobs(report)
    write_files(report)
    if not report.params_equal:
        log.warning("\n%s\nWARNING: %s\n%s", "!" * 78, report.params_message, "!" * 78)
    for w in report.warnings[0 if report.params_equal else 1 :]:
        log.warning("ablation report: %s", w)
    counts = len(report.rows), len(report.failed), len(report.missing)
    md = report.sweep_dir / "ablation.md"
    log.info("ablation report: %d rows, %d failed, %d missing -> %s", *counts, md)
    return report


def to_csv(report: Report) -> str:
    def cell(v) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return ""
        return f"{v:.6g}" if isinstance(v, float) else str(v)

    columns = list(dict.fromkeys(k for row in report.rows for k in row))
    columns = [c for c in columns if report.kv_axis or c != "kv_heads"]
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(
        [columns, *([cell(row.get(c)) for c in columns] for row in report.rows)]
    )
    return out.getvalue()


def _fmt(v, digits: int = 2, std=None) -> str:
    if v is None or isinstance(v, str):
        return v or "-"
    text = f"{v:,.{digits}f}"
    return f"{text} ± {std:.{digits}f}" if std is not None else text


def _p(v, star: bool = True) -> str:
    if v is None or isinstance(v, str):
        return v or "-"
    return f"{v:.3f}" + (" *" if star and v < LEVEL else "")


def _baseline(report: Report, heads: int | None = None) -> str:
    heads = report.baseline_heads if heads is None else heads
    return f"{heads}-head multi-head (kv_heads={heads})" if report.kv_axis else f"{heads}-head"


def _summary_lines(report: Report) -> list[str]:
    """Title, warnings, what ran where, the parameter check and why this baseline."""
    done = [j for j in report.jobs if j.completed]
    first = done[0].results if done else {}
    lines = [f"# Heads ablation: `{report.sweep_dir.name}`", ""]
    lines += [line for w in report.warnings for line in (f"> **WARNING: {w}**", "")]
    ran = {results.job_provenance(j.results) for j in done}  # mixed ones: a warning above says so
    code, where = next(iter(ran)) if len(ran) == 1 else (None, None)
    lines += [
        f"{len(done)} of {len(report.jobs) + len(report.missing)} jobs finished; seeds "
        f"{', '.join(map(str, report.seeds)) or '-'}; {first.get('device', '?')}, precision "
        f"{first.get('precision', '?')}, test set {first.get('test_split', '?')}, beam "
        f"{first.get('beam_size', '?')}." + (f" Code {code}, on {where}." if code else ""),
        "",
        f"**Parameters:** {report.params_message}.",
        "",
    ]
    asked, chosen = report.asked_baseline, report.baseline_heads
    if chosen == asked or not report.rows:
        return lines
    said = f"**Baseline:** no finished {_baseline(report, asked)} run"
    if chosen is None:
        return lines + [said + " and no other multi-head row (kv_heads = heads): no p-values.", ""]
    return lines + [
        f"{said}: the {_baseline(report)} row, the largest head count the sweep has, is the "
        f"baseline, and the p-value columns are named for it (`{p_column(chosen, 'welch')}`); "
        "`python -m translate.ablation report --baseline-heads N` chooses another.",
        "",
    ]


def _verdict_lines(report: Report) -> list[str]:
    """Each row against the baseline row as the seed-level tests find it, and no further (the
    paired bootstrap measures test-set sampling only)."""
    b = report.baseline_heads
    base = next((r for r in report.rows if (r["heads"], r["kv_heads"]) == (b, b)), None)
    others = [r for r in report.rows if r is not base and r["bleu_mean"] is not None]
    if base is None or base["bleu_mean"] is None or not others:
        return []
    lines = [f"**Against the {_baseline(report)} row, across seeds (level {LEVEL}):**", ""]
    for r in others:
        label = f"{r['heads']} head" + "s" * (r["heads"] != 1)
        label += f", {r['kv_heads']} kv heads" * report.kv_axis
        lines.append(f"- {label}: {_verdict(r, base, b)}")
    return lines + [""]


def _verdict(r: dict, base: dict, baseline: int) -> str:
    diff = r["bleu_mean"] - base["bleu_mean"]
    welch, perm = r[p_column(baseline, "welch")], r[p_column(baseline, "permutation")]
    text = f"{diff:+.2f} BLEU ({r['n']} against {base['n']} seeds)"
    found = detected(welch, perm)
    if found is None:
        return text + ": no seed-level test"
    ps = f"Welch p = {_p(welch, False)}, permutation p = {_p(perm, False)}"
    if found:
        return text + f", {'higher' if diff > 0 else 'lower'} across seeds ({ps})"
    if (floor := lowest_p(r["n"], base["n"])) >= LEVEL:
        ps += f"; with these seeds the permutation test cannot go below p = {floor:.3f}"
    return text + f": no detectable difference across seeds ({ps})"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(cells) + " |" for cells in rows]


def _table_lines(report: Report) -> list[str]:
    b, speed = report.baseline_heads, results.shown_metrics(report.speed) if report.speed else {}
    header = ["heads", *["kv heads"] * report.kv_axis, "d_k", "params", "BLEU", "BLEU 95% CI"]
    header += ["greedy BLEU", "chrF", "dev BLEU", *(label for label, _ in speed.values())]
    header += ["speed round spread"] * bool(speed)
    header += ["updates", "entropy enc / dec-self / cross", "degenerate heads"]
    if report.align:
        header += [f"best head AER ({report.align['reference']['kind']})"]
    p = [f"p vs {b} heads, seeds (Welch / permutation)", f"p vs {b} heads, bootstrap"]
    header += p if b is not None else []
    return _table(header, [_row_cells(r, report, speed) for r in report.rows])


def _row_cells(r: dict, report: Report, speed: dict) -> list[str]:
    from translate.nn.model import HEAD_MASK_KEYS  # torch: here, where the rows exist

    low, high, degenerate = r["bleu_ci95_low"], r["bleu_ci95_high"], r["degenerate_heads"]
    cells = [str(r["heads"]), *[str(r["kv_heads"])] * report.kv_axis, str(r["d_k"])]
    cells += [f"{r['params']:,}" if isinstance(r["params"], int) else str(r["params"])]
    cells += [_fmt(r["bleu_mean"], std=r["bleu_std"])]
    cells += ["-" if low is None else f"{low:.2f} – {high:.2f}"]
    cells += [_fmt(r[f"{m}_mean"], std=r[f"{m}_std"]) for m in ("bleu_greedy", "chrf", "dev_bleu")]
    base = report.speed["baseline_heads"] if speed else None
    cells += [results.speed_cell(r, m, digits, base) for m, (_, digits) in speed.items()]
    cells += [results.spread_cell(r)] * bool(speed)
    cells += [_fmt(r["steps_mean"], 0)]
    cells += [" / ".join(_fmt(r[f"entropy_{k}"]) for k in HEAD_MASK_KEYS)]
    if degenerate is not None:  # a mean over seeds of whole counts: 0, 1.5
        degenerate = f"{round(degenerate, 1):g} of {r['total_heads']:.0f}"
    cells += [_fmt(degenerate)]
    if report.align:
        cells += [_fmt(r["best_aer_mean"], 3, r["best_aer_std"])]
    if (b := report.baseline_heads) is None:
        return cells
    seeds = " / ".join(_p(r[p_column(b, test)]) for test in ("welch", "permutation"))
    seeds = "baseline" if r[p_column(b, "welch")] == "baseline" else seeds
    return [*cells, seeds, _p(r[p_column(b)], star=False)]


def _speed_note(report: Report) -> str:
    speed, command = report.speed, results.SPEED_COMMAND.replace("SWEEP_DIR", str(report.sweep_dir))
    if speed is None:
        return f"No speed columns: to time all jobs side by side, `{command}`, then report again."
    m, s, base = speed.get("machine", {}), speed.get("settings", {}), speed["baseline_heads"]
    row = f"{_baseline(report, base)} row"
    ratios = f"(x) = ratio to the {row}"
    if base is None:
        ratios = "no ratios, since no row is multi-head"
    elif not any(heads_key(r) == (base, base) for r in speed["heads"]):  # an older file's
        ratios = f"no ratios: the file has no {row} (`{command}` again adds them)"
    text = (
        f"Speed: from `{results.SPEED_FILE}`, {m.get('device_name', '?')} "
        f"({counted(m.get('threads'), 'thread')}, {m.get('date', '?')}, precision "
        f"{s.get('precision', '?')}, medians of {s.get('rounds', '?')} rounds); {ratios}."
    )
    if set(results.CT2_METRICS) & set(results.shown_metrics(speed)):
        text += f" CT2: CTranslate2 {m.get('ctranslate2') or '?'} (float32)."
    return text


def _align_note(report: Report) -> str:
    if (data := report.align) is None:
        command = results.ALIGN_COMMAND.replace("SWEEP_DIR", str(report.sweep_dir))
        return f"No AER column: to measure each model's alignment heads, `{command}`."
    ref = data["reference"]
    return (
        f"Best head AER: from `{results.ALIGN_FILE}`, the first {data['sentences']} pairs of "
        f"{ref['split']} against **{ref['kind']}** alignments ({ref['origin']})."
    )


def _job_lines(report: Report) -> list[str]:
    kv = ["kv heads"] * report.kv_axis
    header = ["job", "heads", *kv, "seed", "status", "test BLEU", "dev BLEU", "commit", "machine"]
    rows = []
    for j in report.jobs:
        r, o = j.results or {}, j.overrides
        status = "completed" if j.completed else f"failed: {j.error}".replace("|", "\\|")
        heads = r.get("heads", o.get("heads", "-"))
        # kv_heads defaults to heads (in the config, and in results.json from before GQA).
        kv_cell = [str(r.get("kv_heads") or o.get("kv_heads") or heads)] if kv else []
        cells = [f"`{j.name}`", str(heads), *kv_cell, str(r.get("seed", o.get("seed", "-")))]
        cells += [status, _fmt(r.get("bleu")), _fmt(results.scored_dev_bleu(r))]
        rows.append(cells + [_fmt(value) for value in results.job_provenance(r)])
    lines = ["", "## Jobs", "", *_table(header, rows)]
    if report.failed or report.missing:
        lines += ["", "## Failed or missing jobs", ""]
        lines += [f"- `{j.name}`: failed: {j.error}" for j in report.failed]
        lines += [f"- `{m}`: not run (yet): no job dir" for m in report.missing]
    return lines


def to_markdown(report: Report) -> str:
    # Below the table, the numbers it rests on; what they mean is DOC's.
    notes = [f"What the columns, the tests and these notes mean: {DOC}."]
    notes += [_speed_note(report), _align_note(report)]
    notes += [f"BLEU signature: `{report.bootstrap_signature}`"] * bool(report.bootstrap_signature)
    lines = _summary_lines(report) + _verdict_lines(report) + _table_lines(report)
    lines += [line for note in notes for line in ("", note)]
    return "\n".join(lines + _job_lines(report)) + "\n"


def _figure_png(report: Report) -> bytes | None:
    """The figure's PNG, or None with a warning saying why."""
    from translate.analysis.figures import pyplot

    try:
        fig = ablation_figure(report)
        if fig is not None:
            png = io.BytesIO()
            fig.savefig(png, format="png", dpi=100)
            pyplot().close(fig)
            return png.getvalue()
        reason = "no finished job has anything to plot"
    except Exception as err:  # a plotting failure must not cost the .md and .csv
        log.exception("could not draw %s", report.sweep_dir / FIGURE)
        reason = f"drawing it failed ({type(err).__name__}: {err})"
    report.warnings.append(f"{FIGURE} not written: {reason}; the tables below are complete")
    return None


def write_files(report: Report) -> None:
    """The report's files, each atomically (a sweep's parallel jobs may report at once), all
    checked before any is replaced."""
    out = report.sweep_dir
    png = _figure_png(report)  # first: its warning belongs in the .md
    files = {out / "ablation.csv": to_csv(report), out / "ablation.md": to_markdown(report)}
    files |= {out / FIGURE: png} if png is not None else {}
    for path in files:
        check(path, REPORT)
    report.written = []
    for path, data in files.items():
        try:
            write(path, data, REPORT)
        except WriteFailed as err:
            if not report.written:
                raise  # nothing was replaced, as its message says
            done = " and ".join(p.name for p in report.written)
            command = f"python -m translate.ablation report {shlex.quote(str(out))}"
            raise WriteFailed(
                f"could not write {path} ({os.strerror(err.errno)}) after {done} had been "
                f"replaced by the new report; {path.name} is still the earlier one (if any); "
                f"free some space or fix the permissions, then run {command}",
                err.errno,
            ) from None
        report.written.append(path)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=plain_text(__doc__.splitlines()[0]))
    parser.add_argument("sweep_dir", help="a multirun dir, e.g. outputs/multirun/<date_time>")
    parser.add_argument(
        "--baseline-heads",
        type=int,
        default=BASELINE_HEADS,
        help="head count the p-values and the summary compare against (default %(default)s); "
        "a sweep without that row compares with its largest head count, and the report says so",
    )
    parser.add_argument("--bootstrap-samples", type=int, default=1000, help="default %(default)s")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        results.at_least_one(
            [
                ("--baseline-heads", args.baseline_heads),
                ("--bootstrap-samples", args.bootstrap_samples),
            ]
        )
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
