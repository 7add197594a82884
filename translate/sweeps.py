"""Hydra's side of the heads-ablation report: the callback and the sweep's job list.

:class:`AblationReportCallback` (registered in ``conf/hydra/default.yaml``) writes the report
after every job and when the multirun ends: Hydra's basic sweeper raises after the sweep if any
job failed, which skips ``on_multirun_end``, so the per-job report is the one that survives.
A job that failed on a :class:`~translate.errors.UserError` is recorded (``error.txt``) and
counted as done, so the sweep reaches its end, which names every failed job in one line and
exits 2 instead of Hydra's traceback of the first. ``python -m translate.ablation report
<sweep_dir>`` writes the report on demand; both call :func:`write_report`. The rows come from
:mod:`translate.analysis.ablation`, the files from :mod:`translate.analysis.ablation_files`. The
callback also holds the sweep dir's lock from the start of the multirun to its end, so a second
sweep into the same dir stops before it writes anything, and it writes a job's ``error.txt``
only while holding that job dir's lock.

Entry-point layer: like ``cli.py`` it may import Hydra; the library packages never do. Hydra
imports this module when it starts (for the callback): keep heavy imports (matplotlib,
sacreBLEU, torch) out of the module level here and in the modules it imports.
"""

from __future__ import annotations

import atexit
import logging
import os
from collections.abc import Callable
from pathlib import Path

import yaml
from hydra.experimental.callback import Callback
from omegaconf import OmegaConf

from translate import io
from translate.analysis.ablation import BASELINE_HEADS, Report, build_report, parse_overrides
from translate.analysis.ablation_files import write_files
from translate.cli import fail
from translate.errors import UserError, debug_enabled
from translate.record import stamp
from translate.training.rundir import RunLock

log = logging.getLogger(__name__)
# The job lists of earlier sweeps into the same dir, set aside by a later one.
EARLIER_SWEEPS = "multirun.*.yaml"


def expected_jobs(sweep_dir: Path) -> tuple[list[str], list[dict[str, str]]]:
    """``(swept_keys, one {key: value} per job)`` the sweeps in ``multirun.yaml`` define, and in
    the earlier ones a later sweep into the same dir set aside (``multirun.<time>.yaml``).

    Expands ``hydra.sweeper.params`` and the command-line overrides as Hydra's basic sweeper
    does. Empty when there is no ``multirun.yaml`` or another sweeper ran the sweep.
    """
    sweep_dir = Path(sweep_dir)
    if not (sweep_dir / "multirun.yaml").is_file():
        return [], []
    combos = []
    for path in sorted(sweep_dir.glob(EARLIER_SWEEPS)) + [sweep_dir / "multirun.yaml"]:
        combos += [c for c in _combos(path) if c not in combos]
    keys = [k for k in (combos[0] if combos else {}) if len({c.get(k) for c in combos}) > 1]
    return keys, [{k: c.get(k) for k in keys} for c in combos]


