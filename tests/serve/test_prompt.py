"""``python -m translate.translate checkpoint=...`` on a terminal: a prompt that keeps the
model loaded, one translation per line typed, until Ctrl-D or Ctrl-C (no traceback)."""

from __future__ import annotations

import os
import pty
import queue
import signal
import subprocess
import sys
import threading

import pytest
from conftest import ROOT

from translate.decoding.translator import load_translator

LINES = ["Der Hund schläft.", "Zwei Männer spielen Fußball im Park."]
WAIT_S = 180  # a loaded 2-core machine imports torch and loads the model slowly


@pytest.fixture(scope="module")
def ckpt(trained_run) -> str:
    return trained_run[1]["checkpoint"]


class Prompt:
    """The command with a terminal as its stdin; its stdout read line by line."""

    def __init__(self, ckpt: str) -> None:
        self.terminal, tty = pty.openpty()
        env = {k: v for k, v in os.environ.items() if k != "TRANSLATE_DEBUG"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "translate.translate", f"checkpoint={ckpt}"],
            cwd=ROOT, env=env, stdin=tty, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        os.close(tty)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)

    def type(self, text: str) -> None:
        os.write(self.terminal, text.encode("utf-8"))

    def translation(self) -> str:
        return self.lines.get(timeout=WAIT_S).rstrip("\n")

    def end(self) -> tuple[int, str]:
        code = self.proc.wait(timeout=WAIT_S)
        os.close(self.terminal)
        return code, self.proc.stderr.read()


def test_each_line_typed_is_translated_until_ctrl_d(ckpt):
    expected = load_translator(ckpt).translator.translate(LINES)
    prompt = Prompt(ckpt)
    for line, translation in zip(LINES, expected):
        prompt.type(line + "\n")
        assert prompt.translation() == translation  # before the next line is typed
    prompt.type("\x04")  # Ctrl-D at the start of a line: end of input
    code, stderr = prompt.end()
    assert code == 0, stderr
    assert "Ctrl-D ends" in stderr and "Traceback" not in stderr


def test_ctrl_c_ends_the_prompt_without_a_traceback(ckpt):
    prompt = Prompt(ckpt)
    prompt.type(LINES[0] + "\n")
    prompt.translation()  # the model is loaded and waits for the next line
    prompt.proc.send_signal(signal.SIGINT)
    code, stderr = prompt.end()
    assert code == 0 and "Traceback" not in stderr, stderr
