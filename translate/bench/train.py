"""Training throughput side by side: our ``Seq2SeqTransformer`` (``impl=manual`` and
``impl=sdpa``) against the same architecture built from ``torch.nn.Transformer``.

    python -m translate.bench.train --json outputs/bench/train.json
    python -m translate.bench.train --quick
    python -m translate.bench.train --cpu-time --profile
    python -m translate.bench.train --device cuda --precision bf16 --compile --max-tokens 8192

The sizes default to ``experiment=multi30k_cpu`` (d_model 256, 8 heads, 2+2 layers, ffn 512,
5k vocabulary, dropout 0.1, attention and activation dropout 0, pre-norm, 2048-token batches).
The baseline has the same widths, depths, dropouts and norm placement, and wraps
``nn.Transformer`` in our own :class:`translate.nn.model.TokenEmbedding` (the tied table scaled
by ``sqrt(d_model)`` plus sinusoidal positions, and the tied output projection) initialised by
our :func:`translate.nn.model.init_weights`, so both have the same parameter count and
initialisation; both project to the vocabulary only at the real target positions (the
``target_index`` that ``Trainer`` passes). All three train on the same batches with the same
:class:`translate.training.step.Trainer`, with the optimiser settings of ``--optim`` (default
``conf/optim/adam_inverse_sqrt.yaml``: Adam, inverse-sqrt schedule, label smoothing 0.1,
clipping at 1.0), precision and thread count. A timed step is ``Trainer.step``: forward, loss,
backward, clipping and the optimizer update.

Batches are synthetic token ids (``--data synthetic``, the default) with a length distribution
like Multi30k's under its joint 5k SentencePiece model (``common.multi30k_lengths``), cut by
:class:`translate.data.batching.TokenBatchSampler` from a pool as large as Multi30k's train split
(so the batches are as full as in training), or the built-in sample corpus
(``--data sample``).
Runs are interleaved step by step (A B C on one batch, B C A on the next, ...): each round
trains every model once on each of the same ``--batches`` batches; a model's tokens/s in a round
is its source + target non-pad tokens over its summed step times, and the table shows the
median over rounds. ``--cpu-time`` adds the same figures by process CPU time
(``time.process_time``), which other jobs on a shared machine barely move. ``--profile`` then
trains one more round per model under ``torch.profiler`` and prints its top operators by self
time.

How close to the machine: each model's matmul FLOP/s (:func:`train_flops`, an explicit
per-layer count, per round times its rounds per second) over the FLOP/s of the machine's own
large GEMM measured in the same run (:class:`common.Gemm`: a square ``torch.mm``,
``--gemm-size`` 2048 in fp32 on the CPU at the script's thread count, 8192 in bf16 on CUDA;
``--gemm-dtype`` to change). It gets ``common.GEMM_WARMUP`` untimed calls after the models'
warm-up, then takes a turn in the step-level interleaving, once per batch, as if it were one
more model; its FLOP/s is ``2 n^3`` over the median timed call. The row's
``matmul_efficiency`` is the model's FLOP/s over that.
The ``batches`` section gives the batches' real/padded token ratio per side and overall.

``summary``: ``train_tokens_per_s_sdpa_vs_torch`` (target >= 1.0),
``train_tokens_per_s_manual_vs_torch`` (target >= 0.8) and ``train_matmul_efficiency`` (the
sdpa model's matmul FLOP/s over the GEMM's; no target).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from torch import nn

from translate.bench import common
from translate.bench.torch_baseline import TorchTransformer
from translate.cli import run_plain_command
from translate.data.batching import Batch, TokenBatchSampler, collate, padding_ratio
from translate.data.tokenizer import Tokenizer
from translate.nn.model import Seq2SeqTransformer, count_parameters
from translate.runtime.device import resolve_precision, synchronize
from translate.runtime.timing import rotated, timed, timed_cpu
from translate.schema import OptimSettings
from translate.settings import build as build_settings
from translate.training.step import Trainer

MODELS = ("torch", "manual", "sdpa")
TARGETS = {
    "train_tokens_per_s_sdpa_vs_torch": (">=", 1.0),
    "train_tokens_per_s_manual_vs_torch": (">=", 0.8),
}
MULTI30K_TRAIN_PAIRS = 29_000  # the synthetic pool's size (see synthetic_batches)
OPTIM_CONF = common.ROOT / "conf" / "optim" / "adam_inverse_sqrt.yaml"
GEMM = "gemm"  # the GEMM reference's turn in the interleaving
COLUMNS = [
    ("model", "model", ""),
    ("params", "params", ""),
    ("tokens_per_s", "tokens/s", ".4g"),
    ("step_s", "s/step", ".3g"),
    ("vs_torch", "vs torch", ".3f"),
]
CPU_COLUMNS = [
    ("cpu_tokens_per_s", "tokens/CPU-s", ".4g"),
    ("cpu_step_s", "CPU-s/step", ".3g"),
    ("cpu_vs_torch", "CPU vs torch", ".3f"),
]
FLOP_COLUMNS = [
    ("tflops", "TFLOP/s", ".3g"),
    ("matmul_efficiency", "of GEMM", ".3f"),
    ("mfu", "MFU", ".1%"),
]


# ---------------------------------------------------------------------------- batches


def synthetic_batches(args, vocab: int) -> list[Batch]:
    """``args.batches`` full batches cut by ``TokenBatchSampler`` from a pool of Multi30k train's
    size: the pool sets how tight the length buckets are. At 29,000 pairs they are as tight as
    in training on the real corpus (real/padded about 94% source, 97% overall); the pool of
    1,024 pairs this script drew before left the source side 66% real."""
    rng = np.random.default_rng(args.seed)
    n = max(MULTI30K_TRAIN_PAIRS, 4 * args.batches * args.max_tokens // 16)
    src_lens, tgt_lens = common.multi30k_lengths(n, rng)
    sampler = TokenBatchSampler(src_lens + 1, tgt_lens + 1, args.max_tokens, True, args.seed)
    # Full batches only: a bucket's leftover (down to one sentence) times per-call overheads,
    # not training, and the shuffled order put one into --quick's two batches.
    full = [idx for idx in sampler if _padded(idx, src_lens, tgt_lens) >= args.max_tokens // 2]

    def pair(i: int) -> tuple:  # random token ids of the drawn lengths
        return i, rng.integers(4, vocab, src_lens[i]), rng.integers(4, vocab, tgt_lens[i])

    return [collate([pair(i) for i in idx]) for idx in full[: args.batches]]


def _padded(idx: list[int], src_lens, tgt_lens) -> int:
    """The larger side's padded token count of a batch (+1: the EOS)."""
    return len(idx) * (max(max(src_lens[idx]), max(tgt_lens[idx])) + 1)