def _combos(path: Path) -> list[dict[str, str]]:
    """Every job of one sweep's record, as ``{key: value}`` of all its overrides."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    hydra_cfg = (yaml.safe_load(path.read_text()) or {}).get("hydra", {})
    if "BasicSweeper" not in str(hydra_cfg.get("sweeper", {}).get("_target_", "BasicSweeper")):
        return []
    params = hydra_cfg.get("sweeper", {}).get("params") or {}
    arguments = [f"{k}={v}" for k, v in params.items()]
    arguments += [str(o) for o in hydra_cfg.get("overrides", {}).get("task", [])]
    parsed = OverridesParser.create().parse_overrides(arguments)
    return [parse_overrides(c) for c in BasicSweeper.split_arguments(parsed, None)[0]]


def _keep_earlier_sweep(sweep_dir: Path, config) -> None:
    """Hydra writes ``multirun.yaml`` over an earlier sweep's in the same dir: where that one
    swept other jobs (a subset re-run, other values), it is set aside first, so the sweep's
    whole list of jobs stays, and the report counts missing jobs against all of them."""
    earlier = sweep_dir / "multirun.yaml"
    if not earlier.is_file():
        return
    hydra_cfg = (yaml.safe_load(earlier.read_text()) or {}).get("hydra", {})
    same = hydra_cfg.get("overrides", {}).get("task", []) == list(config.hydra.overrides.task)
    params = config.hydra.sweeper.get("params")
    params = OmegaConf.to_container(params) if params is not None else {}
    if same and (hydra_cfg.get("sweeper", {}).get("params") or {}) == (params or {}):
        return
    aside = sweep_dir / f"multirun.{stamp()}.yaml"
    io.move(earlier, aside)
    log.info("kept the earlier sweep's job list of %s as %s", sweep_dir, aside.name)


def write_report(
    sweep_dir: str | Path, baseline_heads: int = BASELINE_HEADS, bootstrap_samples: int = 1000
) -> Report:
    """Build the report and write ``ablation.csv``, ``ablation.md`` and ``ablation.png``."""
    report = build_report(sweep_dir, baseline_heads, bootstrap_samples, expected_jobs=expected_jobs)
    write_files(report, bootstrap_samples)
    if not report.params_equal:
        log.warning("\n%s\nWARNING: %s\n%s", "!" * 78, report.params_message, "!" * 78)
    for w in report.warnings[0 if report.params_equal else 1 :]:
        log.warning("ablation report: %s", w)
    log.info(
        "ablation report: %d rows, %d failed, %d missing -> %s",
        len(report.rows),
        len(report.failed),
        len(report.missing),
        report.sweep_dir / "ablation.md",
    )
    return report


def _in_own_job_dir(job_dir: Path, change: Callable[[Path], None]) -> str | None:
    """``change(job_dir)`` while holding the job dir's lock. When another process holds it (a
    run resumed into it by hand), its files are not the sweep's: nothing is changed, and the
    reason is returned."""
    try:
        lock = RunLock(job_dir).acquire()
    except UserError as err:
        return str(err)
    try:
        change(job_dir)
    finally:
        lock.release()
    return None


def _write_error(job_dir: Path, error: BaseException) -> None:
    try:  # read by translate.analysis.ablation as the job's failure reason
        io.write(job_dir / "error.txt", f"{type(error).__name__}: {error}\n", "sweep job error")
    except OSError:
        log.exception("could not write %s", job_dir / "error.txt")


class AblationReportCallback(Callback):
    """Holds the sweep dir for the multirun, and writes the ablation report into it after every
    job and at the end.

    Only for multiruns of the configs named in ``config_names`` (the training app), so the
    evaluate and analyze commands, which share ``hydra/default.yaml``, are left alone.
    """

    def __init__(
        self,
        config_names: list[str] | tuple[str, ...] = ("train",),
        baseline_heads: int = BASELINE_HEADS,
        bootstrap_samples: int = 1000,
    ) -> None:
        self.config_names = set(config_names)
        self.baseline_heads = int(baseline_heads)
        self.bootstrap_samples = int(bootstrap_samples)
        self._lock: RunLock | None = None
        # This multirun's failed jobs (dir: reason): one refused at its start keeps an earlier
        # run's results, which the report lists as done, yet this sweep did not run it.
        self._failed: dict[Path, str] = {}

    def _applies(self, config) -> bool:
        hydra_cfg = config.hydra
        mode = getattr(hydra_cfg.mode, "name", hydra_cfg.mode)  # RunMode.MULTIRUN or its name
        return mode == "MULTIRUN" and hydra_cfg.job.config_name in self.config_names

    def _write(self, config, in_job: bool) -> Report | None:
        hydra_cfg = config.hydra
        if in_job:
            # The job's own dir minus its subdir: a launcher that runs jobs in other processes
            # (submitit) may resolve ${now:...} in sweep.dir anew there.
            output_dir = Path(str(hydra_cfg.runtime.output_dir))
            depth = len(Path(str(hydra_cfg.sweep.subdir)).parts)
            sweep_dir = output_dir.parents[depth - 1] if depth else output_dir
        else:
            sweep_dir = self._sweep_dir(config)
        try:
            return write_report(sweep_dir, self.baseline_heads, self.bootstrap_samples)
        except Exception:  # the report must never take a job or the sweep down with it
            log.exception("could not write the ablation report for %s", sweep_dir)
            return None

    @staticmethod
    def _sweep_dir(config) -> Path:
        """The sweep dir as the launching process names it: relative to where it started."""
        return Path(str(config.hydra.runtime.cwd)) / str(config.hydra.sweep.dir)

    def on_multirun_start(self, config, **kwargs) -> None:
        """Lock the sweep dir before Hydra writes there (multirun.yaml, the jobs): a second
        sweep into it stops here instead of running into the first one's jobs."""
        if not self._applies(config):
            return
        try:
            self._lock = RunLock(self._sweep_dir(config), "hydra.sweep.dir").acquire()
        except UserError as err:
            fail(str(err))  # not raised: Hydra turns a callback's exception into a warning
        atexit.register(self._lock.release)  # Hydra skips on_multirun_end after a failed job
        _keep_earlier_sweep(self._sweep_dir(config), config)

    def on_job_start(self, config, **kwargs) -> None:
        if self._applies(config):  # a re-run job (trainer.resume=true) drops its last failure
            job_dir = Path(str(config.hydra.runtime.output_dir))
            _in_own_job_dir(job_dir, lambda d: (d / "error.txt").unlink(missing_ok=True))

    def on_job_end(self, config, job_return, **kwargs) -> None:
        if not self._applies(config):
            return
        from hydra.core.utils import JobStatus

        if job_return.status == JobStatus.FAILED:
            # job_return.return_value re-raises the job's exception; the stored one is enough.
            error = job_return._return_value
            job_dir = Path(str(config.hydra.runtime.output_dir))
            self._failed[job_dir.resolve()] = f"{type(error).__name__}: {error}"
            refused = _in_own_job_dir(job_dir, lambda d: _write_error(d, error))
            if refused:
                log.warning("no error.txt written into %s: %s", job_dir, refused)
            if isinstance(error, UserError) and not debug_enabled():
                # Recorded (error.txt, the job's log): the sweep's end names it in one line.
                job_return.status = JobStatus.COMPLETED
        self._write(config, in_job=True)

    def on_multirun_end(self, config, **kwargs) -> None:
        if self._applies(config):
            report = self._write(config, in_job=False)
            if self._lock is not None:
                self._lock.release()
            closing = failed_jobs(report, self._failed) if report is not None else None
            if closing is not None:
                fail(closing)


def failed_jobs(report: Report, failed_here: dict[Path, str] | None = None) -> str | None:
    """The sweep's last line when jobs failed, each by name with its reason: the report's,
    and ``failed_here`` (job dir: reason), those this multirun saw fail, also where an earlier
    run's results are there (a job refused at its start); None when none failed."""
    here = dict(failed_here or {})
    failed = []
    for job in report.jobs:
        why = here.pop(job.path.resolve(), None)
        if why is not None or not job.completed:
            failed.append((job.name, why or job.error or "failed"))
    # Then the jobs that left nothing the report finds (a dir another process held).
    failed += [(os.path.relpath(d, report.sweep_dir.resolve()), why) for d, why in here.items()]
    if not failed:
        return None
    reasons = " | ".join(f"{name}: {why.removeprefix('UserError: ')}" for name, why in failed)
    return (
        f"{len(failed)} of {len(report.jobs) + len(here)} sweep jobs failed ({reasons}); the "
        f"others are in {report.sweep_dir / 'ablation.md'}"
    )
