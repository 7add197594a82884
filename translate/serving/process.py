"""``python -m translate.serve`` in a process of its own (the benchmark's, the tests'), on a
free port, ready once its start line names the URL (its socket already listens); and a JSON
client that keeps its connection, as HTTP clients do."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field

from translate.errors import UserError


@dataclass
class ServerProcess:
    proc: subprocess.Popen
    url: str  # http://127.0.0.1:<port>/
    stderr: list[str] = field(default_factory=list)  # its lines so far
    reader: threading.Thread | None = None

    def stopped(self, timeout: float = 60) -> int:
        """Its exit status once it has ended and :attr:`stderr` holds every line."""
        code = self.proc.wait(timeout=timeout)
        self.reader.join(timeout=timeout)
        return code

    def post(self, path: str, body: dict, timeout: float = 120) -> tuple[int, dict]:
        """``(status, answer)`` of a JSON request on a connection of its own."""
        with contextlib.closing(KeptConnection(self.url, timeout)) as client:
            return client.post(path, body)


class KeptConnection:
    """A JSON client on one kept HTTP/1.1 connection: one the server closed (uvicorn: idle 5 s)
    is reopened and the request sent again, once; any other failure closes it and is raised."""

    def __init__(self, url: str, timeout: float = 120) -> None:
        parts = urllib.parse.urlsplit(url)
        self.connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
        self.used = False  # whether the open connection has answered a request

    def post(self, path: str, body: dict) -> tuple[int, dict]:
        """``(status, answer)`` of a JSON request, a 4xx or 5xx included."""
        data, reused = json.dumps(body).encode("utf-8"), self.used
        try:
            return self._post(path, data)
        except ConnectionError:
            if not reused:
                raise
            return self._post(path, data)  # on a new connection: the server closed the old

    def _post(self, path: str, data: bytes) -> tuple[int, dict]:
        try:
            self.connection.request("POST", path, data, {"Content-Type": "application/json"})
            answer = self.connection.getresponse()
            status, body = answer.status, json.loads(answer.read())
        except (OSError, http.client.HTTPException):
            self.connection.close()  # the next request opens a new one
            self.used = False
            raise
        self.used = self.connection.sock is not None  # None: the server closed it
        return status, body

    def close(self) -> None:
        self.connection.close()


@contextlib.contextmanager
def server_process(overrides: list[str], start_s: float = 180) -> Iterator[ServerProcess]:
    """The server with ``overrides`` on a free port; SIGINT when the block ends, if it runs."""
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "TRANSLATE_DEBUG")}
    command = [sys.executable, "-m", "translate.serve", "port=0", *overrides]
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    server = ServerProcess(proc, "")
    lines: queue.Queue[str | None] = queue.Queue()
    server.reader = threading.Thread(target=_read, args=(proc, server.stderr, lines), daemon=True)
    server.reader.start()
    try:
        server.url = _wait_for_url(lines, time.monotonic() + start_s, server.stderr)
        yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _read(proc: subprocess.Popen, stderr: list[str], lines: queue.Queue) -> None:
    for line in proc.stderr:
        stderr.append(line)
        lines.put(line)
    lines.put(None)


def _wait_for_url(lines: queue.Queue, deadline: float, stderr: list[str]) -> str:
    while True:
        try:
            line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
        except queue.Empty:
            raise UserError("the server did not start in time; is the machine busy?") from None
        if line is None:
            said = "".join(stderr).strip().splitlines()
            raise UserError(f"the server stopped before serving: {said[-1] if said else ''}")
        found = re.search(r"serving on (http://\S+/)", line)
        if found:
            return found[1]
