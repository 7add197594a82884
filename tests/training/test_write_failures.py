"""A write the disk refuses anywhere in training (a full disk, a read-only one, a quota): one
line that says what failed and the command that resumes the run (issue 41, item 4)."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT, SHORT, TINY

# TensorBoard writes its events from a thread of its own: its failure printed that thread's
# traceback, then the main thread's at the next event, and no way to go on.
FULL_DISK_AFTER = """
import errno, os
from tensorboard.summary.writer import record_writer

real, calls = record_writer.RecordWriter.write, []


def write(self, data):
    calls.append(1)
    if len(calls) > int(os.environ["FULL_DISK_AFTER"]):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return real(self, data)


record_writer.RecordWriter.write = write
"""


def test_tensorboard_on_a_full_disk_is_one_line_with_the_resume_command(tmp_path, cache_dir):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(FULL_DISK_AFTER)
    run = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "TRANSLATE_DEBUG")}
    path = os.pathsep.join(p for p in (str(site), str(ROOT), env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "translate.train",
            *TINY,
            *SHORT,
            f"data.cache_dir={cache_dir}",
            f"hydra.run.dir={run}",
        ],
        cwd=ROOT,
        env={**env, "PYTHONPATH": path, "FULL_DISK_AFTER": "3"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert f"could not write {run / 'tensorboard'}: no space left on the device" in line
    assert "resume the run with: python -m translate.train" in line
    assert "trainer.resume=true" in line and str(run) in line
    assert "Traceback" not in proc.stderr and "Exception in thread" not in proc.stderr
