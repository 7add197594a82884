"""Train a Transformer: ``python -m translate.train heads=8`` (see README.md).

``train(cfg) -> dict`` is the whole job as a plain function (tests call it through Hydra's
``compose``); ``main`` wraps it for the command line. The training machinery (and torch) is
imported once the settings are read, so that ``--help`` and a refused setting answer in half a
second (tests/test_architecture.py).
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
from typing import TYPE_CHECKING

import hydra
from omegaconf import DictConfig

from translate.cli import exit_on_user_error, run_command, sweep_job, task_overrides
from translate.errors import UserError, override_word
from translate.io import WriteFailed, mapped_write_errors
from translate.record import accept as accept_record
from translate.settings import TrainSettings, train_settings
from translate.training.signals import Stopped, StopRequest

if TYPE_CHECKING:
    from translate.training.run import Run

log = logging.getLogger(__name__)

CUT_SHORT = 0.9  # a run that ends on max_minutes below this share of max_steps says so


def train(cfg: DictConfig) -> dict:
    """Train, then score the best checkpoint on the test split; returns ``results.json``'s dict.
    Resuming a finished run only reports its results."""
    _refuse_several_processes()
    settings = train_settings(cfg, sweep_job())
    from translate.training.resume import finished_results

    done = finished_results(settings)
    if done is not None:
        log.info(
            "%s: completed, skipped (step %d, test BLEU %.2f; %s)",
            settings.sweep_job or settings.run_dir,
            done["steps"],
            done["bleu"],
            f"{settings.run_dir}/results.json",
        )
        return done
    return _train(settings)


def _refuse_several_processes() -> None:
    """Under ``torchrun`` each of ``WORLD_SIZE`` processes would train the same run alone."""
    world = os.environ.get("WORLD_SIZE", "1")
    if world.isdigit() and int(world) > 1:
        raise UserError(
            f"multi-process training is not supported (WORLD_SIZE={world}, set by torchrun); "
            "start python -m translate.train once per GPU, or sweep with -m "
            "hydra/launcher=slurm, which runs one job per GPU (docs/scale_out.md)"
        )


def _train(settings: TrainSettings) -> dict:
    from translate.runtime.rng import refuse_nondeterministic
    from translate.training.loop import fit
    from translate.training.run import setup

    run = None
    try:
        run = setup(settings)
        # The run's .hydra/ record, claimed and checked (over another run's, set aside).
        accept_record(replacing=settings.trainer.overwrite and not settings.trainer.resume)
        # A refused write of TensorBoard's events (checkpoints map their own): one line.
        with mapped_write_errors(run.run_dir / "tensorboard"):
            stop_reason, sig = fit(run)
        if sig is not None:
            _exit(run, f"stopped by {stop_reason} at step {run.progress.step}; saved", sig)
        log.info(
            "training stopped (%s) after %d steps, %.1f min",
            stop_reason,
            run.progress.step,
            run.progress.train_seconds / 60,
        )
        results = _score(run)
        _say_if_cut_short(run, stop_reason)
        _say_if_updates_skipped(run)
        return results
    except Stopped as stop:  # a second signal during training
        if run is None:
            raise SystemExit(128 + stop.signum) from None
        what = f"second {stop}: stopped at once, without saving; the last checkpoint is"
        _exit(run, what, stop.signum)
    except WriteFailed as err:  # a full disk, a read-only one, a quota, while training
        if run is None:
            raise
        raise UserError(f"{err}; resume the run with: {resume_command(str(run.run_dir))}") from None
    except RuntimeError as err:  # trainer.deterministic=true meets an op without such a kernel
        refuse_nondeterministic(err)
        raise
    finally:
        if run is not None and run.lock is not None:
            run.lock.release()


def _say_if_cut_short(run: Run, stop_reason: str) -> None:
    """Said last: a run that its clock ended long before its step budget is scored on fewer
    updates than the recipe names, and another machine makes more."""
    t, p = run.settings.trainer, run.progress
    if stop_reason.startswith("max_minutes") and p.step < CUT_SHORT * t.max_steps:
        log.warning(
            "training ended on its clock (trainer.max_minutes=%g) after %s of "
            "trainer.max_steps=%s updates (%.0f%%): the scores above are of a model trained "
            "that far, and a faster or less busy machine trains further; for a result that does "
            "not depend on speed or load, set trainer.max_minutes=null and budget "
            "trainer.max_steps",
            t.max_minutes,
            f"{p.step:,}",
            f"{t.max_steps:,}",
            100 * p.step / t.max_steps,
        )


def _say_if_updates_skipped(run: Run) -> None:
    """Said last: skipped updates, fewer than trainer.max_bad_steps in a row, go unnoticed."""
    from translate.training.loop import nonfinite_causes

    skipped, p = run.progress.skipped_updates, run.progress
    if skipped:
        log.warning(
            "%s of %s updates were skipped as non-finite (a NaN/Inf loss or gradient; "
            "results.json: skipped_nonfinite_updates): the scores above are of a model trained "
            "%s updates; %s",
            f"{skipped:,}",
            f"{skipped + p.step:,}",
            f"{p.step:,}",
            nonfinite_causes(run),
        )


def _score(run: Run) -> dict:
    """The end-of-run scoring; a failure says how to finish it from the saved checkpoint."""
    from translate.training.report import finish_run

    try:
        with StopRequest(immediate=True):
            return finish_run(run)
    except Stopped as stop:
        what = f"{stop} while scoring the test split: training is complete and saved in"
        _exit(run, what, stop.signum)
    except UserError as err:
        raise UserError(
            f"{err}; training is complete and saved in {run.ckpts.last}: finish the scoring "
            f"with {resume_command(str(run.run_dir))}"
        ) from None


def resume_command(run_dir: str) -> str:
    """The command that resumes the run in ``run_dir``, ready to paste into a shell."""
    overrides = [shlex.quote(o) for o in task_overrides()]
    where = override_word("hydra.run.dir", str(run_dir))
    return " ".join(["python -m translate.train", *overrides, where, "trainer.resume=true"])


def _exit(run: Run, what: str, sig: int) -> None:
    """Say what a signal stopped and how to resume; exit 128 + signal, after the handler it had
    before training (hydra-submitit-launcher's requeues a preempted SLURM job, now saved)."""
    log.warning("%s %s. Resume with:\n  %s", what, run.ckpts.last, resume_command(str(run.run_dir)))
    previous = signal.getsignal(sig)
    if callable(previous) and previous is not signal.default_int_handler:
        previous(sig, None)
    raise SystemExit(128 + sig)


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
@exit_on_user_error
def main(cfg: DictConfig) -> float:
    return train(cfg)["bleu"]  # the value a Hydra optimisation sweeper would maximise


if __name__ == "__main__":
    run_command(main, "train")
