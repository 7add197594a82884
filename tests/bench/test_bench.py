"""The benchmarks' machinery (``python -m translate.bench.*``) at tiny sizes: they run, print
and write well-formed JSON with the ``summary`` ratios. No timing assertions: numbers from a
shared CPU mean nothing here."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT
from omegaconf import OmegaConf
from torch.utils.flop_counter import FlopCounterMode

from translate.bench import attention as bench_attention
from translate.bench import decode as bench_decode
from translate.bench import train as bench_train
from translate.data.batching import length_sorted_batches, padding_ratio
from translate.nn.model import TokenEmbedding

TINY_TRAIN = [
    "--quick", "--d-model", "32", "--heads", "2", "--layers", "1", "--d-ff", "64",
    "--vocab", "100", "--max-tokens", "128", "--warmup", "1", "--threads", "1",
    "--gemm-size", "256",
]  # fmt: skip

MODULES = {"bench_attention": bench_attention, "bench_train": bench_train}
MODULES["bench_decode"] = bench_decode


def check_report(path: Path, result: dict, keys: set[str], script: str) -> dict:
    written = json.loads(path.read_text())
    assert written["summary"] == pytest.approx(result["summary"])
    assert set(written["summary"]) == keys
    for key, value in written["summary"].items():
        assert isinstance(value, float) and math.isfinite(value) and value > 0, (key, value)
    machine = written["machine"]
    assert machine["torch"] == torch.__version__
    assert {"date", "device_name", "threads"} <= set(machine)
    assert written["command"].startswith(f"python -m translate.bench.{script}")
    assert written["rows"]
    return written


def test_bench_attention_tiny(tmp_path, capsys):
    out = tmp_path / "attention.json"
    threads = torch.get_num_threads()
    result = bench_attention.main(
        [
            "--d-model", "32", "--heads", "2", "--lengths", "16", "2048", "--tokens", "64",
            "--repeats", "1", "--warmup", "0", "--threads", "1", "--json", str(out),
        ]
    )  # fmt: skip
    assert torch.get_num_threads() == threads  # restored for the rest of the session
    written = check_report(
        out,
        result,
        {"mha_fwd_bwd_time_sdpa_vs_torch", "peak_mem_2048_sdpa_vs_manual"},
        "attention",
    )
    assert [row["impl"] for row in written["rows"]] == ["torch", "manual", "sdpa"] * 2
    assert all(row["fwd_bwd_ms"] > 0 for row in written["rows"])
    at_2048 = [r for r in written["rows"] if r["length"] == 2048]
    assert len(at_2048) == 3 and all(r["fwd_bwd_mb"] > 0 for r in at_2048)
    assert "fwd+bwd MiB" in capsys.readouterr().out


def test_bench_train_tiny(tmp_path, capsys):
    out = tmp_path / "train.json"
    result = bench_train.main(
        [
            "--d-model", "32", "--heads", "2", "--layers", "1", "--d-ff", "64", "--vocab", "100",
            "--max-tokens", "128", "--batches", "2", "--rounds", "2", "--warmup", "1",
            "--threads", "1", "--gemm-size", "256", "--json", str(out),
        ]
    )  # fmt: skip
    written = check_report(
        out,
        result,
        {
            "train_tokens_per_s_sdpa_vs_torch",
            "train_tokens_per_s_manual_vs_torch",
            "train_matmul_efficiency",
        },
        "train",
    )
    rows = {row["impl"]: row for row in written["rows"]}
    assert set(rows) == {"torch", "manual", "sdpa"}
    # Same architecture: the nn.Transformer baseline has exactly our parameter count.
    assert len({row["params"] for row in rows.values()}) == 1
    assert all(len(row["tokens_per_s_runs"]) == 2 for row in rows.values())
    assert "vs torch" in capsys.readouterr().out


def test_bench_decode_tiny(tmp_path):
    out = tmp_path / "decode.json"
    result = bench_decode.main(
        [
            "--d-model", "32", "--heads", "2", "--layers", "1", "--d-ff", "64", "--vocab", "100",
            "--sentences", "5", "--max-tokens", "40", "--rounds", "1", "--warmup", "0",
            "--impls", "sdpa", "manual", "--threads", "1", "--json", str(out),
        ]
    )  # fmt: skip
    kv_keys = {
        "kv_cache_bytes_ratio_kv1_vs_kv2",
        "greedy_cache_speed_ratio_kv1_vs_kv2",
        "beam5_speed_ratio_kv1_vs_kv2",
    }
    written = check_report(out, result, {"greedy_cache_speedup", *kv_keys}, "decode")
    cached = [r for r in written["rows"] if r["mode"] == "greedy_cache"]
    assert len(cached) == 2 and all(r["same_output"] for r in cached)
    assert {r["mode"] for r in written["rows"]} == {"greedy_no_cache", "greedy_cache", "beam5"}
    check_kv_rows(written, heads=2)
    # Batched as the translator batches: by length (translate.data.batching), EOS included.
    sources = bench_decode.synthetic_sources(5, 100, seed=0)
    expected = length_sorted_batches([len(s) + 1 for s in sources], None, 40)
    assert written["batch_sizes"] == [len(b) for b in expected] and len(expected) > 1


def check_kv_rows(written: dict, heads: int) -> None:
    """One row per (kv heads, mode) at ``heads`` query heads; multi-head is the baseline and
    fewer key/value heads hold a smaller cache."""
    kv_rows = written["kv_rows"]
    assert {(r["kv_heads"], r["mode"]) for r in kv_rows} == {
        (kv, mode) for kv in (1, heads) for mode in ("greedy_cache", "beam5")
    }
    for row in kv_rows:
        assert row["sentences_per_s"] > 0 and row["kv_cache_bytes_per_sentence"] > 0
        if row["kv_heads"] == heads:
            assert row["speed_vs_mha"] == row["kv_cache_vs_mha"] == 1.0
        else:
            assert 0 < row["kv_cache_vs_mha"] < 1
    by_key = {(r["kv_heads"], r["mode"]): r for r in kv_rows}
    # Beam search keeps 5 hypotheses per sentence, so more cache per sentence than greedy.
    assert (
        by_key[heads, "beam5"]["kv_cache_bytes_per_sentence"]
        > by_key[heads, "greedy_cache"]["kv_cache_bytes_per_sentence"]
    )


def test_benchmarks_run_from_the_command_line(tmp_path):
    out = tmp_path / "decode.json"
    cmd = [
        sys.executable, "-m", "translate.bench.decode", "--d-model", "16", "--heads", "2",
        "--layers", "1", "--d-ff", "32", "--vocab", "50", "--sentences", "2", "--rounds", "1",
        "--threads", "1", "--json", str(out),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "greedy_cache_speedup" in json.loads(out.read_text())["summary"]


def test_bench_train_uses_the_package():
    """The optimiser comes from conf/optim and the baseline from translate.nn's embedding."""
    optim = OmegaConf.to_container(OmegaConf.load(ROOT / "conf/optim/adam_inverse_sqrt.yaml"))
    args = bench_train.parse_args(TINY_TRAIN)
    assert dataclasses.asdict(bench_train.load_optim(args.optim)) == optim
    baseline = bench_train.build("torch", bench_train.model_kwargs(args, 100), seed=0)
    assert isinstance(baseline.embedding, TokenEmbedding)
    src = torch.randint(4, 100, (2, 5))
    assert baseline(src, src[:, :3]).shape == (2, 3, 100)


