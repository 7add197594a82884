"""Stop requests by signal: SIGINT/SIGTERM (and SLURM's time-limit warnings) become a flag the
training loop checks at step boundaries, or an exception where there is none to wait for."""

from __future__ import annotations

import contextlib
import logging
import signal

log = logging.getLogger(__name__)


# SIGUSR1/SIGUSR2: what SLURM sends ahead of a job's time limit when asked to (`--signal`;
# hydra-submitit-launcher asks for USR2, `signal_delay_s` before the limit).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)


class Stopped(Exception):
    """A stop signal that could not wait for a step boundary."""

    def __init__(self, signum: int, forced: bool) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum, self.forced = signum, forced


class StopRequest:
    """A stop signal becomes a flag checked at step boundaries (save, then exit); a second one
    raises :class:`Stopped` (``forced``) at once, as the first does with ``immediate=True``."""

    def __init__(self, immediate: bool = False) -> None:
        self.signal: int | None = None
        self.immediate = immediate
        self._previous = {}

    def __enter__(self):
        for sig in STOP_SIGNALS:
            # Outside the main thread signals cannot be caught: leave them alone.
            with contextlib.suppress(ValueError):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.signal is not None or self.immediate:
            raise Stopped(signum, forced=self.signal is not None)
        self.signal = signum
        log.warning(
            "%s received: saving a checkpoint at the next step boundary",
            signal.Signals(signum).name,
        )

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
