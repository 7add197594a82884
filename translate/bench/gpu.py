"""The GPU check in one command: the CUDA tests, short runs of the IWSLT2017 recipe's sizes in
bf16, fp16 and compiled, and the three benchmarks; no network (docs/gpu.md).

Every part is a subprocess with a time limit: one failing or hanging leaves the others to run.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import torch

from translate import io
from translate.bench import common, ladder
from translate.cli import run_plain_command
from translate.runtime import provenance

RECIPE = ["experiment=iwslt2017", "data=sample"]  # 2+2 layers, d_model 512, 8 heads
QUICK_MODEL = ["heads=2", "model.d_model=32", "model.d_ff=64", "data.tokenizer.vocab_size=300"]
QUICK_MODEL += ["decode.max_len_a=0", "decode.max_len_b=8"]
TINY = "--d-model 32 --heads 2 --threads 1"
QUICK_BENCH = {  # on the CPU, --quick's grids at a tiny model's sizes
    "attention": f"{TINY} --lengths 16 2048 --tokens 64 --repeats 1 --warmup 0",
    "train": f"{TINY} --layers 1 --d-ff 64 --vocab 100 --max-tokens 128 --gemm-size 256",
    "decode": f"{TINY} --layers 1 --d-ff 64 --vocab 100 --sentences 8 --rounds 1 --warmup 0",
}
TRAIN_RUNS = {"train_bf16": ("bf16", False), "train_fp16": ("fp16", False)}
TRAIN_RUNS["train_compile"] = ("bf16", True)  # part -> (precision, trainer.compile)
GPU_ONLY = ("cuda_tests", "train_fp16", "train_compile")
RESULT_KEYS = ("steps", "precision", "tokens_per_s", "peak_mem_mb", "dev_bleu", "bleu")


def train_command(args, name: str, precision: str, compile_: bool) -> list[str]:
    n, quick = args.steps, args.quick
    settings = (
        f"runtime.device={args.device} runtime.precision={precision} "
        f"trainer.compile={str(compile_).lower()} trainer.max_steps={n} "
        f"trainer.val_every_n_steps={max(1, n // 4)} optim.warmup_steps={max(1, n // 4)} "
        "trainer.max_minutes=null trainer.early_stopping_patience=null "
        f"trainer.progress_bar=false trainer.val_bleu_sentences={4 if quick else 100} "
        f"trainer.latency_sentences={1 if quick else 20}"
    ).split()
    paths = [f"data.cache_dir={args.out / 'cache'}", f"hydra.run.dir={args.out / 'runs' / name}"]
    sizes = QUICK_MODEL if quick else []
    return [sys.executable, "-m", "translate.train", *RECIPE, *sizes, *settings, *paths]


def commands(args) -> dict[str, list[str]]:
    python = [sys.executable]
    pytest = ["-m", "pytest", "-m", "cuda", "tests/cuda", "-q", "-p", "no:cacheprovider"]
    parts = {"cuda_tests": [*python, *pytest]}
    for name, (precision, compile_) in TRAIN_RUNS.items():
        parts[name] = train_command(args, name, precision, compile_)
    for bench, tiny in QUICK_BENCH.items():
        extra = tiny.split() if args.quick and args.device == "cpu" else []
        json_out = args.out / "bench" / f"{bench}.json"
        module = f"translate.bench.{bench}"
        parts[f"bench_{bench}"] = [*python, "-m", module, "--device", args.device, "--quick"]
        parts[f"bench_{bench}"] += [*extra, "--json", str(json_out)]
    return parts


def run_part(args, name: str, cmd: list[str]) -> dict:
    """Run one part into its log; its status, command, seconds and numbers."""
    if args.device == "cpu" and name in GPU_ONLY:
        return {"status": "skipped", "reason": "needs a CUDA GPU"}
    log, start, status = args.out / "logs" / f"{name}.log", time.perf_counter(), []

    def into(f) -> None:
        f.write(f"$ {shlex.join(cmd)}\n".encode())
        f.flush()
        try:
            proc = subprocess.run(
                cmd, cwd=common.ROOT, stdout=f, stderr=subprocess.STDOUT, timeout=args.timeout
            )
            status.append(proc.returncode)
        except subprocess.TimeoutExpired:
            status.append(124)

    io.write(log, into, "GPU check log")
    part = {"status": "passed" if status[0] == 0 else "failed", "exit": status[0]}
    part.update(command=shlex.join(cmd), seconds=round(time.perf_counter() - start, 1))
    results = args.out / "runs" / name / "results.json"
    if name.startswith("bench_"):
        results = args.out / "bench" / f"{name.removeprefix('bench_')}.json"
    if status[0] == 0 and results.is_file():
        found = json.loads(results.read_text())
        part.update(
            found["summary"] if "summary" in found else {k: found.get(k) for k in RESULT_KEYS}
        )
        if not name.startswith("bench_"):
            part.update(dev_loss_report(results.parent))
    return part


def dev_loss_report(run_dir: Path) -> dict:
    """A training part's dev-loss curve and whether its last loss rose (:func:`ladder.rose`)."""
    curve = ladder.dev_curve(run_dir)
    _, rise = ladder.lowest_dev_loss(curve)
    points = [[point["step"], point["dev_loss"]] for point in curve if "dev_loss" in point]
    return {"dev_loss_curve": points, "dev_loss_rose": ladder.rose(rise)}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = common.parser("gpu", __doc__, timing=False)
    parser.add_argument("--out", type=Path, required=True, help="where the report and runs go")
    parser.add_argument("--device", default="cuda", help="cuda | cuda:N | cpu (default: cuda)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes and few steps")
    parser.add_argument("--steps", type=int, help="updates per training run (200; --quick: 4)")
    parser.add_argument("--timeout", type=int, default=420, help="seconds per part")
    args = parser.parse_args(argv)
    args.steps = args.steps or (4 if args.quick else 200)
    args.out = args.out.resolve()
    if args.device != "cpu" and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: no CUDA GPU is visible; use --device cpu")
    io.make_folder(io.check_output_folder(args.out, "--out"), "--out")
    io.make_folder(args.out / "bench", "--out")
    parts = {}
    for name, cmd in commands(args).items():
        parts[name] = run_part(args, name, cmd)
        print(f"[gpu] {name}: {parts[name]['status']}", flush=True)
    command = shlex.join(["python", "-m", "translate.bench.gpu", *argv])
    machine = {**provenance.machine(torch.device(args.device)), "command": command}
    machine["torch_cuda"] = torch.version.cuda
    passed = all(part["status"] != "failed" for part in parts.values())
    doc = {"passed": passed, "machine": machine, "parts": parts}
    io.write(args.out / "gpu_acceptance.json", json.dumps(doc, indent=2) + "\n", "GPU check")
    print(f"[gpu] {'passed' if passed else 'FAILED'}; {args.out / 'gpu_acceptance.json'}")
    return 0 if passed else 1


if __name__ == "__main__":
    run_plain_command(main)