def sample_batches(args) -> tuple[list[Batch], int]:
    from translate.data.batching import make_loader
    from translate.data.corpus import load_corpus
    from translate.settings import data_settings

    # Composed as the commands compose it: data/sample.yaml only lists its differences from
    # data/base.yaml (read alone, its defaults list was an unknown key data.defaults).
    with initialize_config_dir(str(common.ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", ["data=sample", f"data.cache_dir={args.cache_dir}"])
    corpus = load_corpus(data_settings(cfg.data))
    loader = make_loader(corpus.splits["train"], args.max_tokens, shuffle=True, seed=args.seed)
    batches = []
    for batch in loader:
        batches.append(batch)
        if len(batches) == args.batches:
            break
    return batches, corpus.tokenizer.vocab_size


def load_batches(args) -> tuple[list[Batch], int]:
    if args.data == "sample":
        return sample_batches(args)
    return synthetic_batches(args, args.vocab), args.vocab


# ---------------------------------------------------------------------------- models


def load_optim(path: Path) -> OptimSettings:
    """The optimiser settings of a ``conf/optim`` file, typed and checked by the package."""
    return build_settings(OptimSettings, OmegaConf.load(path), "optim")


def model_kwargs(args, vocab: int) -> dict:
    return dict(
        vocab_size=vocab,
        d_model=args.d_model,
        num_heads=args.heads,
        num_encoder_layers=args.layers,
        num_decoder_layers=args.layers,
        d_ff=args.d_ff,
        dropout=args.dropout,
        attention_dropout=args.attention_dropout,
        activation_dropout=args.activation_dropout,
        activation=args.activation,
        norm_first=not args.post_norm,
        pad_id=Tokenizer.PAD,
    )


def build(name: str, kwargs: dict, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    if name == "torch":
        return TorchTransformer(**kwargs)
    return Seq2SeqTransformer(**kwargs, attention_impl=name)


def make_trainers(args, vocab, optim, device, precision) -> tuple[dict, dict]:
    """``({name: Trainer}, {name: parameter count})`` for ``args.models``."""
    kwargs = model_kwargs(args, vocab)
    trainers, params = {}, {}
    for name in args.models:
        model = build(name, kwargs, args.seed).to(device)
        params[name] = count_parameters(model)
        compiled = torch.compile(model) if args.compile else None
        trainers[name] = Trainer(model, optim, device, precision, Tokenizer.PAD, compiled)
    return trainers, params


def train_flops(batch: Batch, args, vocab: int) -> float:
    """Matmul FLOPs of one training step: an explicit per-layer count (not ``6 N tokens``),
    2 FLOPs per multiply-add, forward x 3 for forward+backward (the backward computes the
    gradients of both operands of every matmul). Per layer: the q/k/v/output projections, the
    two feed-forward linears, attention's ``Q K^T`` and ``A V`` (full ``T x T`` in the decoder's
    self-attention: no causal halving), and the decoder's cross-attention (q/output projections
    on the target, k/v projections of the memory, ``Q K^T`` and ``A V`` over ``T x S``): over
    the padded ``B x S`` and ``B x T`` positions, which the layers compute (the ``batches``
    section's padding ratio says how much of that is real). Plus the tied vocabulary projection
    over the real target tokens only: ``Trainer`` passes ``target_index``, and both models
    project just those. Not counted: the embedding lookup (a gather), norms, softmax, dropout,
    the loss and the optimizer."""
    B, S = batch.src.shape
    T = batch.tgt_in.size(1)
    D, F, L = args.d_model, args.d_ff, args.layers
    enc = B * S * (4 * D * D + 2 * D * F) + 2 * B * S * S * D
    dec = (
        B * T * (4 * D * D + 2 * D * F) + 2 * B * T * T * D  # self-attention, feed-forward
        + B * T * 2 * D * D + B * S * 2 * D * D + 2 * B * T * S * D  # cross-attention
    )  # fmt: skip
    macs = L * (enc + dec) + batch.num_tgt_tokens * D * vocab  # + the tied output projection
    return 3 * 2 * macs


# ---------------------------------------------------------------------------- timing


def warm_up(trainers: dict[str, Trainer], batches: list[Batch], args, device, gemm) -> None:
    """Kernels, allocator, Adam state; compiled models see every batch shape twice (the second
    distinct shape recompiles with dynamic sizes), so no compile is timed. Then the GEMM."""
    warmup = max(args.warmup, 2 * len(batches)) if args.compile else args.warmup
    for trainer in trainers.values():
        for i in range(warmup):
            trainer.step([batches[i % len(batches)]])
    synchronize(device)
    gemm.warm_up()


def train_rounds(trainers: dict[str, Trainer], batches: list[Batch], rounds: int, device, gemm):
    """``(wall, cpu, gemm_s)``: per model, tokens per second of each round by wall-clock and by
    process CPU time; the GEMM's wall seconds per call, by round. Interleaved at the step: in
    round r every batch is trained on by every model in turn and the GEMM runs once, starting
    with entry (r + batch index) mod (models + 1) of ``[*models, GEMM]``, so a few seconds of
    interference from elsewhere on the machine fall on all of them alike."""
    names = [*trainers, GEMM]
    wall: dict[str, list[float]] = {name: [] for name in trainers}
    cpu: dict[str, list[float]] = {name: [] for name in trainers}
    gemm_s: list[list[float]] = []
    for r in range(rounds):
        seconds = {name: [0.0, 0.0] for name in trainers}
        tokens = dict.fromkeys(trainers, 0)
        gemm_s.append([])
        for i, batch in enumerate(batches):
            for name in rotated(names, r + i):
                if name == GEMM:
                    gemm_s[-1].append(timed(gemm, device)[1])
                    continue
                result, w, c = timed_cpu(lambda t=trainers[name], b=batch: t.step([b]), device)
                tokens[name] += result.tokens
                seconds[name][0] += w
                seconds[name][1] += c
        for name in trainers:
            wall[name].append(tokens[name] / seconds[name][0])
            cpu[name].append(tokens[name] / max(seconds[name][1], 1e-9))
    return wall, cpu, gemm_s


def profile_round(trainers: dict[str, Trainer], batches: list[Batch], args, device) -> dict:
    """One more round per model (a step on each batch) under ``torch.profiler``."""
    fns = {
        name: (lambda t=trainer: [t.step([b]) for b in batches])
        for name, trainer in trainers.items()
    }
    return common.profile_ops(fns, device, args.profile_rows, title="Training round, ")


# ---------------------------------------------------------------------------- results


def make_rows(runs, cpu_runs, params, batches, args, vocab, precision, device, gemm) -> list[dict]:
    """One row per model; ``gemm``: the GEMM reference's JSON section (``Gemm.report``)."""
    tokens_per_round = sum(b.num_src_tokens + b.num_tgt_tokens for b in batches)
    tflop_per_token = sum(train_flops(b, args, vocab) for b in batches) / tokens_per_round / 1e12
    peak = args.peak_tflops or common.bf16_peak_tflops(device)
    rows = []
    for name in runs:
        tps = common.median(runs[name])
        achieved = tflop_per_token * tps  # TFLOP/s
        per_round = [tflop_per_token * t / g for t, g in zip(runs[name], gemm["tflops_runs"])]
        row = {
            "model": name if name == "torch" else f"ours ({name})",
            "impl": name,
            "params": params[name],
            "tokens_per_s": tps,
            "tokens_per_s_runs": runs[name],
            "step_s": tokens_per_round / tps / len(batches),
            "tflops": achieved,
            "matmul_efficiency": achieved / gemm["tflops"],
            "matmul_efficiency_median_of_rounds": common.median(per_round),
            "mfu": achieved / peak if peak and precision == "bf16" else None,
        }
        if args.cpu_time:
            cpu_tps = common.median(cpu_runs[name])
            row["cpu_tokens_per_s"] = cpu_tps
            row["cpu_tokens_per_s_runs"] = cpu_runs[name]
            row["cpu_step_s"] = tokens_per_round / cpu_tps / len(batches)
        rows.append(row)
    add_ratios(rows, runs, "tokens_per_s", "vs_torch")
    if args.cpu_time:
        add_ratios(rows, cpu_runs, "cpu_tokens_per_s", "cpu_vs_torch")
    return rows


def add_ratios(rows: list[dict], runs: dict, key: str, out: str) -> None:
    """``row[out]``: ``row[key]`` over the torch baseline's, and, as a cross-check, the median
    of the same ratio within each round (``row[out + "_median_of_rounds"]``)."""
    base = next((r[key] for r in rows if r["impl"] == "torch"), None)
    for row in rows:
        row[out] = common.ratio(row[key], base)
        if "torch" in runs:
            paired = [a / b for a, b in zip(runs[row["impl"]], runs["torch"])]
            row[out + "_median_of_rounds"] = common.median(paired)


def print_rows(rows: list[dict], batches: dict, gemm: dict, args, precision: str) -> None:
    """The table, after a line on the batches' padding and one on the GEMM reference."""
    shapes = [tuple(b["src_shape"]) + (b["tgt_shape"][1],) for b in batches["shapes"]]
    ratio = batches["padding_ratio"]
    title = (
        f"\nTraining step, {args.data} batches (B, S, T) {shapes}, "
        f"{batches['src_tokens'] + batches['tgt_tokens']} tokens/round; real/padded tokens: "
        f"src {ratio['src']:.1%}, tgt {ratio['tgt']:.1%}, all {ratio['all']:.1%}\n"
        f"GEMM reference: {gemm['op']} in {gemm['dtype']}, {gemm['threads']} threads: "
        f"{gemm['tflops']:.4g} TFLOP/s (median of {gemm['timed_calls']} calls, "
        f"{gemm['call_s'] * 1e3:.3g} ms each)\n"
        f"precision {precision}, {torch.get_num_threads()} threads; 'of GEMM' = the model's "
        "matmul TFLOP/s over the GEMM's"
    )
    columns = COLUMNS + (CPU_COLUMNS if args.cpu_time else []) + FLOP_COLUMNS
    common.print_table(rows, columns, title=title)


def batch_report(batches: list[Batch]) -> dict:
    """The ``batches`` section: token counts, every batch's shape and ``padding_ratio``, real
    (non-pad) over padded tokens per side and overall (``{"src", "tgt", "all"}``, 1.0: no
    padding, from :func:`translate.data.batching.padding_ratio`). Target tokens are
    ``tgt_out``'s (what the loss counts); padded sizes are ``B x S`` and ``B x T``."""
    counts = {
        "src_tokens": sum(b.num_src_tokens for b in batches),
        "src_padded": sum(b.src.numel() for b in batches),
        "tgt_tokens": sum(b.num_tgt_tokens for b in batches),
        "tgt_padded": sum(b.tgt_out.numel() for b in batches),
    }
    shapes = [
        {
            "src_shape": list(b.src.shape),
            "tgt_shape": list(b.tgt_in.shape),
            "src_tokens": b.num_src_tokens,
            "tgt_tokens": b.num_tgt_tokens,
        }
        for b in batches
    ]
    return {
        "count": len(batches),
        **counts,
        "padding_ratio": padding_ratio(batches),
        "shapes": shapes,
    }


# ---------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m translate.bench.train", description=__doc__.split("\n\n")[0]
    )
    common.add_common_args(parser, "train")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--precision", default="32", choices=["32", "bf16", "fp16"])
    parser.add_argument("--compile", action="store_true", help="torch.compile every model")
    parser.add_argument(
        "--optim", type=common.existing_file, default=OPTIM_CONF, help="a conf/optim file"
    )
    parser.add_argument("--data", choices=["synthetic", "sample"], default="synthetic")
    parser.add_argument("--cache-dir", type=Path, default=common.ROOT / "outputs" / "cache")
    # Synthetic batches draw ids from 4 (after the special ones) to --vocab.
    parser.add_argument(
        "--vocab", type=common.number(low=5), default=5000, help="synthetic data only"
    )
    parser.add_argument(
        "--max-tokens", type=common.number(), default=2048, help="padded tokens per side"
    )
    parser.add_argument("--batches", type=common.number(), default=None, help="batches per round")
    parser.add_argument("--rounds", type=common.number(), default=None)
    parser.add_argument(
        "--warmup", type=common.number(low=0), default=2, help="untimed steps per model"
    )
    parser.add_argument("--d-model", type=common.number(), default=256)
    parser.add_argument("--heads", type=common.number(), default=8)
    parser.add_argument(
        "--layers", type=common.number(), default=2, help="encoder and decoder layers each"
    )
    parser.add_argument("--d-ff", type=common.number(), default=512)
    parser.add_argument("--dropout", type=common.number(float, 0, 0.99), default=0.1)
    parser.add_argument("--attention-dropout", type=common.number(float, 0, 0.99), default=0.0)
    parser.add_argument("--activation-dropout", type=common.number(float, 0, 0.99), default=0.0)
    parser.add_argument("--activation", choices=["relu", "gelu"], default="relu")
    parser.add_argument("--post-norm", action="store_true")
    parser.add_argument(
        "--peak-tflops", type=common.number(float, 1e-3), default=None, help="for the MFU estimate"
    )
    common.add_gemm_args(parser)
    parser.add_argument(
        "--cpu-time", action="store_true", help="also report tokens per process CPU second"
    )
    common.add_profile_args(parser, "one training round per model")
    args = parser.parse_args(argv)
    common.check_heads(parser, args.d_model, [args.heads])
    args.batches = args.batches or (2 if args.quick else 4)
    args.rounds = args.rounds or (3 if args.quick else 7)
    return args


def make_summary(rows: list[dict]) -> dict:
    by_impl = {row["impl"]: row for row in rows}
    summary = {
        f"train_tokens_per_s_{impl}_vs_torch": by_impl.get(impl, {}).get("vs_torch")
        for impl in ("sdpa", "manual")
    }
    summary["train_matmul_efficiency"] = by_impl.get("sdpa", {}).get("matmul_efficiency")
    return summary


def main(argv: Sequence[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    optim = load_optim(args.optim)
    with common.Session(args) as session:
        device = session.device
        precision = resolve_precision(args.precision, device, key="--precision")
        batches, vocab = load_batches(args)
        trainers, params = make_trainers(args, vocab, optim, device, precision)
        gemm = common.Gemm.from_args(args, device)
        warm_up(trainers, batches, args, device, gemm)
        runs, cpu_runs, gemm_s = train_rounds(trainers, batches, args.rounds, device, gemm)
        gemm_info = gemm.report(gemm_s)
        rows = make_rows(runs, cpu_runs, params, batches, args, vocab, precision, device, gemm_info)
        summary = make_summary(rows)
        profiles = profile_round(trainers, batches, args, device) if args.profile else None
        batch_info = batch_report(batches)
        print_rows(rows, batch_info, gemm_info, args, precision)
        common.print_summary(summary, TARGETS)
        result = common.report(
            "train",
            argv,
            args,
            device,
            summary,
            targets={k: list(v) for k, v in TARGETS.items()},
            precision=precision,
            optim=dataclasses.asdict(optim),
            batches=batch_info,
            tokens_per_round=batch_info["src_tokens"] + batch_info["tgt_tokens"],
            model_flops_per_round=sum(train_flops(b, args, vocab) for b in batches),
            bf16_peak_tflops=args.peak_tflops or common.bf16_peak_tflops(device),
            gemm=gemm_info,
            rows=rows,
            **({"profile": profiles} if profiles is not None else {}),
        )
    common.write_json(args.json, result)
    return result


if __name__ == "__main__":
    run_plain_command(main)
