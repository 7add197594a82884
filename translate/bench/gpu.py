"""The GPU acceptance in one command: CUDA tests, short recipe-sized training runs in bf16, fp16
and compiled, the three benchmarks, and a torchrun launch; no network (docs/gpu.md).

    python -m translate.bench.gpu --out outputs/gpu_acceptance            # a GPU box, ~8 min
    python -m translate.bench.gpu --device cpu --quick --out /tmp/accept  # the plumbing, CPU

Every part runs in its own subprocess, so one that fails or hangs (``--timeout``) leaves the
others to run. ``DIR/gpu_acceptance.json`` maps each part to passed / failed / skipped (with
the reason under ``details``), with its numbers and the machine; ``DIR/gpu_acceptance.md`` is
the summary table. The exit status is 1 if any part failed, else 0.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import torch

from translate import io
from translate.bench.ladder import ROSE_BY, dev_curve
from translate.cli import run_plain_command
from translate.runtime import provenance

ROOT = Path(__file__).resolve().parents[2]
# The IWSLT2017 recipe's sizes (conf/experiment/iwslt2017.yaml): 2+2 layers, d_model 512, 8 heads.
RECIPE = ["experiment=iwslt2017"]
QUICK_MODEL = ["heads=2", "model.d_model=32", "model.d_ff=64", "data.tokenizer.vocab_size=300"]
QUICK_DECODE = ["decode.max_len_a=0", "decode.max_len_b=8"]
TINY_BENCH = {
    "bench_attention": "--d-model 32 --heads 2 --lengths 16 256 --tokens 256 --mem-lengths 256 "
    "--repeats 1 --warmup 0 --threads 1",
    "bench_train": "--d-model 32 --heads 2 --layers 1 --d-ff 64 --vocab 100 --max-tokens 128 "
    "--warmup 1 --threads 1",
    "bench_decode": "--d-model 32 --heads 2 --layers 1 --d-ff 64 --vocab 100 --sentences 8 "
    "--rounds 1 --warmup 0 --threads 1",
}
# part -> (precision, trainer.compile)
TRAIN_RUNS = {"train_bf16": ("bf16", False), "train_fp16": ("fp16", False)}
TRAIN_RUNS["train_compile"] = ("bf16", True)
PARTS = ["cuda_tests", *TRAIN_RUNS, *TINY_BENCH, "torchrun"]
# What the report keeps of a training run's results.json.
RESULT_KEYS = ("steps", "precision", "device", "params", "tokens_per_s", "peak_mem_mb",
               "train_minutes", "dev_bleu", "bleu", "latency_ms")  # fmt: skip
LOSS_CHECK_STEPS = 20  # runs at least this long must end with a lower training loss
VALIDATIONS = 4  # per training run: a dev-loss curve, whose rise at the end is flagged


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m translate.bench.gpu", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--out", type=Path, required=True, help="where the reports and runs go")
    p.add_argument("--device", default="cuda", help="cuda | cuda:N | cpu (default: cuda)")
    p.add_argument("--quick", action="store_true", help="tiny sizes and few steps (plumbing)")
    p.add_argument("--data", default="sample", help="the data= group of the De-En corpus")
    p.add_argument("--data-dir", help="data.dir= (multi30k, jsonl, sample: a local folder)")
    p.add_argument("--override", action="append", default=[], help="more training overrides")
    p.add_argument("--steps", type=int, help="updates per training run (200; --quick: 4)")
    p.add_argument("--torchrun-procs", type=int, help="processes (CUDA: 1; the CPU: 2, gloo)")
    p.add_argument("--parts", nargs="+", choices=PARTS, default=PARTS, help="run only these")
    p.add_argument("--timeout", type=int, default=420, help="seconds per subprocess")
    args = p.parse_args(argv)
    args.device = torch.device(args.device)
    args.cuda = args.device.type == "cuda"
    args.steps = args.steps or (4 if args.quick else 200)
    args.torchrun_procs = args.torchrun_procs or (1 if args.cuda else 2)
    args.out = args.out.resolve()
    return args


def part(status: str, reason: str | None = None, **details) -> dict:
    return {"status": status, "reason": reason, **details}


def run(cmd: list[str], log: Path, timeout: int, env: dict | None = None) -> tuple[int, float]:
    """Run ``cmd`` in the checkout, output to ``log`` (written whole when it ends);
    ``(exit status, seconds)``, 124 = timeout."""
    drop = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TRANSLATE_DEBUG")
    env = {k: v for k, v in {**os.environ, **(env or {})}.items() if k not in drop}
    start, status = time.perf_counter(), []

    def into(f) -> None:
        f.write(f"$ {shlex.join(cmd)}\n".encode())
        f.flush()
        try:
            status.append(
                subprocess.run(
                    cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=timeout
                ).returncode
            )
        except subprocess.TimeoutExpired:
            status.append(124)

    io.write(log, into, "GPU check log")
    return status[0], round(time.perf_counter() - start, 1)


def tail(log: Path, lines: int = 3) -> str:
    text = log.read_text(errors="replace").strip().splitlines() if log.is_file() else []
    return " | ".join(line.strip() for line in text[-lines:])[-600:]


def exit_reason(rc: int, log: Path, timeout: int) -> str:
    if rc == 124:
        return f"timed out after {timeout} s; log {log}"
    return f"exit status {rc}: {tail(log)} (log {log})"


# ---------------------------------------------------------------- (a) the CUDA tests


def junit_counts(path: Path) -> dict:
    suite = ET.parse(path).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    cases = suite.iter("testcase")
    counts["not_passed"] = [
        f"{c.get('name')}: {c.find(k).get('message', '')[:200]}"
        for c in cases
        for k in ("failure", "error")
        if c.find(k) is not None
    ]
    first_skip = next((s.get("message", "") for s in suite.iter("skipped")), "")
    counts["skip_reason"] = first_skip[:200]
    return counts


def cuda_tests(args) -> dict:
    junit, log = args.out / "cuda_tests.xml", args.out / "logs" / "cuda_tests.log"
    pytest = [
        sys.executable,
        "-m",
        "pytest",
        *["-m", "cuda", "tests/cuda", "-q", "-p", "no:cacheprovider"],
    ]
    cmd = [*pytest, f"--junitxml={junit}"]
    junit.unlink(missing_ok=True)
    rc, seconds = run(cmd, log, args.timeout)
    info = {"command": shlex.join(cmd), "seconds": seconds, "log": str(log)}
    if not junit.is_file():
        return part("failed", exit_reason(rc, log, args.timeout), **info)
    counts = junit_counts(junit)
    info.update(counts, junit=str(junit))
    if rc != 0 or counts["tests"] == 0:
        failed = "; ".join(counts["not_passed"][:5])
        return part("failed", failed or exit_reason(rc, log, args.timeout), **info)
    if counts["skipped"] == counts["tests"]:
        why = f"all {counts['tests']} CUDA tests skipped: {counts['skip_reason']}"
        return part("skipped", why, **info)
    return part("passed", **info)


# ---------------------------------------------------------------- (b, d) training runs


def train_overrides(args, run_dir: Path, precision: str, compile_: bool) -> list[str]:
    n, quick = args.steps, args.quick
    data = [f"data={args.data}", *([f"data.dir={args.data_dir}"] if args.data_dir else [])]
    short = (
        f"runtime.device={args.device} runtime.precision={precision} "
        f"trainer.compile={str(compile_).lower()} trainer.max_steps={n} "
        f"trainer.val_every_n_steps={max(1, n // VALIDATIONS)} "
        f"optim.warmup_steps={max(1, n // 4)} "
        "trainer.max_minutes=null trainer.early_stopping_patience=null "
        "trainer.progress_bar=false trainer.log_every_n_steps=1 "
        f"trainer.val_bleu_sentences={4 if quick else 100} "
        f"trainer.latency_sentences={1 if quick else 20}"
    ).split()
    sizes = QUICK_MODEL + QUICK_DECODE if quick else []
    paths = [f"data.cache_dir={args.out / 'cache'}", f"hydra.run.dir={run_dir}"]
    return [*RECIPE, *data, *sizes, *short, *paths, *args.override]


def losses(run_dir: Path) -> dict:
    """First and last training loss and the last dev loss, from the run's TensorBoard."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    scalars = events.Tags().get("scalars", [])
    train = [e.value for e in events.Scalars("train/loss")] if "train/loss" in scalars else []
    dev = [e.value for e in events.Scalars("dev/loss")] if "dev/loss" in scalars else []
    return {
        "loss_first": train[0] if train else None,
        "loss_last": train[-1] if train else None,
        "dev_loss": dev[-1] if dev else None,
    }


