"""A Hydra callback for test_sweeps.py: a real stop signal during one job of a sweep.

The job numbered ``job_num`` sends itself SIGTERM right after it saves its first checkpoint,
as a user's Ctrl-C or a scheduler would mid-job: training saves at its next step boundary and
the process exits, which ends the sweep there. The signal is tied to a checkpoint, not to a
clock, so it lands at the same point on a loaded machine.

Used as ``+hydra.callbacks.stop._target_=sweep_stop.StopDuringJob`` with this folder on
``PYTHONPATH``.
"""

from __future__ import annotations

import signal

from hydra.experimental.callback import Callback


class StopDuringJob(Callback):
    def __init__(self, job_num: int) -> None:
        self.job_num = int(job_num)

    def on_job_start(self, config, **kwargs) -> None:
        if config.hydra.job.num != self.job_num:
            return
        from translate.training.saving import CheckpointManager

        save = CheckpointManager.save

        def save_then_stop(manager, *args, **kw):
            path = save(manager, *args, **kw)
            CheckpointManager.save = save  # once: the stop's own checkpoint is a plain save
            signal.raise_signal(signal.SIGTERM)
            return path

        CheckpointManager.save = save_then_stop
