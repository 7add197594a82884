"""The rehearsal's stages that run the user's own commands (``translate/bench/scale.py``):
``python -m translate.train`` from a cold and from a warm cache (timed to the first update),
``torchrun`` with 2 gloo ranks from a cold cache, and a 2-job sweep through the local
launcher from a cold cache.

Each command's output is read line by line as it comes, each line stamped with the seconds
since the command started; the first update is the first step trace
(``hydra.verbose=translate.training.step`` logs ``rank 0 update: loss ...`` after each update,
after the optimizer step). The resident peak of a command killed after its first update is its
``VmHWM`` read just before the kill.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from translate.bench.scale_common import ROOT, recipe_overrides
from translate.bench.scale_host import SHORT_END, TINY
from translate.runtime.memory import peak_rss_mb

FIRST_UPDATE = re.compile(r"rank 0 update: loss")
MILESTONES = {
    "tokenizer_training_at_s": re.compile(r"tokenizer: training SentencePiece"),
    "tokenizer_reused_at_s": re.compile(r"tokenizer: reusing"),
    "setup_done_at_s": re.compile(r"checkpoints: .* \| TensorBoard: "),
}
# A short run that still goes through the whole command (validation and test scoring at the
# end), for the stages that count cache builds.
SHORT_RUN = [*TINY, *SHORT_END, "trainer.max_steps=2", "trainer.val_every_n_steps=2"]


class Command:
    """A command whose merged stdout/stderr lines arrive stamped with seconds since start."""

    def __init__(self, argv: list[str], env: dict | None = None) -> None:
        self.start = time.perf_counter()
        self.proc = subprocess.Popen(
            argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=env, start_new_session=True,  # its own process group: killed as a whole
        )  # fmt: skip
        self.lines: list[tuple[float, str]] = []
        self._queue: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._queue.put((time.perf_counter() - self.start, line.rstrip("\n")))
        self._queue.put(None)

    def until(self, pattern: re.Pattern | None, timeout: float) -> float | None:
        """Seconds at which a line matched ``pattern`` (None: the output ended first);
        ``pattern=None`` reads to the end. Echoes the lines to stderr."""
        deadline = time.perf_counter() + timeout
        while True:
            left = deadline - time.perf_counter()
            if left <= 0:
                raise TimeoutError(f"no {pattern and pattern.pattern!r} within {timeout:.0f} s")
            try:
                item = self._queue.get(timeout=left)
            except queue.Empty:
                continue
            if item is None:
                self.proc.wait()
                return None
            self.lines.append(item)
            print(f"  [{item[0]:7.1f}s] {item[1]}", file=sys.stderr)
            if pattern is not None and pattern.search(item[1]):
                return item[0]

    def peak_rss_mb(self) -> float | None:
        return peak_rss_mb(self.proc.pid)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def at(self, pattern: re.Pattern) -> float | None:
        return next((t for t, line in self.lines if pattern.search(line)), None)

    def count(self, pattern: re.Pattern) -> int:
        return sum(bool(pattern.search(line)) for _, line in self.lines)

    def tail(self, n: int = 30) -> str:
        return "\n".join(line for _, line in self.lines[-n:])


def train_argv(p: dict, run_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "translate.train", *recipe_overrides(p),
        f"hydra.run.dir={run_dir}", *extra,
    ]  # fmt: skip


def first_update(p: dict, run_dir: Path) -> dict:
    """``python -m translate.train`` with the recipe, killed after its first update: when it
    trained or reused the tokenizer, finished setting up, and made the update."""
    cmd = Command(
        train_argv(p, run_dir, "trainer.overwrite=true", "hydra.verbose=translate.training.step")
    )
    try:
        first = cmd.until(FIRST_UPDATE, p["command_timeout"])
        peak = cmd.peak_rss_mb()
    finally:
        cmd.kill()
    if first is None:
        raise RuntimeError(f"the training command ended before its first update:\n{cmd.tail()}")
    out = {"first_update_s": first, "peak_rss_mb": peak}
    out.update({key: cmd.at(pattern) for key, pattern in MILESTONES.items()})
    return out


BUILDS = re.compile(r"tokenizer: training SentencePiece")
ENCODES = re.compile(r"tokenizer: encoding [\d,]+ sentence pairs")
RANK_WAIT = re.compile(r"rank (\d+) waited ([\d.]+) s for rank 0 .*\(limit ([^)]+)\)")
READY = re.compile(r"data caches ready after ([\d.]+) s.*process group's timeout ([^)]+)\)")
LOCK_WAIT = re.compile(r"waited ([\d.]+) s for another process building")


def ddp(p: dict, run_dir: Path) -> dict:
    """2 gloo ranks under torchrun from a cold cache, a short run to its end: how often the
    tokenizer was trained and each split encoded, how long rank 1 waited for rank 0 and
    against which limits (rank 1's log is shown through ``hydra.verbose``)."""
    verbose = "hydra.verbose=[translate.training.distributed,translate.data.tokenizer]"
    argv = train_argv(p, run_dir, *SHORT_RUN, "runtime.num_threads=1", verbose)
    argv[1:2] = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m"]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    cmd = Command(argv, env={**env, "OMP_NUM_THREADS": "1"})
    try:
        cmd.until(None, p["command_timeout"])
    finally:
        cmd.kill()
    waits = [m.groups() for _, line in cmd.lines if (m := RANK_WAIT.search(line))]
    ready = next((m.groups() for _, line in cmd.lines if (m := READY.search(line))), None)
    return {
        "returncode": cmd.proc.returncode,
        "seconds": cmd.lines[-1][0] if cmd.lines else None,
        "tokenizer_builds": cmd.count(BUILDS),
        "encodings": cmd.count(ENCODES),
        "rank_waits_s": {r: float(s) for r, s, _ in waits},  # rank (str, as in JSON): s
        "wait_limit": waits[0][2] if waits else None,
        "rank0_build_s": float(ready[0]) if ready else None,
        "process_group_timeout": ready[1] if ready else None,
        "tail": cmd.tail(12) if cmd.proc.returncode else "",
    }


def sweep(p: dict, sweep_dir: Path) -> dict:
    """A 2-job multirun (heads=2,4) from a cold cache through hydra-submitit-launcher's local
    launcher, whose jobs start together (the basic launcher runs them one after the other in
    one process, where the second finds the cache trivially); how often the tokenizer was
    trained and how long a job waited for the other's build, from the jobs' logs."""
    try:
        import hydra_plugins.hydra_submitit_launcher  # noqa: F401

        launcher = "hydra/launcher=local"
    except ImportError:
        launcher = "hydra/launcher=basic"
    tiny = [o for o in SHORT_RUN if not o.startswith("heads=")]
    argv = train_argv(p, sweep_dir, *tiny, "runtime.num_threads=1", launcher, "heads=2,4")
    argv = [a.replace("hydra.run.dir=", "hydra.sweep.dir=") for a in argv]
    argv.append("hydra.sweep.subdir=job${hydra.job.num}")
    argv.insert(3, "-m")
    cmd = Command(argv)
    try:
        cmd.until(None, p["command_timeout"])
    finally:
        cmd.kill()
    logs = [f.read_text() for f in sorted(sweep_dir.glob("*/train.log"))]
    return {
        "launcher": launcher,
        "returncode": cmd.proc.returncode,
        "seconds": cmd.lines[-1][0] if cmd.lines else None,
        "jobs": len(logs),
        "tokenizer_builds": sum(len(BUILDS.findall(text)) for text in logs),
        "encodings": sum(len(ENCODES.findall(text)) for text in logs),
        "lock_waits_s": [float(s) for text in logs for s in LOCK_WAIT.findall(text)],
        "tail": cmd.tail(12) if cmd.proc.returncode else "",
    }
