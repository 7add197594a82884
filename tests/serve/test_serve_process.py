"""``python -m translate.serve`` as a user starts it: on a free port, answering at once,
never mixing up concurrent requests, stopped by Ctrl-C without a traceback."""

from __future__ import annotations

import asyncio
import signal
import socket
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import ROOT, assert_one_line_error, run_cli

pytest.importorskip("uvicorn", reason='no serve extra: pip install -e ".[serve]"')

from translate.serving.process import server_process  # noqa: E402

SAMPLE = (ROOT / "translate" / "resources" / "sample" / "test.de").read_text("utf-8").splitlines()
# Outputs as long as their sources: the tiny model's translations then differ by sentence, so a
# mixed-up answer shows.
BY_LENGTH = ["decode.max_len_a=1", "decode.max_len_b=2"]
START_S = 180  # a loaded 2-core machine imports torch and loads the model slowly


@pytest.fixture(scope="module")
def ckpt(trained_run) -> str:
    return trained_run[1]["checkpoint"]


def started(ckpt: str, *overrides: str):
    return server_process([f"checkpoint={ckpt}", *overrides], START_S)


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
        assert running.stopped() == 0
    stderr = "".join(running.stderr)
    assert "Traceback" not in stderr and stderr.rstrip().endswith("server stopped")


def test_connections_to_the_listening_socket_send_without_delay():
    """The server's connections get TCP_NODELAY from asyncio, which sets it only on sockets that
    say they are TCP: on one left at protocol 0, a client keeping its connection (as HTTP
    clients do) waited ~40 ms for every answer, Nagle's algorithm against its delayed ACK."""
    from translate.serve import bound_socket

    async def nodelay_of_an_accepted_connection() -> int:
        accepted = asyncio.get_running_loop().create_future()

        def connected(reader, writer):
            sock = writer.get_extra_info("socket")
            accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        listening = bound_socket("127.0.0.1", 0)
        server = await asyncio.start_server(connected, sock=listening)
        async with server:
            _, writer = await asyncio.open_connection(*listening.getsockname()[:2])
            flag = await asyncio.wait_for(accepted, timeout=60)
            writer.close()
        return flag

    assert asyncio.run(nodelay_of_an_accepted_connection()) != 0