def dev_loss_curve(run_dir: Path) -> dict:
    """Each validation's dev loss, and whether the last is above the lowest by more than
    :data:`ROSE_BY` (``dev_loss_rose``: the mark of overfitting, reported, not failed)."""
    curve = [(p["step"], p["dev_loss"]) for p in dev_curve(run_dir) if "dev_loss" in p]
    rose = bool(curve) and curve[-1][1] - min(loss for _, loss in curve) > ROSE_BY
    return {"dev_loss_curve": curve, "dev_loss_rose": rose}


def check_run(args, run_dir: Path, precision: str) -> tuple[str | None, dict]:
    """Why a finished training run is not acceptable (None: it is), and its numbers."""
    path = run_dir / "results.json"
    if not path.is_file():
        return f"no {path}", {}
    res = json.loads(path.read_text())
    numbers = {k: res.get(k) for k in RESULT_KEYS} | losses(run_dir) | dev_loss_curve(run_dir)
    log = run_dir / "train.log"
    text = log.read_text(errors="replace") if log.is_file() else ""
    numbers["skipped_updates"] = text.count("update skipped")
    first, last = numbers["loss_first"], numbers["loss_last"]
    if res.get("steps") != args.steps:
        return f"trained {res.get('steps')} steps, not {args.steps}", numbers
    if res.get("precision") != precision:
        return f"ran in precision {res.get('precision')}, not {precision}", numbers
    if first is None or not all(math.isfinite(v) for v in (first, last)):
        return f"training loss missing or not finite: first {first}, last {last}", numbers
    if args.steps >= LOSS_CHECK_STEPS and not last < first:
        return f"training loss did not fall: first {first:.4f}, last {last:.4f}", numbers
    return None, numbers


