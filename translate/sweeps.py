""":class:`AblationReportCallback` (``conf/hydra/default.yaml``) writes the heads-ablation
report as a sweep runs. Hydra imports it when it starts: no matplotlib, sacreBLEU or torch at
module level, here or in the modules it imports."""

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
from translate.ablation.report import write_report
from translate.ablation.results import BASELINE_HEADS, Report
from translate.cli import fail
from translate.errors import UserError, debug_enabled
from translate.record import stamp
from translate.training.rundir import RunLock

log = logging.getLogger(__name__)


def _keep_earlier_sweep(sweep_dir: Path, config) -> None:
    """Hydra writes ``multirun.yaml`` over an earlier sweep's in the same dir: one that swept
    other jobs is set aside first, so the report counts missing jobs against all of them."""
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


def _in_own_job_dir(job_dir: Path, change: Callable[[Path], None]) -> str | None:
    """``change(job_dir)`` under its lock, or why not (a run resumed into it by hand holds it)."""
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
    try:  # read by translate.ablation.results as the job's failure reason
        io.write(job_dir / "error.txt", f"{type(error).__name__}: {error}\n", "sweep job error")
    except (OSError, UserError) as err:  # io.write's own refusals (a full disk) are UserErrors
        # One line: the job's failure itself is in its log and in the sweep's closing line.
        log.warning("could not write %s: %s", job_dir / "error.txt", err)


class AblationReportCallback(Callback):
    """Holds the sweep dir's lock and writes the report after every job and at the end (Hydra's
    basic sweeper skips ``on_multirun_end`` after a failed job). A job failed on a UserError is
    recorded (``error.txt``) and counted as done, so the sweep's end names every failed job in
    one line and exits 2. Only for ``config_names``: analyze shares ``hydra/default.yaml``."""

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

    def _write(self, sweep_dir: Path) -> Report | None:
        try:
            return write_report(sweep_dir, self.baseline_heads, self.bootstrap_samples)
        except Exception:  # the report must never take a job or the sweep down with it
            log.exception("could not write the ablation report for %s", sweep_dir)
            return None

    @staticmethod
    def _sweep_dir(config) -> Path:  # as the launching process names it
        return Path(str(config.hydra.runtime.cwd)) / str(config.hydra.sweep.dir)

    def on_multirun_start(self, config, **kwargs) -> None:
        # Locked before Hydra writes there: a second sweep into it stops here.
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

        job_dir = Path(str(config.hydra.runtime.output_dir))
        if job_return.status == JobStatus.FAILED:
            # job_return.return_value re-raises the job's exception; the stored one is enough.
            error = job_return._return_value
            self._failed[job_dir.resolve()] = f"{type(error).__name__}: {error}"
            if refused := _in_own_job_dir(job_dir, lambda d: _write_error(d, error)):
                log.warning("no error.txt written into %s: %s", job_dir, refused)
            if isinstance(error, UserError) and not debug_enabled():
                # Recorded (error.txt, the job's log): the sweep's end names it in one line.
                job_return.status = JobStatus.COMPLETED
        # The job's own dir minus its subdir: a launcher that runs jobs in other processes
        # (submitit) may resolve ${now:...} in sweep.dir anew there.
        depth = len(Path(str(config.hydra.sweep.subdir)).parts)
        self._write(job_dir.parents[depth - 1] if depth else job_dir)

    def on_multirun_end(self, config, **kwargs) -> None:
        if self._applies(config):
            report = self._write(self._sweep_dir(config))
            if self._lock is not None:
                self._lock.release()
            if report is not None and (closing := failed_jobs(report, self._failed)):
                fail(closing)


def failed_jobs(report: Report, failed_here: dict[Path, str] | None = None) -> str | None:
    """The sweep's last line naming each failed job and why, or None: the report's, and those
    this multirun saw fail (``failed_here``, dir: reason) over an earlier run's results."""
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
