"""What the benchmarks share: options, interleaved timing, the machine's large-GEMM reference
(:class:`Gemm`), a plain-text table and the JSON report with the machine it ran on."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import shlex
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from statistics import fmean, median

import numpy as np
import torch
from torch import Tensor

from translate import io
from translate.errors import UserError, plain_text
from translate.io import STDOUT
from translate.runtime.device import synchronize
from translate.runtime.memory import keep_freed_memory
from translate.runtime.provenance import machine
from translate.runtime.timing import rotated, timed

ROOT = Path(__file__).resolve().parents[2]  # the checkout: conf/, outputs/, git


def multi30k_lengths(n: int, rng) -> tuple:
    """``n`` source and target subword counts (no BOS/EOS) like Multi30k De-En train's under its
    joint 5k SentencePiece model: German 16.2 +- 6.3 (log-normal, log-mean 2.715, log-sd 0.373),
    English / German 0.95 +- 0.18 (measured 15.3 +- 5.3); clipped to 3..60 (longest: 58)."""
    src = np.clip(np.round(rng.lognormal(2.715, 0.373, n)), 3, 60).astype(np.int64)
    tgt = np.clip(np.round(src * rng.normal(0.95, 0.18, n)), 3, 60).astype(np.int64)
    return src, tgt


def number(kind: type = int, low: float = 1, high: float | None = None) -> Callable[[str], float]:
    """An argparse ``type``: a ``kind`` number in ``low..high`` (``--threads 0``: one line)."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not (math.isfinite(value) and low <= value and (high is None or value <= high)):
            raise argparse.ArgumentTypeError(
                f"{text} must be >= {low}" if high is None else f"{text} must be in {low}..{high}"
            )
        return value

    return parse


def device_arg(text: str) -> str:
    """An argparse ``type``: a name ``torch.device`` reads."""
    try:
        torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a device: cpu, cuda or cuda:N") from None
    return text


def existing_file(text: str) -> Path:
    """An argparse ``type``: a file that is there."""
    if not Path(text).is_file():
        raise argparse.ArgumentTypeError(f"{text} is not a file")
    return Path(text)


def check_heads(parser: argparse.ArgumentParser, d_model: int, heads: Sequence[int]) -> None:
    """Stop in one line on a head count the model cannot split ``--d-model`` into."""
    for h in heads:
        if d_model % h:
            parser.error(
                f"--heads {h} does not divide --d-model {d_model}; pick a divisor of {d_model}"
            )


def json_output(name: str) -> Callable[[str], io.Output]:
    """An argparse ``type``: benchmark ``name``'s JSON, checked before any work."""

    def parse(text: str) -> io.Output:
        try:
            return io.check_output_file(text, "--json", f"{name} benchmark result")
        except UserError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return parse


def parser(name: str, doc: str, timing: bool = True) -> argparse.ArgumentParser:
    """``python -m translate.bench.<name>``'s parser; ``timing``: with the timing options."""
    prog = f"python -m translate.bench.{name}"
    parser = argparse.ArgumentParser(prog=prog, description=plain_text(doc.split("\n\n")[0]))
    if timing:
        add = parser.add_argument
        add("--device", type=device_arg, default="cpu", help="cpu | cuda | cuda:N (default: cpu)")
        add("--threads", type=number(), default=2, help="torch.set_num_threads (CPU)")
        add("--seed", type=number(low=0), default=0)
        add("--json", type=json_output(name), metavar="PATH", help="write results")
        add("--quick", action="store_true", help="a reduced grid that finishes in under a minute")
        add_malloc_arg(parser)
    return parser


def add_malloc_arg(parser: argparse.ArgumentParser) -> None:
    why = "glibc's default malloc; without it freed memory is kept for reuse, as the commands "
    why += "keep it (keep_freed_memory in conf/)"
    parser.add_argument("--system-malloc", action="store_true", help=why)


@contextlib.contextmanager
def session(args: argparse.Namespace) -> Iterator[torch.device]:
    """The run's device, at ``--threads`` (restored after: the tests run ``main`` in-process)."""
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: no CUDA GPU is visible")
    saved = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    if not args.system_malloc:  # for the process: nothing to restore
        keep_freed_memory()
    try:
        yield device
    finally:
        torch.set_num_threads(saved)


def interleaved(fns: dict, device: torch.device, warmup: int, repeats: int) -> dict[str, list]:
    """Seconds per call of each function in ``repeats`` rotated rounds after ``warmup`` each."""
    names = list(fns)
    for name in names * warmup:
        fns[name]()
    synchronize(device)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in rotated(names, r):
            times[name].append(timed(fns[name], device)[1])
    return times