def launch_training(args, name: str, launcher: list[str], precision: str, compile_: bool):
    run_dir = args.out / "runs" / name
    cmd = [*launcher, "-m", "translate.train", *train_overrides(args, run_dir, precision, compile_)]
    log = args.out / "logs" / f"{name}.log"
    rc, seconds = run(cmd, log, args.timeout, env={"HYDRA_FULL_ERROR": "1"})
    info = dict(command=shlex.join(cmd), seconds=seconds, log=str(log), run_dir=str(run_dir))
    if rc != 0:
        return part("failed", exit_reason(rc, log, args.timeout), **info), run_dir
    why, numbers = check_run(args, run_dir, precision)
    return part("failed" if why else "passed", why, **info, **numbers), run_dir


def train(args, name: str) -> dict:
    precision, compile_ = TRAIN_RUNS[name]
    if precision == "fp16" and not args.cuda:
        return part(
            "skipped",
            "fp16 training needs a CUDA GPU (the CPU has no fp16 recipe; "
            "tests/training/test_precision.py checks the scaler on the CPU)",
        )
    if compile_ and not args.cuda and args.quick:
        return part(
            "skipped",
            "--quick on the CPU: inductor compilation alone takes minutes "
            "here; tests/training/test_precision.py compares compiled with eager",
        )
    return launch_training(args, name, [sys.executable], precision, compile_)[0]


def torchrun(args) -> dict:
    procs = args.torchrun_procs
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    launcher = [*torchrun, f"--nproc_per_node={procs}"]
    precision = "bf16" if args.cuda else "32"
    result, run_dir = launch_training(args, "torchrun", launcher, precision, False)
    log = run_dir / "train.log"
    text = log.read_text(errors="replace") if log.is_file() else ""
    backend = next((w for w in ("nccl", "gloo") if f"backend {w}" in text), None)
    result.update(processes=procs, process_group=backend)
    expected = "nccl" if args.cuda else "gloo"
    if result["status"] == "passed" and backend != expected:
        result.update(status="failed", reason=f"DDP backend {backend}, expected {expected}")
    return result


# ---------------------------------------------------------------- (c) benchmarks