def test_bench_train_synthetic_batches_are_as_full_as_in_training():
    """The default batches (2,048 tokens) are full ones, cut from a Multi30k-sized pool, so
    their padding is what training sees on the real corpus (about 97% real tokens), not the
    coarse buckets of a small pool."""
    batches = bench_train.synthetic_batches(bench_train.parse_args(["--batches", "8"]), 5000)
    assert len(batches) == 8
    assert all(b.src.numel() >= 1024 or b.tgt_in.numel() >= 1024 for b in batches)
    assert padding_ratio(batches)["all"] > 0.93


def test_bench_train_reports_its_efficiency_and_padding(tmp_path, capsys):
    out = tmp_path / "train.json"
    bench_train.main([*TINY_TRAIN, "--models", "torch", "sdpa", "--json", str(out)])
    check_efficiency_and_padding(json.loads(out.read_text()), capsys.readouterr().out)


def check_efficiency_and_padding(written: dict, printed: str) -> None:
    """The --quick JSON: the GEMM reference, the models' share of its FLOP/s, the batches'
    real/padded token ratios; and the printed lines that show them."""
    assert 0 < written["summary"]["train_matmul_efficiency"] < 1.5
    gemm = written["gemm"]
    assert (gemm["size"], gemm["dtype"], gemm["threads"]) == (256, "fp32", 1)
    assert gemm["timed_calls"] == 3 * 2 and len(gemm["tflops_runs"]) == 3  # --quick rounds
    assert gemm["tflops"] == pytest.approx(gemm["flops_per_call"] / gemm["call_s"] / 1e12)
    for row in written["rows"]:
        assert 0 < row["matmul_efficiency"] < 1.5 and row["tflops"] > 0
        assert row["matmul_efficiency"] == pytest.approx(row["tflops"] / gemm["tflops"])
    sdpa = next(row for row in written["rows"] if row["impl"] == "sdpa")
    assert written["summary"]["train_matmul_efficiency"] == sdpa["matmul_efficiency"]
    batches = written["batches"]
    assert all(0 < batches["padding_ratio"][side] <= 1 for side in ("src", "tgt", "all"))
    real = batches["src_tokens"] + batches["tgt_tokens"]
    padded = batches["src_padded"] + batches["tgt_padded"]
    assert batches["padding_ratio"]["all"] == pytest.approx(real / padded)
    assert batches["count"] == len(batches["shapes"]) == 2
    assert "of GEMM" in printed and "GEMM reference: torch.mm, 256 x 256" in printed
    assert "real/padded tokens: src" in printed


