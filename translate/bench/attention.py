"""Multi-head attention side by side: our ``MultiHeadAttention`` (``impl=manual`` and
``impl=sdpa``) against ``torch.nn.MultiheadAttention``.

Self-attention over ``x (B, L, D)``, the same weights, dropout 0, ``B = max(1, --tokens // L)``:
forward in eval mode without autograd (``nn.MultiheadAttention``'s fused path) and forward +
backward in training mode. Peak memory at L=2048 (CUDA: every L) is one call's growth; on the
CPU the peak resident size of a fresh subprocess per case (glibc returns its freed tensors).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from statistics import geometric_mean

import torch
from torch import nn

from translate.bench import common
from translate.cli import run_plain_command
from translate.nn.attention import MultiHeadAttention
from translate.runtime.device import synchronize
from translate.runtime.memory import peak_memory_mb, reset_peak_memory

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
IMPLS = ("torch", "manual", "sdpa")
REFERENCE_HEADS = 8
MEMORY_LENGTH = 2048  # the L of the memory target (CUDA: memory at every L)
CPU_BF16_TOKENS = 512  # bf16 without native matmuls: seconds per call at 2,048 tokens
GRID_HEADS = (1, 4, 8, 16)  # the default grid's head counts
TARGETS = {
    "mha_fwd_bwd_time_sdpa_vs_torch": ("<=", 1.05),
    "peak_mem_2048_sdpa_vs_manual": ("<=", 0.5),
}


@dataclass(frozen=True)
class Case:
    length: int
    heads: int
    dtype: str
    batch: int


def default_grid(device: torch.device, quick: bool) -> list[tuple[int, int, str]]:
    """``(L, H, dtype)`` cases: on CUDA 6 lengths x 4 head counts x 2 dtypes; on the CPU lengths
    at 8 heads, heads 1/4/16 at L=256 and 2048, in fp32, and bf16 at L=256 only (slow there)."""
    lengths = [64, 128, 256, 512, 1024, 2048]
    if quick:
        return [(256, 8, "fp32"), (2048, 8, "fp32")]
    if device.type == "cuda":
        return [(L, H, d) for d in ("fp32", "bf16") for L in lengths for H in GRID_HEADS]
    grid = [(L, REFERENCE_HEADS, "fp32") for L in lengths]
    grid += [(L, H, "fp32") for L in (256, 2048) for H in GRID_HEADS if H != REFERENCE_HEADS]
    grid += [(256, REFERENCE_HEADS, "bf16")]
    return sorted(grid, key=lambda c: (c[2] != "fp32", c[0], c[1]))


class Runner:
    """Forward and forward+backward calls of one module on one input."""

    def __init__(self, impl: str, case: Case, d_model: int, device, seed: int):
        dtype = DTYPES[case.dtype]
        torch.manual_seed(seed)
        module = nn.MultiheadAttention(d_model, case.heads, dropout=0.0, batch_first=True)
        if impl != "torch":
            module = MultiHeadAttention.from_torch(module, impl=impl)
        self.module = module.to(device=device, dtype=dtype)
        self.kwargs = {"need_weights": False} if impl == "torch" else {}
        gen = torch.Generator().manual_seed(seed + 1)
        shape = (case.batch, case.length, d_model)
        self.x = torch.randn(shape, generator=gen).to(device=device, dtype=dtype).requires_grad_()
        self.grad = torch.randn(shape, generator=gen).to(device=device, dtype=dtype)

    def _call(self, x):
        return self.module(x, x, x, **self.kwargs)[0]

    def forward(self) -> None:
        self.module.eval()
        with torch.no_grad():
            self._call(self.x)

    def forward_backward(self) -> None:
        self.module.train()
        self.clear()
        self._call(self.x).backward(self.grad)

    def clear(self) -> None:
        self.module.zero_grad(set_to_none=True)
        self.x.grad = None


def peak_growth(runner: Runner, device: torch.device) -> dict:
    """MiB that one forward, then one forward+backward, add at their peak to the memory in use."""
    out = {}
    for key, fn in (("fwd_mb", runner.forward), ("fwd_bwd_mb", runner.forward_backward)):
        runner.clear()
        synchronize(device)
        if device.type == "cuda":
            torch.cuda.empty_cache()
        reset_peak_memory(device)
        base = peak_memory_mb(device)
        fn()
        synchronize(device)
        out[key] = peak_memory_mb(device) - base
    runner.clear()
    return out


def memory_child(spec: dict) -> dict:
    """:func:`peak_growth` on the CPU in a fresh process, whose peak resident size (``VmHWM``)
    is its own (``ru_maxrss`` would not do: across ``exec`` Linux carries the parent's peak)."""
    torch.set_num_threads(spec["threads"])
    case, cpu = Case(**spec["case"]), torch.device("cpu")
    runner = Runner(spec["impl"], case, spec["d_model"], cpu, spec["seed"])
    # Load the kernels (oneDNN, the SDPA backend) on a small input, then start from a clean slate.
    small = Case(min(case.length, 16), case.heads, case.dtype, 1)
    warm = Runner(spec["impl"], small, spec["d_model"], cpu, spec["seed"])
    warm.forward()
    warm.forward_backward()
    del warm
    return peak_growth(runner, cpu)


def memory_cpu(impl: str, case: Case, args) -> dict:
    keys = ("d_model", "seed", "threads")
    spec = {"impl": impl, "case": asdict(case), **{k: getattr(args, k) for k in keys}}
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    cmd = [sys.executable, "-m", "translate.bench.attention", "--_memory-child", json.dumps(spec)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = common.parser("attention", __doc__)
    number = common.number
    parser.add_argument("--d-model", type=number(), default=512)
    parser.add_argument("--lengths", type=number(), nargs="+", help="with --heads/--dtypes: a grid")
    parser.add_argument("--heads", type=number(), nargs="+", help="default: see default_grid")
    parser.add_argument("--dtypes", nargs="+", choices=sorted(DTYPES))
    parser.add_argument("--tokens", type=number(), default=2048, help="batch = max(1, tokens // L)")
    parser.add_argument("--warmup", type=number(low=0), default=None, help="untimed rounds")
    parser.add_argument("--repeats", type=number(), default=None, help="timed rounds per case")
    parser.add_argument("--_memory-child", dest="memory_child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    common.check_heads(parser, args.d_model, args.heads or GRID_HEADS)
    return args


def grid(args, device: torch.device) -> list[Case]:
    if args.lengths or args.heads or args.dtypes:
        lengths = args.lengths or [256, 2048]
        heads = args.heads or [REFERENCE_HEADS]
        dtypes = args.dtypes or ["fp32"]
        cells = [(L, H, d) for d in dtypes for L in lengths for H in heads]
    else:
        cells = default_grid(device, args.quick)
    cuda = device.type == "cuda"
    tokens = {"fp32": args.tokens, "bf16": args.tokens if cuda else CPU_BF16_TOKENS}
    return [Case(L, H, d, max(1, tokens[d] // L)) for L, H, d in cells]


def case_settings(case: Case, args, device: torch.device) -> tuple[int, int]:
    """``(warmup rounds, timed rounds)``: on the CPU the first call is the only warm-up."""
    cuda = device.type == "cuda"
    warmup = args.warmup if args.warmup is not None else (2 if cuda else 0)
    repeats = 10 if cuda else 3 if args.quick or case.length >= 1024 else 5
    return warmup, args.repeats or repeats


def run_case(case: Case, args, device) -> list[dict]:
    warmup, repeats = case_settings(case, args, device)
    rows = {impl: {**asdict(case), "impl": impl, "repeats": repeats} for impl in IMPLS}
    runners = {impl: Runner(impl, case, args.d_model, device, args.seed) for impl in IMPLS}
    for runner in runners.values():  # the first call: lazy initialisation, kernels
        runner.forward()
        runner.forward_backward()
    fwd = common.interleaved({k: r.forward for k, r in runners.items()}, device, warmup, repeats)
    fwd_bwd = common.interleaved(
        {k: r.forward_backward for k, r in runners.items()}, device, warmup, repeats
    )
    for impl in IMPLS:
        rows[impl]["fwd_ms"] = 1e3 * common.median(fwd[impl])
        rows[impl]["fwd_bwd_ms"] = 1e3 * common.median(fwd_bwd[impl])
        rows[impl]["fwd_bwd_ms_runs"] = [1e3 * t for t in fwd_bwd[impl]]
        if device.type == "cuda":
            rows[impl].update(peak_growth(runners[impl], device))
        elif case.length == MEMORY_LENGTH:
            rows[impl].update(memory_cpu(impl, case, args))
    del runners
    torch_row, manual_row = rows["torch"], rows["manual"]
    for row in rows.values():
        row["fwd_bwd_vs_torch"] = common.ratio(row["fwd_bwd_ms"], torch_row["fwd_bwd_ms"])
        row["mem_vs_manual"] = common.ratio(row.get("fwd_bwd_mb"), manual_row.get("fwd_bwd_mb"))
    return list(rows.values())


def summarise(rows: list[dict]) -> dict:
    """sdpa's time ratios' geometric mean; its memory ratio at L=2048, 8 heads (else the fewest)."""
    sdpa = [row for row in rows if row["impl"] == "sdpa"]
    mem = [r for r in sdpa if r["length"] == MEMORY_LENGTH and r["mem_vs_manual"] is not None]
    mem.sort(key=lambda row: (row["heads"] != REFERENCE_HEADS, row["heads"]))
    return {
        "mha_fwd_bwd_time_sdpa_vs_torch": geometric_mean(r["fwd_bwd_vs_torch"] for r in sdpa),
        "peak_mem_2048_sdpa_vs_manual": mem[0]["mem_vs_manual"] if mem else None,
    }


COLUMNS = [
    ("dtype", "dtype", ""),
    ("length", "L", ""),
    ("heads", "H", ""),
    ("batch", "B", ""),
    ("impl", "impl", ""),
    ("fwd_ms", "fwd ms", ".3g"),
    ("fwd_bwd_ms", "fwd+bwd ms", ".3g"),
    ("fwd_bwd_vs_torch", "vs torch", ".2f"),
    ("fwd_mb", "fwd MiB", ".1f"),
    ("fwd_bwd_mb", "fwd+bwd MiB", ".1f"),
    ("mem_vs_manual", "mem vs manual", ".2f"),
]


def main(argv: Sequence[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.memory_child:
        print(json.dumps(memory_child(json.loads(args.memory_child))))
        return {}
    with common.session(args) as device:
        rows = []
        for case in grid(args, device):
            case_rows = run_case(case, args, device)
            common.print_table(case_rows, COLUMNS[5:], title=f"\n{case}")
            rows += case_rows
        print()
        common.print_table(rows, COLUMNS, title=f"MultiHeadAttention, d_model={args.d_model}")
        method = "torch.cuda.max_memory_allocated"
        if device.type != "cuda":
            method = "peak resident growth (VmHWM, reset through /proc/self/clear_refs) in a fresh "
            method += "subprocess per case, MALLOC_MMAP_THRESHOLD_=65536"
        summary = summarise(rows)
        return common.finish(
            "attention", argv, args, device, summary, TARGETS, memory_method=method, rows=rows
        )


if __name__ == "__main__":
    run_plain_command(main)