def bench(args, name: str) -> dict:
    out = args.out / "bench" / f"{name}.json"
    extra = TINY_BENCH[name].split() if args.quick and not args.cuda else []
    module = f"translate.bench.{name.removeprefix('bench_')}"
    script = [sys.executable, "-m", module, "--device", str(args.device), "--quick"]
    cmd = [*script, *extra, "--json", str(out)]
    io.make_folder(out.parent, "--out")  # --out is new, so the JSON is too
    log = args.out / "logs" / f"{name}.log"
    rc, seconds = run(cmd, log, args.timeout)
    info = {"command": shlex.join(cmd), "seconds": seconds, "log": str(log), "json": str(out)}
    if rc != 0 or not out.is_file():
        return part("failed", exit_reason(rc, log, args.timeout), **info)
    report = json.loads(out.read_text())
    info.update(summary=report.get("summary"), device_name=report["machine"].get("device_name"))
    if not report.get("summary"):
        return part("failed", "the report has no summary", **info)
    return part("passed", **info)


# ---------------------------------------------------------------- the reports


def machine(args, argv: list[str]) -> dict:
    """The package's description of the machine, with what a GPU acceptance adds to it: the
    command, the GPUs, the driver and the CUDA libraries torch was built with."""
    cuda = args.cuda and torch.cuda.is_available()
    info = {
        **provenance.machine(args.device),
        "command": shlex.join(["python", "-m", "translate.bench.gpu", *argv]),
        "cwd": str(ROOT),
        "gpus": torch.cuda.device_count() if cuda else 0,
        "driver": None,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
    }
    if shutil.which("nvidia-smi"):
        query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        proc = subprocess.run(query, capture_output=True, text=True, timeout=30)
        info["driver"] = proc.stdout.strip().splitlines()[0] if proc.returncode == 0 else None
    return info


def markdown(doc: dict) -> str:
    m = doc["machine"]
    lines = [
        "# GPU acceptance",
        "",
        f"{m['date']} on {m['device_name']} ({m['device']}), torch {m['torch']}, CUDA "
        f"{m['torch_cuda']}, driver {m['driver']}",
        "",
        f"`{m['command']}`",
        "",
        "| part | status | seconds | numbers / reason |",
        "|---|---|---|---|",
    ]
    keys = ("tokens_per_s", "peak_mem_mb", "loss_first", "loss_last", "dev_loss_rose", "bleu")
    keys += ("tests", "skipped")
    for name, status in doc["parts"].items():
        d = doc["details"][name]
        shown = [
            f"{k} {d[k]:.4g}" if isinstance(d[k], float) else f"{k} {d[k]}"
            for k in keys
            if d.get(k) is not None
        ]
        shown += [f"{k} {v:.3g}" for k, v in (d.get("summary") or {}).items() if v is not None]
        text = "; ".join(filter(None, [d.get("reason"), ", ".join(shown), d.get("note")]))
        lines.append(f"| {name} | {status} | {d.get('seconds', '')} | {text.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def run_part(args, name: str) -> dict:
    if name not in args.parts:
        return part("skipped", "not selected (--parts)")
    print(f"[gpu_acceptance] {name} ...", flush=True)
    try:
        if name == "cuda_tests":
            return cuda_tests(args)
        if name in TRAIN_RUNS:
            return train(args, name)
        return bench(args, name) if name in TINY_BENCH else torchrun(args)
    except Exception as err:  # a broken part is a failed part; the others still run
        return part("failed", f"{type(err).__name__}: {err}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.cuda and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: no CUDA GPU is visible; use --device cpu")
    io.make_folder(io.check_output_folder(args.out, "--out"), "--out")  # a run's dirs are new
    start = time.perf_counter()
    details = {}
    for name in PARTS:
        details[name] = d = run_part(args, name)
        print(f"[gpu_acceptance] {name}: {d['status']} {d['reason'] or ''}".rstrip(), flush=True)
    doc = {
        "parts": {name: d["status"] for name, d in details.items()},
        "passed": all(d["status"] != "failed" for d in details.values()),
        "seconds": round(time.perf_counter() - start, 1),
        "machine": machine(args, argv),
        "settings": {k: getattr(args, k) for k in ("quick", "steps", "data", "data_dir")},
        "overrides": args.override,
        "details": details,
    }
    io.write(args.out / "gpu_acceptance.json", json.dumps(doc, indent=2) + "\n", "GPU check")
    io.write(args.out / "gpu_acceptance.md", markdown(doc), "GPU check")
    print(
        f"[gpu_acceptance] {'passed' if doc['passed'] else 'FAILED'} in {doc['seconds']} s; "
        f"{args.out / 'gpu_acceptance.md'}"
    )
    return 0 if doc["passed"] else 1


if __name__ == "__main__":
    run_plain_command(main)
