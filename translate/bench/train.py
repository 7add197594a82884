"""Training throughput side by side: our ``Seq2SeqTransformer`` (``impl=manual`` and
``impl=sdpa``) against the same architecture built from ``torch.nn.Transformer``.

Sizes default to ``experiment=multi30k_cpu``'s, attention and activation dropout 0. All train
with ``Trainer`` and ``--optim`` on the same synthetic batches, interleaved step by step with a
large GEMM (:class:`common.Gemm`): a model's matmul FLOP/s over the GEMM's is its
``matmul_efficiency``, how close training is to the machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf
from torch import Tensor, nn

from translate.bench import common
from translate.cli import run_plain_command
from translate.data.batching import Batch, TokenBatchSampler, collate, padding_ratio
from translate.data.tokenizer import Tokenizer
from translate.nn.model import Seq2SeqTransformer, TokenEmbedding, count_parameters, init_weights
from translate.runtime.device import resolve_precision, synchronize
from translate.runtime.timing import rotated, timed
from translate.schema import OptimSettings
from translate.settings import build as build_settings
from translate.training.step import Trainer, pads_shapes

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
    ("tflops", "TFLOP/s", ".3g"),
    ("matmul_efficiency", "of GEMM", ".3f"),
]


class TorchTransformer(nn.Module):
    """The baseline: ``torch.nn.Transformer``, pre-norm, inside our :class:`TokenEmbedding`, with
    our initialisation and dropouts (attention and feed-forward 0): only the attention differs."""

    def __init__(self, vocab_size, d_model, num_heads, d_ff, dropout, pad_id, **layers) -> None:
        super().__init__()
        self.embedding = TokenEmbedding(vocab_size, d_model, pad_id, dropout)
        with warnings.catch_warnings():  # "enable_nested_tensor is True, but ...": inference only
            warnings.filterwarnings("ignore", message="enable_nested_tensor")
            self.transformer = nn.Transformer(
                d_model,
                num_heads,
                dim_feedforward=d_ff,
                dropout=dropout,
                batch_first=True,
                norm_first=True,
                **layers,
            )
        for layer in (*self.transformer.encoder.layers, *self.transformer.decoder.layers):
            layer.self_attn.dropout = 0.0
            if hasattr(layer, "multihead_attn"):
                layer.multihead_attn.dropout = 0.0
            layer.dropout.p = 0.0  # between the two feed-forward linears
        init_weights(self)

    def forward(self, src: Tensor, tgt_in: Tensor, src_padding_mask=None, target_index=None):
        """Logits ``(B, T, V)``, or ``(N, V)`` at ``target_index (N,)``, as ours."""
        T = tgt_in.size(1)
        causal = nn.Transformer.generate_square_subsequent_mask(T, device=src.device)  # (T, T)
        out = self.transformer(
            self.embedding(src),
            self.embedding(tgt_in),
            tgt_mask=causal,
            src_key_padding_mask=src_padding_mask,
            memory_key_padding_mask=src_padding_mask,
            tgt_is_causal=True,
        )  # (B, T, D)
        if target_index is not None:
            out = out.reshape(-1, out.size(-1)).index_select(0, target_index)  # (N, D)
        return self.embedding.project(out)  # (B, T, V) or (N, V)


def synthetic_batches(args, vocab: int) -> list[Batch]:
    """``args.batches`` full batches cut by ``TokenBatchSampler`` from a Multi30k-sized pool."""
    rng = np.random.default_rng(args.seed)
    n = max(MULTI30K_TRAIN_PAIRS, 4 * args.batches * args.max_tokens // 16)
    src_lens, tgt_lens = common.multi30k_lengths(n, rng)
    sampler = TokenBatchSampler(src_lens + 1, tgt_lens + 1, args.max_tokens, True, args.seed)
    # Full batches only: a bucket's leftover (down to one sentence) times per-call overheads.
    full = [idx for idx in sampler if _padded(idx, src_lens, tgt_lens) >= args.max_tokens // 2]

    def pair(i: int) -> tuple:  # random token ids of the drawn lengths
        return i, rng.integers(4, vocab, src_lens[i]), rng.integers(4, vocab, tgt_lens[i])

    return [collate([pair(i) for i in idx]) for idx in full[: args.batches]]


def _padded(idx: list[int], src_lens, tgt_lens) -> int:
    """The larger side's padded token count of a batch (+1: the EOS)."""
    return len(idx) * (max(max(src_lens[idx]), max(tgt_lens[idx])) + 1)


