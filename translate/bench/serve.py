"""Serving: one sentence through ``POST /translate`` against the decode benchmark's batch-1
path, concurrent clients, and the server's resident memory.

The server (``python -m translate.serve``) runs in a process of its own on a free port, at
``--threads``; clients keep their connections. Latency: the first ``--sentences`` lines sent
one request at a time, alternated round by round with the same sentences decoded one per call
here (``translate_ids``). Then ``--clients`` threads send ``--requests`` each, every answer
compared with this process's translation; VmRSS is read after 10 requests and after them.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from statistics import median

from translate.bench import common
from translate.cli import run_plain_command
from translate.data.sources import read_lines, sample_dir
from translate.decoding.timing_process import decode_timed
from translate.decoding.translator import load_translator
from translate.errors import UserError, override_word
from translate.runtime.timing import rotated
from translate.serving.process import KeptConnection, ServerProcess, server_process

TARGETS = {
    "serve_vs_batch1_latency": ("<=", 1.2),
    "concurrent_errors": ("<=", 0),
    "concurrent_mismatches": ("<=", 0),
    "rss_growth_mib": ("<=", 50),
}
COLUMNS = [("path", "path", ""), ("ms_per_sentence", "ms/sent (median)", ".3g")]
WARM = 10  # requests before the first memory reading


def resident_bytes(pid: int) -> int | None:
    """VmRSS of process ``pid``; None where /proc does not say (not Linux)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    kib = next((line.split()[1] for line in status.splitlines() if line.startswith("VmRSS")), None)
    return None if kib is None else int(kib) * 1024


def latency(server: ServerProcess, translator, texts: list[str], rounds: int) -> dict:
    """Ms per sentence of each path, by round (the paths alternating in order)."""
    ids = translator.tokenizer.encode(texts)
    client = KeptConnection(server.url)

    def through_server() -> float:
        start = time.perf_counter()
        for text in texts:
            status, answer = client.post("/translate", {"text": [text]})
            if status != 200:
                raise UserError(f"the server answered {status}: {answer.get('error')}")
        return time.perf_counter() - start

    def batch_1() -> float:
        return decode_timed(translator, ids, None, one_at_a_time=True)[1]

    paths = {"POST /translate": through_server, "batch-1 translate_ids": batch_1}
    with contextlib.closing(client):
        for fn in paths.values():  # warm-up: both paths once, untimed
            fn()
        seconds = {name: [] for name in paths}
        for r in range(rounds):
            for name in rotated(list(paths), r):
                seconds[name].append(paths[name]())
    return {name: [1e3 * s / len(texts) for s in runs] for name, runs in seconds.items()}


def concurrent(server: ServerProcess, expected: dict[str, str], clients: int, requests: int):
    """``(errors, mismatches, seconds)`` of ``clients`` threads x ``requests`` requests."""
    texts = list(expected)

    def client(n: int) -> tuple[int, int]:
        errors = mismatches = 0
        connection = KeptConnection(server.url)
        for k in range(requests):
            text = texts[(n * requests + k) % len(texts)]
            try:
                status, answer = connection.post("/translate", {"text": [text]})
            except (OSError, http.client.HTTPException):
                errors += 1
                continue
            if status != 200:
                errors += 1
            elif answer["translations"][0]["translation"] != expected[text]:
                mismatches += 1
        connection.close()
        return errors, mismatches

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        counts = list(pool.map(client, range(clients)))
    seconds = time.perf_counter() - start
    return sum(e for e, _ in counts), sum(m for _, m in counts), seconds


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = common.parser("serve", __doc__)
    number = common.number
    parser.add_argument("--checkpoint", type=common.existing_file, required=True)
    parser.add_argument("--src-file", type=common.existing_file, default=sample_dir() / "test.de")
    parser.add_argument("--sentences", type=number(), default=None, help="latency (default 50)")
    parser.add_argument("--rounds", type=number(), default=None, help="latency (default 5)")
    parser.add_argument("--clients", type=number(), default=50)
    parser.add_argument("--requests", type=number(), default=20, help="per client")
    args = parser.parse_args(argv)
    args.sentences = args.sentences or (10 if args.quick else 50)
    args.rounds = args.rounds or (2 if args.quick else 5)
    return args


def main(argv: Sequence[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    with common.session(args) as device:
        translator = load_translator(args.checkpoint, str(device), "32").translator
        texts = read_lines(args.src_file)
        expected = dict(zip(texts, translator.translate(texts)))
        overrides = [
            override_word("checkpoint", str(args.checkpoint)),
            f"runtime.device={args.device}",
            "runtime.precision=32",
            f"runtime.num_threads={args.threads}",
            f"runtime.keep_freed_memory={str(not args.system_malloc).lower()}",
        ]
        with server_process(overrides) as server:
            for text in texts[:WARM]:
                server.post("/translate", {"text": [text]})
            rss_warm = resident_bytes(server.proc.pid)
            errors, mismatches, seconds = concurrent(server, expected, args.clients, args.requests)
            rss_after = resident_bytes(server.proc.pid)
            runs = latency(server, translator, texts[: args.sentences], args.rounds)
        load = (errors, mismatches, seconds)
        return report(args, argv, device, runs, load, (rss_warm, rss_after), translator.decode)


def report(args, argv, device, runs: dict, load: tuple, rss: tuple, decode) -> dict:
    rows = [{"path": p, "ms_per_sentence": median(ms), "ms_runs": ms} for p, ms in runs.items()]
    title = (
        f"One sentence at a time, {args.sentences} sentences x {args.rounds} rounds, "
        f"{args.threads} threads, {decode.search} (the checkpoint's decode settings)"
    )
    common.print_table(rows, COLUMNS, title=title)
    errors, mismatches, seconds = load
    total = args.clients * args.requests
    print(
        f"\n{args.clients} clients x {args.requests} requests: {total / seconds:.1f} requests/s, "
        f"{errors} errors, {mismatches} answers not their own sentence's translation"
    )
    rss_warm, rss_after = rss
    mib = None if rss_warm is None or rss_after is None else (rss_after - rss_warm) / 2**20
    summary = {
        "serve_vs_batch1_latency": rows[0]["ms_per_sentence"] / rows[1]["ms_per_sentence"],
        "concurrent_errors": errors,
        "concurrent_mismatches": mismatches,
        "rss_growth_mib": mib,
    }
    memory = {"after_requests": [WARM, WARM + total], "rss_bytes": [rss_warm, rss_after]}
    concurrency = {"clients": args.clients, "requests_each": args.requests, "seconds": seconds}
    sections = {"rows": rows, "concurrency": concurrency, "memory": memory}
    return common.finish("serve", argv, args, device, summary, TARGETS, **sections)


if __name__ == "__main__":
    run_plain_command(main)