def test_bench_train_flops_count_every_matmul():
    """train_flops against torch's own count of one training step of the manual model, whose
    attention is plain matmuls: projections, feed-forward, Q K^T, A V, the vocabulary
    projection over the real targets, forward and backward."""
    args = bench_train.parse_args([*TINY_TRAIN, "--models", "manual"])
    vocab = args.vocab
    batches = bench_train.synthetic_batches(args, vocab)
    optim = bench_train.load_optim(args.optim)
    trainers, _ = bench_train.make_trainers(args, vocab, optim, torch.device("cpu"), "32")
    for batch in batches:
        with FlopCounterMode(display=False) as counter:
            trainers["manual"].step([batch])
        assert counter.get_total_flops() == bench_train.train_flops(batch, args, vocab)


def ct2_argv(trained_run, out: Path) -> list[str]:
    """bench_decode --ct2 on the shared tiny checkpoint (4 output tokens), at its smallest."""
    checkpoint = trained_run[1]["checkpoint"]
    return [
        "--quick", "--checkpoint", checkpoint, "--ct2", "--sentences", "6",
        "--latency-sentences", "2", "--rounds", "1", "--warmup", "0", "--threads", "1",
        "--json", str(out),
    ]  # fmt: skip


def test_bench_decode_against_ctranslate2(trained_run, tmp_path, capsys):
    """Ours and the checkpoint's float32 and int8 exports, greedy and beam, at 1 and 2 threads,
    batch 1 and the evaluation batch: every row, the summary ratios, and greedy agreeing."""
    pytest.importorskip("ctranslate2")
    out = tmp_path / "decode.json"
    bench_decode.main(ct2_argv(trained_run, out))
    written = json.loads(out.read_text())
    summary, ct2 = written["summary"], written["ct2"]
    engines = ("ours", "ct2 float32", "ct2 int8")
    assert {(r["threads"], r["batch"], r["mode"], r["engine"]) for r in ct2["rows"]} == {
        (t, b, m, e) for t in (1, 2) for b in ("1", "eval") for m in ("greedy", "beam5")
        for e in engines
    }  # fmt: skip
    for quantization in ("float32", "int8"):
        for t in (1, 2):
            for key in ("beam_time", "greedy_time", "beam_latency", "greedy_latency"):
                assert summary[f"{key}_ours_vs_ct2_{quantization}_threads{t}"] > 0
        assert 0 <= summary[f"beam_identical_ct2_{quantization}"] <= 6
    # The same argmax at every step: CTranslate2's float32 greedy search is ours.
    assert summary["greedy_identical_ct2_float32"] == summary["ct2_compared_sentences"] == 6
    greedy = [r for r in ct2["rows"] if r["mode"] == "greedy" and r["engine"] == "ct2 float32"]
    assert {r["batch"]: r["agree"] for r in greedy} == {"1": "2/2", "eval": "6/6"}
    assert ct2["latency_sentences"] == 2 and ct2["decode"]["beam_size"] == 5
    assert written["machine"]["threads"] == 1  # --threads again after the 2-thread rounds
    assert "against CTranslate2" in capsys.readouterr().out


