"""``python -m translate.bench.serve`` on the tiny trained run: a table and a JSON report with
both latency paths, the concurrent clients' counts and the server's memory."""

from __future__ import annotations

import json
import sys

import pytest

pytest.importorskip("uvicorn", reason='no serve extra: pip install -e ".[serve]"')

from translate.bench import serve as bench_serve  # noqa: E402


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