def decode_row(mode: str, runs: list[float], hyps: list, n_sentences: int) -> dict:
    """One timed decoding of ``n_sentences``, from the median of its rounds' seconds."""
    seconds = median(runs)
    return {
        "mode": mode,
        "sentences_per_s": n_sentences / seconds,
        "ms_per_sentence": 1e3 * seconds / n_sentences,
        "mean_output_len": fmean(len(h) for h in hyps) if hyps else 0.0,
        "seconds_runs": runs,
    }


DECODE_COLUMNS = [
    ("sentences_per_s", "sent/s", ".4g"),
    ("ms_per_sentence", "ms/sent", ".3g"),
    ("mean_output_len", "out len", ".1f"),
]


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0 or (isinstance(a, float) and math.isnan(a)):
        return None
    return a / b


GEMM_WARMUP = 3  # untimed calls before the first timed one


class Gemm:
    """The machine's large-GEMM reference: ``torch.mm`` of ``n x n`` operands into a preallocated
    ``C`` (2048 fp32 on the CPU, 8192 bf16 on CUDA), drawn from a private generator."""

    def __init__(self, device: torch.device, n: int | None, seed: int = 0) -> None:
        cuda = device.type == "cuda"
        self.device, self.n = device, n or (8192 if cuda else 2048)
        self.dtype = torch.bfloat16 if cuda else torch.float32
        gen = torch.Generator().manual_seed(seed)
        self.a = torch.randn(self.n, self.n, generator=gen).to(device, self.dtype)
        self.b = torch.randn(self.n, self.n, generator=gen).to(device, self.dtype)
        self.c = torch.empty(self.n, self.n, device=device, dtype=self.dtype)
        self.flops = 2 * self.n**3

    def __call__(self) -> Tensor:
        return torch.mm(self.a, self.b, out=self.c)

    def warm_up(self) -> None:
        for _ in range(GEMM_WARMUP):
            self()
        synchronize(self.device)

    def report(self, seconds: Sequence[Sequence[float]]) -> dict:
        """The JSON section from the timed calls' wall seconds, grouped by round: ``tflops`` is
        ``2 n^3`` over the median call; ``tflops_runs``, each round's calls together."""
        calls = [s for round_ in seconds for s in round_]
        return {
            "op": f"torch.mm, {self.n} x {self.n} @ {self.n} x {self.n}",
            "size": self.n,
            "dtype": "bf16" if self.dtype == torch.bfloat16 else "fp32",
            "threads": torch.get_num_threads(),
            "flops_per_call": self.flops,
            "warmup_calls": GEMM_WARMUP,
            "timed_calls": len(calls),
            "call_s": median(calls),
            "tflops": self.flops / median(calls) / 1e12,
            "tflops_runs": [self.flops * len(r) / sum(r) / 1e12 for r in seconds],
        }


def finish(name: str, argv, args, device, summary: dict, targets=None, **sections) -> dict:
    """Print the summary against its targets and write ``--json``, the summary first."""
    print_summary(summary, targets or {})
    result = {
        "summary": summary,
        "benchmark": name,
        "machine": machine(device),
        "command": shlex.join(["python", "-m", f"translate.bench.{name}", *argv]),
        "args": {k: _plain(v) for k, v in vars(args).items()},
        **({"targets": {k: list(v) for k, v in targets.items()}} if targets else {}),
        **sections,
    }
    if args.json is not None:
        args.json.write(json.dumps(result, indent=2, default=str) + "\n")
        if args.json.path is not None:
            print(f"wrote {args.json.path}")
    return result


def _plain(value):
    """An argument as the JSON records it: a path (or a checked output) as its text."""
    if isinstance(value, io.Output):
        return STDOUT if value.path is None else str(value.path)
    return str(value) if isinstance(value, Path) else value


def fmt(value, spec: str = ".3g") -> str:
    if value is None:
        return "-"
    return format(value, spec) if isinstance(value, float) else str(value)


def print_table(rows: list[dict], columns: list[tuple[str, str, str]], title: str = "") -> str:
    """``columns``: ``(key, header, format spec)``; returns the text printed."""
    header = [h for _, h, _ in columns]
    cells = [[fmt(row.get(k), spec) for k, _, spec in columns] for row in rows]
    widths = [max([len(h), *(len(c[i]) for c in cells)]) for i, h in enumerate(header)]
    lines = [title] if title else []
    lines.append("  ".join(h.rjust(w) for h, w in zip(header, widths)))
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells)
    text = "\n".join(lines)
    print(text, flush=True)
    return text


def print_summary(summary: dict, targets: dict[str, tuple[str, float]]) -> None:
    """One line per summary ratio, with its target (``(">=" | "<=", bound)``) and met/not met."""
    print()
    for key, value in summary.items():
        line = f"{key} = {fmt(value, '.3f')}"
        if key in targets:
            op, bound = targets[key]
            if value is None:
                verdict = "not measured"
            else:
                met = value >= bound if op == ">=" else value <= bound
                verdict = "met" if met else "NOT met"
            line += f"   (target {op} {bound}: {verdict})"
        print(line)