def load_optim(path: Path) -> OptimSettings:
    return build_settings(OptimSettings, OmegaConf.load(path), "optim")


def model_kwargs(args, vocab: int) -> dict:
    layers = {"num_encoder_layers": args.layers, "num_decoder_layers": args.layers}
    sizes = {"d_model": args.d_model, "num_heads": args.heads, "d_ff": args.d_ff, **layers}
    return {"vocab_size": vocab, **sizes, "dropout": args.dropout, "pad_id": Tokenizer.PAD}


def build(name: str, kwargs: dict, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    if name == "torch":
        return TorchTransformer(**kwargs)
    return Seq2SeqTransformer(**kwargs, attention_dropout=0.0, attention_impl=name)


def make_trainers(args, vocab, optim, device, precision) -> tuple[dict, dict]:
    kwargs = model_kwargs(args, vocab)
    trainers, params = {}, {}
    pad = pads_shapes(device, precision)  # as training pads them
    for name in args.models:
        model = build(name, kwargs, args.seed).to(device)
        params[name] = count_parameters(model)
        compiled = torch.compile(model) if args.compile else None
        trainers[name] = Trainer(
            model, optim, device, precision, Tokenizer.PAD, compiled, pad_shapes=pad
        )
    return trainers, params


def train_flops(batch: Batch, args, vocab: int) -> float:
    """Matmul FLOPs of one training step (2 per multiply-add, x 3 for forward+backward) over the
    padded positions (no causal halving), plus the tied output projection over the real target
    tokens only (``target_index``); not the embedding, norms, softmax, loss or optimizer."""
    B, S = batch.src.shape
    T = batch.tgt_in.size(1)
    D, F, L = args.d_model, args.d_ff, args.layers
    enc = B * S * (4 * D * D + 2 * D * F) + 2 * B * S * S * D
    dec = B * T * (4 * D * D + 2 * D * F) + 2 * B * T * T * D  # self-attention, feed-forward
    dec += B * T * 2 * D * D + B * S * 2 * D * D + 2 * B * T * S * D  # cross-attention
    macs = L * (enc + dec) + batch.num_tgt_tokens * D * vocab  # + the tied output projection
    return 3 * 2 * macs


def warm_up(trainers: dict[str, Trainer], batches: list[Batch], args, device, gemm) -> None:
    """Compiled models see every batch shape twice (the second recompiles): none is timed."""
    warmup = max(args.warmup, 2 * len(batches)) if args.compile else args.warmup
    for trainer in trainers.values():
        for i in range(warmup):
            trainer.step([batches[i % len(batches)]])
    synchronize(device)
    gemm.warm_up()


def train_rounds(trainers: dict[str, Trainer], batches: list[Batch], rounds: int, device, gemm):
    """Per model tokens/s by round, the GEMM's seconds by round; each batch rotated among them."""
    names = [*trainers, GEMM]
    runs: dict[str, list[float]] = {name: [] for name in trainers}
    gemm_s: list[list[float]] = []
    for r in range(rounds):
        seconds, tokens = dict.fromkeys(trainers, 0.0), dict.fromkeys(trainers, 0)
        gemm_s.append([])
        for i, batch in enumerate(batches):
            for name in rotated(names, r + i):
                if name == GEMM:
                    gemm_s[-1].append(timed(gemm, device)[1])
                    continue
                result, s = timed(lambda t=trainers[name], b=batch: t.step([b]), device)
                tokens[name] += result.tokens
                seconds[name] += s
        for name in trainers:
            runs[name].append(tokens[name] / seconds[name])
    return runs, gemm_s


def make_rows(runs: dict, params: dict, batches: list[Batch], args, vocab, gemm) -> list[dict]:
    """One row per model; ``gemm``: ``Gemm.report``; ``vs_torch_median_of_rounds``: per round."""
    tokens_per_round = sum(b.num_src_tokens + b.num_tgt_tokens for b in batches)
    tflop_per_token = sum(train_flops(b, args, vocab) for b in batches) / tokens_per_round / 1e12
    base = common.median(runs["torch"]) if "torch" in runs else None
    rows = []
    for name, tokens_per_s in runs.items():
        tps = common.median(tokens_per_s)
        row = {
            "model": name if name == "torch" else f"ours ({name})",
            "impl": name,
            "params": params[name],
            "tokens_per_s": tps,
            "tokens_per_s_runs": tokens_per_s,
            "step_s": tokens_per_round / tps / len(batches),
            "tflops": tflop_per_token * tps,
            "matmul_efficiency": tflop_per_token * tps / gemm["tflops"],
            "vs_torch": common.ratio(tps, base),
        }
        if base is not None:
            paired = [a / b for a, b in zip(tokens_per_s, runs["torch"])]
            row["vs_torch_median_of_rounds"] = common.median(paired)
        rows.append(row)
    return rows


def batch_report(batches: list[Batch]) -> dict:
    """Real and padded tokens per side (target: ``tgt_out``), ratio, every batch's shape."""
    return {
        "count": len(batches),
        "src_tokens": sum(b.num_src_tokens for b in batches),
        "src_padded": sum(b.src.numel() for b in batches),
        "tgt_tokens": sum(b.num_tgt_tokens for b in batches),
        "tgt_padded": sum(b.tgt_out.numel() for b in batches),
        "padding_ratio": padding_ratio(batches),
        "shapes": [
            {"src_shape": list(b.src.shape), "tgt_shape": list(b.tgt_in.shape)}
            | {"src_tokens": b.num_src_tokens, "tgt_tokens": b.num_tgt_tokens}
            for b in batches
        ],
    }


def print_rows(rows: list[dict], batches: dict, gemm: dict, precision: str) -> None:
    shapes = [tuple(b["src_shape"]) + (b["tgt_shape"][1],) for b in batches["shapes"]]
    ratio = batches["padding_ratio"]
    title = (
        f"\nTraining step, batches (B, S, T) {shapes}, "
        f"{batches['src_tokens'] + batches['tgt_tokens']} tokens/round; real/padded tokens: "
        f"src {ratio['src']:.1%}, tgt {ratio['tgt']:.1%}, all {ratio['all']:.1%}\n"
        f"GEMM reference: {gemm['op']} in {gemm['dtype']}, {gemm['threads']} threads: "
        f"{gemm['tflops']:.4g} TFLOP/s (median of {gemm['timed_calls']} calls, "
        f"{gemm['call_s'] * 1e3:.3g} ms each)\n"
        f"precision {precision}, {torch.get_num_threads()} threads; 'of GEMM' = the model's "
        "matmul TFLOP/s over the GEMM's"
    )
    common.print_table(rows, COLUMNS, title=title)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = common.parser("train", __doc__)
    number, add = common.number, parser.add_argument
    add("--models", nargs="+", choices=MODELS, default=list(MODELS))
    add("--precision", default="32", choices=["32", "bf16", "fp16"])
    add("--compile", action="store_true", help="torch.compile every model")
    add("--optim", type=common.existing_file, default=OPTIM_CONF, help="a conf/optim file")
    # Synthetic batches draw ids from 4 (after the special ones) to --vocab.
    add("--vocab", type=number(low=5), default=5000)
    add("--max-tokens", type=number(), default=2048, help="per side, padded")
    add("--batches", type=number(), default=None, help="batches per round")
    add("--rounds", type=number(), default=None)
    add("--warmup", type=number(low=0), default=2, help="untimed steps a model")
    add("--d-model", type=number(), default=256)
    add("--heads", type=number(), default=8)
    add("--layers", type=number(), default=2, help="encoder and decoder each")
    add("--d-ff", type=number(), default=512)
    add("--dropout", type=number(float, 0, 0.99), default=0.1)
    add("--gemm-size", type=number(), help="n of the n x n GEMM (CPU 2048, CUDA 8192)")
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
    with common.session(args) as device:
        precision = resolve_precision(args.precision, device, key="--precision")
        batches = synthetic_batches(args, args.vocab)
        trainers, params = make_trainers(args, args.vocab, optim, device, precision)
        gemm = common.Gemm(device, args.gemm_size, args.seed)
        warm_up(trainers, batches, args, device, gemm)
        runs, gemm_s = train_rounds(trainers, batches, args.rounds, device, gemm)
        gemm_info = gemm.report(gemm_s)
        rows = make_rows(runs, params, batches, args, args.vocab, gemm_info)
        batch_info = batch_report(batches)
        print_rows(rows, batch_info, gemm_info, precision)
        sections = dict(precision=precision, optim=dataclasses.asdict(optim), batches=batch_info)
        sections.update(gemm=gemm_info, rows=rows)
        return common.finish("train", argv, args, device, make_summary(rows), TARGETS, **sections)


if __name__ == "__main__":
    run_plain_command(main)
