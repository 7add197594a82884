"""``python -m translate.serve`` as a user starts it: on a free port, answering at once,
never mixing up concurrent requests, stopped by Ctrl-C without a traceback."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest
from conftest import ROOT, assert_one_line_error, run_cli

pytest.importorskip("uvicorn", reason='no serve extra: pip install -e ".[serve]"')

SAMPLE = (ROOT / "translate" / "resources" / "sample" / "test.de").read_text("utf-8").splitlines()
# Outputs as long as their sources: the tiny model's translations then differ by sentence, so a
# mixed-up answer shows.
BY_LENGTH = ["decode.max_len_a=1", "decode.max_len_b=2"]
START_S = 180  # a loaded 2-core machine imports torch and loads the model slowly


@pytest.fixture(scope="module")
def ckpt(trained_run) -> str:
    return trained_run[1]["checkpoint"]


class Server:
    def __init__(self, proc: subprocess.Popen, url: str, stderr: list[str]) -> None:
        self.proc, self.url, self.stderr = proc, url, stderr

    def post(self, path: str, body: dict) -> tuple[int, dict]:
        request = urllib.request.Request(
            self.url + path.lstrip("/"),
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return answer.status, json.load(answer)
        except urllib.error.HTTPError as err:
            return err.code, json.load(err)


@contextmanager
def started(ckpt: str, *args: str):
    """The server on a free port, once its start line names the URL and it answers ``/``."""
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "TRANSLATE_DEBUG")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "translate.serve", f"checkpoint={ckpt}", "port=0", *args],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: queue.Queue[str | None] = queue.Queue()
    stderr: list[str] = []

    def read() -> None:
        for line in proc.stderr:
            stderr.append(line)
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    try:
        url = wait_for_url(lines, time.monotonic() + START_S, stderr)
        server = Server(proc, url, stderr)
        wait_until_answering(server.url, time.monotonic() + START_S)
        yield server
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def wait_for_url(lines: queue.Queue, deadline: float, stderr: list[str]) -> str:
    while True:
        line = lines.get(timeout=max(deadline - time.monotonic(), 0.1))
        if line is None:
            pytest.fail(f"the server stopped before serving: {''.join(stderr)}")
        found = re.search(r"serving on (http://\S+/)", line)
        if found:
            return found[1]


def wait_until_answering(url: str, deadline: float) -> None:
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                assert answer.status == 200
                return
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # a poll's pause, not a wait for readiness


@pytest.fixture(scope="module")
def server(ckpt):
    with started(ckpt, *BY_LENGTH) as running:
        yield running


def test_the_server_translates_on_its_free_port(server):
    assert server.url.startswith("http://127.0.0.1:") and not server.url.endswith(":0/")
    status, answer = server.post("/translate", {"text": SAMPLE[:2]})
    assert status == 200 and len(answer["translations"]) == 2
    assert all(t["translation"] for t in answer["translations"])


def test_concurrent_requests_each_get_their_own_answer(server):
    sentences = SAMPLE[:40]
    expected = {}
    for sentence in sentences:
        status, answer = server.post("/translate", {"text": [sentence]})
        expected[sentence] = answer["translations"][0]["translation"]
    # Only sentences whose translation no other shares: a mix-up among them cannot pass.
    unique = [s for s in sentences if list(expected.values()).count(expected[s]) == 1]
    assert len(unique) >= 8, expected

    def ask(n: int) -> tuple[list[str], list[str]]:
        pair = [unique[n % len(unique)], unique[(n * 7 + 3) % len(unique)]]
        status, answer = server.post("/translate", {"text": pair})
        assert status == 200, answer
        return [expected[s] for s in pair], [t["translation"] for t in answer["translations"]]

    with ThreadPoolExecutor(max_workers=24) as pool:
        results = list(pool.map(ask, range(96)))
    mixed = [(want, got) for want, got in results if want != got]
    assert not mixed, mixed[:3]


def test_a_port_in_use_is_one_line(server, ckpt):
    port = server.url.rstrip("/").rsplit(":", 1)[1]
    proc = run_cli("translate.serve", f"checkpoint={ckpt}", f"port={port}", timeout=START_S)
    assert_one_line_error(proc, f"cannot listen on 127.0.0.1:{port}", "port=")


def test_ctrl_c_stops_it_in_one_line(ckpt):
    with started(ckpt) as running:
        assert running.post("/translate", {"text": ["Der Hund."]})[0] == 200
        running.proc.send_signal(signal.SIGINT)
        assert running.proc.wait(timeout=60) == 0
    stderr = "".join(running.stderr)
    assert "Traceback" not in stderr and stderr.rstrip().endswith("server stopped")
