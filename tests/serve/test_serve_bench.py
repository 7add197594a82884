"""``python -m translate.bench.serve`` on the tiny trained run: a table and a JSON report with
both latency paths, the concurrent clients' counts and the server's memory."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("uvicorn", reason='no serve extra: pip install -e ".[serve]"')

from translate.bench import serve as bench_serve  # noqa: E402
from translate.serving.process import KeptConnection  # noqa: E402


def test_bench_serve_reports_latency_concurrency_and_memory(trained_run, tmp_path, capsys):
    out = tmp_path / "serve.json"
    argv = ["--checkpoint", str(trained_run[1]["checkpoint"]), "--quick", "--threads", "1"]
    result = bench_serve.main([*argv, "--clients", "4", "--requests", "3", "--json", str(out)])
    written = json.loads(out.read_text())
    assert written["summary"] == result["summary"]
    summary = written["summary"]
    assert set(summary) == set(bench_serve.TARGETS)
    assert summary["concurrent_errors"] == 0 and summary["concurrent_mismatches"] == 0
    rows = {row["path"]: row["ms_per_sentence"] for row in written["rows"]}
    assert set(rows) == {"POST /translate", "batch-1 translate_ids"} and min(rows.values()) > 0
    assert summary["serve_vs_batch1_latency"] == pytest.approx(
        rows["POST /translate"] / rows["batch-1 translate_ids"]
    )
    memory = written["memory"]
    assert memory["after_requests"] == [bench_serve.WARM, bench_serve.WARM + 4 * 3]
    if sys.platform == "linux":
        assert all(rss > 0 for rss in memory["rss_bytes"])
    assert "POST /translate" in capsys.readouterr().out


def test_bench_serve_needs_a_checkpoint(capsys):
    with pytest.raises(SystemExit) as stop:
        bench_serve.main([])
    assert stop.value.code == 2 and "--checkpoint" in capsys.readouterr().err


class _Echo(BaseHTTPRequestHandler):
    """Answers a JSON POST with its body and the client's port, on a kept HTTP/1.1 connection;
    ``/close`` answers, then drops the connection."""

    protocol_version = "HTTP/1.1"

    def do_POST(self):  # noqa: N802 (the stdlib's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        data = json.dumps({"echo": body, "port": self.client_address[1]}).encode()
        self.send_response(404 if self.path == "/missing" else 200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = self.path == "/close"

    def log_message(self, *args):
        pass


def test_the_benchmarks_client_keeps_its_connection_and_resends_on_a_dropped_one():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = KeptConnection(f"http://127.0.0.1:{server.server_address[1]}/")
    try:
        answers = [client.post(path, {"n": n}) for n, path in enumerate(["/a", "/missing", "/b"])]
        assert [status for status, _ in answers] == [200, 404, 200]
        assert [a["echo"] for _, a in answers] == [{"n": 0}, {"n": 1}, {"n": 2}]
        assert len({a["port"] for _, a in answers}) == 1  # one connection, a 404 included
        # The server drops the connection after answering, without saying so (as uvicorn
        # does with an idle one): the next request goes again on a new connection.
        assert client.post("/close", {})[0] == 200
        status, answer = client.post("/c", {"n": 3})
        assert status == 200 and answer == {"echo": {"n": 3}, "port": answer["port"]}
        assert answer["port"] != answers[0][1]["port"]
    finally:
        client.close()
        server.shutdown()
        server.server_close()