def test_bench_decode_without_ctranslate2_says_so(trained_run, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # as if it were not installed
    out = tmp_path / "decode.json"
    result = bench_decode.main(ct2_argv(trained_run, out))
    assert 'pip install -e ".[ct2]"' in result["ct2"]["skipped"]
    assert set(json.loads(out.read_text())["summary"]) == {"greedy_cache_speedup"}


def test_bench_decode_ct2_needs_a_checkpoint(capsys):
    with pytest.raises(SystemExit):
        bench_decode.parse_args(["--ct2"])
    assert "give --checkpoint" in capsys.readouterr().err


@pytest.mark.parametrize(
    "script,argv,says",
    [
        ("bench_decode", ["--quick", "--heads", "3"], "--heads 3 does not divide --d-model 256"),
        ("bench_decode", ["--threads", "0"], "argument --threads: 0 must be >= 1"),
        ("bench_decode", ["--max-len-a", "nan"], "argument --max-len-a: nan must be >= 0"),
        ("bench_decode", ["--device", "gpu"], "'gpu' is not a device"),
        ("bench_decode", ["--vocab", "4"], "argument --vocab: 4 must be >= 5"),
        ("bench_train", ["--heads", "3"], "--heads 3 does not divide --d-model 256"),
        ("bench_train", ["--dropout", "1.5"], "argument --dropout: 1.5 must be in 0..0.99"),
        ("bench_train", ["--optim", "nowhere.yaml"], "argument --optim: nowhere.yaml is not a"),
        ("bench_train", ["--rounds", "two"], "argument --rounds: 'two' is not an integer"),
        ("bench_attention", ["--d-model", "100"], "--heads 8 does not divide --d-model 100"),
        ("bench_attention", ["--lengths", "0"], "argument --lengths: 0 must be >= 1"),
    ],
)
def test_bad_arguments_are_refused_before_any_work(capsys, script, argv, says):
    """Before, --heads 3 (and --threads 0, --device gpu, ...) ended in a traceback from inside
    the model or torch; now argparse's one error line, exit 2."""
    with pytest.raises(SystemExit) as stopped:
        MODULES[script].parse_args(argv)
    assert stopped.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and says in errors[0], errors


def test_bench_train_with_a_bad_optim_file_is_one_line(tmp_path):
    optim = tmp_path / "optim.yaml"
    optim.write_text("lr: abc\n")
    proc = subprocess.run(
        [sys.executable, "-m", "translate.bench.train", "--optim", str(optim)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("error: ") and len(proc.stderr.splitlines()) == 1
